/**
 * The Redis-shaped parts of BullMQ's IQueueBackend, in one place, so the rest of the
 * package speaks Loam's API:
 *
 * | BullMQ expects                         | built here from                               |
 * |----------------------------------------|-----------------------------------------------|
 * | `keys` map, `toKey`, `parseNodeKey`    | the queue name (Loam tenants replace prefixes)|
 * | `clientName`, `CLIENT LIST` text       | the live workers / QueueEvents of the process |
 * | `moveToActive` Lua tuple               | a Loam lease turned into job JSON             |
 * | `finishedErrors` codes and messages    | Loam errors (NotFound, Fenced, InvalidState)  |
 * | `XREAD` reply                          | Watch events with BullMQ's field names        |
 * | job scheduler hash `[hash, nextMillis]`| a Loam schedule record                        |
 * | metrics tuple                          | counts                                        |
 *
 * The qualified name is the bare queue name (as BullMQ's Postgres backend does): a Loam
 * namespace, not a key prefix, separates tenants, and node keys are `<queue>:<id>`.
 */

export type KeysMap = Record<string, string>;

const KEY_TYPES = [
  "", "active", "wait", "waiting-children", "paused", "id", "delayed", "prioritized",
  "stalled-check", "completed", "failed", "stalled", "repeat", "limiter", "meta", "events",
  "pc", "marker", "de",
];

export function keysMap(qualifiedName: string): KeysMap {
  const out: KeysMap = {};
  for (const t of KEY_TYPES) out[t] = toKey(qualifiedName, t);
  return out;
}

export function toKey(qualifiedName: string, type: string): string {
  return `${qualifiedName}:${type}`;
}

/** `<queue>:<id>` (or `<prefix>:<queue>:<id>` from a Redis-minded caller) → parts. */
export function parseNodeKey(key: string): { prefix: string; queueName: string; id: string } {
  const parts = key.split(":");
  if (parts.length >= 3) {
    return { prefix: parts.slice(0, parts.length - 2).join(":"), queueName: parts[parts.length - 2], id: parts[parts.length - 1] };
  }
  const i = key.lastIndexOf(":");
  return { prefix: "", queueName: key.slice(0, i), id: key.slice(i + 1) };
}

/** The queue a `queueKey` / qualified name names (a Redis `bull:<queue>` is accepted). */
export function queueOfQualified(q: string): string {
  const i = q.lastIndexOf(":");
  return i >= 0 ? q.slice(i + 1) : q;
}

export function nodeKey(queue: string, id: string): string {
  return `${queue}:${id}`;
}

export function clientName(qualifiedName: string, suffix = ""): string {
  return `${qualifiedName}${suffix}`;
}

/** `CLIENT LIST`-style text: one `name=<n>` line per live connection name. */
export function clientListText(names: Map<string, number>): string[] {
  const lines: string[] = [];
  for (const [n, count] of names) for (let i = 0; i < count; i++) lines.push(`id=${hash(n) + i} name=${n}`);
  return [lines.join("\n")];
}

function hash(s: string): number {
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
  return Math.abs(h);
}

/** moveToActive's Lua reply: `[jobJson | null, jobId, rateLimitDelayMs, delayUntilMs]`. */
export function activeTuple(job: unknown | null, id = "", rateLimitDelay = 0, delayUntil = 0): any[] {
  return [job ?? null, id, rateLimitDelay, delayUntil];
}

// -- BullMQ's error codes and messages (enums/error-code, classes/finished-errors) ------
export const ErrorCode = {
  JobNotExist: -1,
  JobLockNotExist: -2,
  JobNotInState: -3,
  JobPendingChildren: -4,
  ParentJobNotExist: -5,
  JobLockMismatch: -6,
  ParentJobCannotBeReplaced: -7,
  JobBelongsToJobScheduler: -8,
  JobHasFailedChildren: -9,
  SchedulerJobIdCollision: -10,
  SchedulerJobSlotsBusy: -11,
} as const;

export function finishedError(a: { code: number; jobId?: string; parentKey?: string; command: string; state?: string }): Error {
  const { code, jobId, parentKey, command, state } = a;
  let msg: string;
  let name = "Error";
  switch (code) {
    case ErrorCode.JobNotExist: msg = `Missing key for job ${jobId}. ${command}`; break;
    case ErrorCode.JobLockNotExist: msg = `Missing lock for job ${jobId}. ${command}`; break;
    case ErrorCode.JobNotInState: msg = `Job ${jobId} is not in the ${state} state. ${command}`; break;
    case ErrorCode.JobPendingChildren: msg = `Job ${jobId} has pending dependencies. ${command}`; break;
    case ErrorCode.ParentJobNotExist: msg = `Missing key for parent job ${parentKey}. ${command}`; break;
    case ErrorCode.JobLockMismatch: msg = `Lock mismatch for job ${jobId}. Cmd ${command} from ${state}`; break;
    case ErrorCode.ParentJobCannotBeReplaced: msg = `The parent job ${parentKey} cannot be replaced. ${command}`; break;
    case ErrorCode.JobBelongsToJobScheduler: msg = `Job ${jobId} belongs to a job scheduler and cannot be removed directly. ${command}`; break;
    case ErrorCode.JobHasFailedChildren:
      msg = `Cannot complete job ${jobId} because it has at least one failed child. ${command}`;
      name = "UnrecoverableError";
      break;
    case ErrorCode.SchedulerJobIdCollision: msg = `Cannot create job scheduler iteration - job ID already exists. ${command}`; break;
    case ErrorCode.SchedulerJobSlotsBusy: msg = `Cannot create job scheduler iteration - current and next time slots already have jobs. ${command}`; break;
    default: msg = `Unknown code ${code} error for ${jobId}. ${command}`;
  }
  const err = new Error(msg) as Error & { code: number };
  err.name = name;
  err.code = code;
  return err;
}

// -- streams ---------------------------------------------------------------------------
export type StreamEntry = [string, string[]];

/** XREAD's reply for one stream: `[[stream, [[id, [k, v, ...]], ...]]]`, or null. */
export function xreadReply(stream: string, entries: StreamEntry[]): any {
  return entries.length ? [[stream, entries]] : null;
}

/** A stream entry from an event name and its fields (every value a string, as XADD). */
export function streamEntry(id: string, event: string, fields: Record<string, string | number | undefined>): StreamEntry {
  const flat = ["event", event];
  for (const [k, v] of Object.entries(fields)) {
    if (v !== undefined) flat.push(k, String(v));
  }
  return [id, flat];
}

// -- job schedulers ----------------------------------------------------------------------
export interface SchedulerFields {
  name: string;
  iterationCount: number;
  limit?: number;
  startDate?: number;
  endDate?: number;
  tz?: string;
  pattern?: string;
  every?: number;
  offset?: number;
  data?: string;
  opts?: string;
}

/** The scheduler hash as `HGETALL repeat:<id>` returns it: every value a string. */
export function schedulerHash(f: SchedulerFields): Record<string, string> {
  const h: Record<string, string> = { name: f.name, ic: String(f.iterationCount) };
  if (f.limit) h.limit = String(f.limit);
  if (f.startDate) h.startDate = String(f.startDate);
  if (f.endDate) h.endDate = String(f.endDate);
  if (f.tz) h.tz = f.tz;
  if (f.pattern) h.pattern = f.pattern;
  if (f.every) h.every = String(f.every);
  if (f.offset !== undefined) h.offset = String(f.offset); // BullMQ stores 0 too
  if (f.data !== undefined) h.data = f.data;
  if (f.opts !== undefined) h.opts = f.opts;
  return h;
}

/** `ZRANGE repeat WITHSCORES`: `[id, score, id, score, ...]`. */
export function withScores(items: [string, number][]): string[] {
  return items.flatMap(([id, score]) => [id, String(score)]);
}

/** getMetrics' reply: `[[count, prevTS, prevCount], points newest first, points returned]`. */
export function metricsTuple(count: number, points: number[], total = points.length, prevTs = 0, prevCount = 0): [string[], string[], number] {
  return [[String(count), String(prevTs), String(prevCount)], points.map(String), total];
}
