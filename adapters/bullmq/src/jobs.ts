/**
 * BullMQ jobs ↔ Loam jobs. A BullMQ job id is the Loam job key (a custom `jobId`, or the
 * queue's counter in decimal); the Loam job id (a ULID) stays inside the backend. BullMQ's
 * public options ride along in task headers, so `Job.fromJSON` gets them back unchanged.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  DedupMode,
  EnqueueOptsSchema,
  JobState,
  TaskSpecSchema,
  type EnqueueOpts,
  type Job as LoamJob,
  type TaskSpec,
} from "./gen/loam/jobs/v1/types_pb.js";
import { nodeKey, queueOfQualified } from "./redis-shape.js";
import { toLoamQueue } from "./queue-names.js";

export const H_OPTS = "bullmq-opts";
export const H_TS = "bullmq-ts";
export const H_PARENT = "bullmq-parent";
export const H_REPEAT = "bullmq-rjk";
export const H_SCHEDULE = "x-loam-schedule"; // set by Loam on every tick job of a schedule
export const H_TICK = "x-loam-tick";

const enc = new TextEncoder();
const dec = new TextDecoder();
export const MS = 1_000_000n;

export function ms(ns: bigint): number {
  return Number(ns / MS);
}

export function ns(msValue: number): bigint {
  return BigInt(Math.max(0, Math.round(msValue))) * MS;
}

/** What BullMQ hands addJob (Job.asJSON()). */
export interface JobJsonIn {
  id?: string;
  name: string;
  data: string;
  opts: Record<string, any>;
  timestamp: number;
  delay?: number;
  priority?: number;
  parent?: { id?: string; queueKey: string };
  parentKey?: string;
  repeatJobKey?: string;
  deduplicationId?: string;
}

export type EnqueueOptsInit = MessageInitShape<typeof EnqueueOptsSchema>;

/** BullMQ's removeOnComplete / removeOnFail → (count, age ns); undefined = keep. */
export function keep(v: unknown): { count?: bigint; age?: bigint } | undefined {
  if (v === undefined || v === null || v === false) return undefined;
  if (v === true) return { count: 0n };
  if (typeof v === "number") return v < 0 ? undefined : { count: BigInt(Math.floor(v)) };
  if (typeof v === "object") {
    const o = v as { count?: number; age?: number };
    const out: { count?: bigint; age?: bigint } = {};
    if (typeof o.count === "number" && o.count >= 0) out.count = BigInt(Math.floor(o.count));
    if (typeof o.age === "number") out.age = BigInt(Math.floor(o.age)) * 1_000_000_000n;
    return out;
  }
  return undefined;
}

/** The public options BullMQ keeps on the job, minus what we store elsewhere. */
function storedOpts(opts: Record<string, any>): Record<string, any> {
  const o = { ...opts };

  return o;
}

export interface TaskAndOpts {
  task: MessageInitShape<typeof TaskSpecSchema>;
  opts: EnqueueOptsInit;
}

/** A BullMQ job (asJSON) as a Loam task and enqueue options. */
export function toLoam(job: JobJsonIn, jobId: string | undefined, parentKey?: string): TaskAndOpts {
  const o = job.opts ?? {};
  const headers: Record<string, string> = {
    [H_OPTS]: JSON.stringify(storedOpts(o)),
    [H_TS]: String(job.timestamp ?? Date.now()),
  };
  const parent = o.parent ?? job.parent;
  const pKey = parentKey || job.parentKey || (parent?.id ? nodeKey(queueOfQualified(parent.queue ?? parent.queueKey), parent.id) : undefined);
  if (parent && pKey) headers[H_PARENT] = JSON.stringify({ key: pKey, queueKey: parent.queue ?? parent.queueKey, id: parent.id });
  if (job.repeatJobKey) headers[H_REPEAT] = job.repeatJobKey;
  const opts: EnqueueOptsInit = {};
  if (jobId) {
    opts.jobKey = String(jobId);
    opts.jobKeyKeepsFirst = true; // BullMQ: adding a taken id returns the existing job
  }
  else opts.jobKeyFromCounter = true;
  const delay = Number(o.delay ?? job.delay ?? 0);
  // Relative, so the server holds the job for `delay` by its clock from now: the
  // producer's clock may differ from the server's (a skewed host, fake timers in tests).
  if (delay > 0) opts.notBefore = { kind: { case: "delayNs", value: ns(delay) } };
  const priority = Number(o.priority ?? 0);
  if (priority > 0) opts.priority = priority;
  else if (o.lifo) opts.lifo = true;
  opts.attempts = Math.max(1, Number(o.attempts ?? 1));
  // BullMQ Pro's groups: a group is a Loam subject (one job of the group at a time, in
  // order). The group's own concurrency, rate limit, priority and size cap do not map
  // (README, "Groups").
  const groupId = o.group?.id;
  if (groupId !== undefined && groupId !== null && String(groupId) !== "") opts.subject = String(groupId);
  const rc = keep(o.removeOnComplete);
  const rf = keep(o.removeOnFail);
  if (rc || rf) {
    opts.retention = {
      completedCount: rc?.count, completedAgeNs: rc?.age,
      failedCount: rf?.count, failedAgeNs: rf?.age,
    };
  }
  const dd = o.deduplication;
  if (dd?.id) {
    // keepLastIfActive: BullMQ's key has no expiry; it goes when the job finishes.
    const ttl = dd.ttl && !dd.keepLastIfActive ? ns(dd.ttl) : 0n;
    const debounce = !!(ttl && dd.extend);
    opts.dedup = {
      id: String(dd.id),
      mode: debounce ? DedupMode.DEBOUNCE : ttl ? DedupMode.THROTTLE : DedupMode.SIMPLE,
      ttlNs: ttl,
      extend: !!(ttl && dd.extend),
      // BullMQ's replace: a new job takes the place of a delayed one (a new id), which
      // is Loam's replace_job, not debounce's replace (the delayed job keeps its id).
      replaceJob: !!dd.replace,
      keepLastIfActive: !!dd.keepLastIfActive,
    };
  }
  if (parent?.id && !o.__flowNode) {
    opts.parent = {
      queue: toLoamQueue(queueOfQualified(parent.queue ?? parent.queueKey)),
      jobId: String(parent.id),
      failParentOnFailure: !!o.failParentOnFailure,
      continueParentOnFailure: !!o.continueParentOnFailure,
      ignoreDependencyOnFailure: !!o.ignoreDependencyOnFailure,
      removeDependencyOnFailure: !!o.removeDependencyOnFailure,
      keepWaitingOnFailure: !(
        o.failParentOnFailure || o.continueParentOnFailure || o.ignoreDependencyOnFailure || o.removeDependencyOnFailure
      ),
    };
  }
  const task = {
    name: job.name,
    payload: { data: enc.encode(job.data ?? "{}"), contentType: "application/json" },
    headers,
  };
  return { task, opts };
}

export const STATE_NAMES: Record<number, string> = {
  [JobState.WAITING]: "waiting",
  [JobState.PRIORITIZED]: "prioritized",
  [JobState.DELAYED]: "delayed",
  [JobState.ACTIVE]: "active",
  [JobState.WAITING_CHILDREN]: "waiting-children",
  [JobState.COMPLETED]: "completed",
  [JobState.FAILED]: "failed",
  [JobState.DEAD_LETTERED]: "failed",
  [JobState.CANCELED]: "failed",
};

export function stateName(s: JobState): string {
  return STATE_NAMES[s] ?? "unknown";
}

/** The Loam states of a BullMQ job type (getRanges, clean); none for types Loam has no list for. */
export const STATE_BY_TYPE: Record<string, JobState[]> = {
  wait: [JobState.WAITING],
  waiting: [JobState.WAITING],
  paused: [],
  prioritized: [JobState.PRIORITIZED],
  delayed: [JobState.DELAYED],
  active: [JobState.ACTIVE],
  completed: [JobState.COMPLETED],
  failed: [JobState.FAILED, JobState.DEAD_LETTERED, JobState.CANCELED],
  "waiting-children": [JobState.WAITING_CHILDREN],
  repeat: [],
};

/** The BullMQ id of a Loam job: its job key, or (tick jobs of a schedule) its Loam id. */
export function bullId(j: { id: string; opts?: EnqueueOpts }): string {
  return j.opts?.jobKey || j.id;
}

function text(b: Uint8Array | undefined): string {
  return b && b.length ? dec.decode(b) : "";
}

function parseJson(s: string, dflt: any): any {
  if (!s) return dflt;
  try {
    return JSON.parse(s);
  } catch {
    return dflt;
  }
}

export function attemptsMade(j: LoamJob): number {
  if (j.state === JobState.COMPLETED) return j.attempt + 1;
  if (j.state === JobState.FAILED || j.state === JobState.DEAD_LETTERED) {
    return j.attempt >= j.attemptsMax ? j.attempt : j.attempt + 1;
  }
  return j.attempt;
}

/** Job.fromJSON's input from a Loam job (a leased one gets `processedBy`). */
export function toJobJson(j: LoamJob, extra?: { processedBy?: string }): any {
  const h = j.task?.headers ?? {};
  const opts = parseJson(h[H_OPTS] ?? "", {});
  const id = bullId(j);
  const json: any = {
    id,
    name: j.task?.name ?? "",
    data: text(j.task?.payload?.data) || "{}",
    opts,
    progress: parseJson(text(j.progress), 0),
    attemptsMade: attemptsMade(j),
    // Every lease bumps the epoch (so does a stalled reclaim): that counts the starts that
    // spent no attempt too (moveToDelayed, moveToWaitingChildren, back to wait).
    attemptsStarted: Math.max(
      j.attempt + j.stalled + (j.processedNs || j.state === JobState.ACTIVE ? 1 : 0),
      Number(j.epoch - j.retryEpoch) - j.stalled,
    ),
    stalledCounter: j.stalled,
    timestamp: Number(h[H_TS] ?? 0) || ms(j.createdNs),
    // BullMQ keeps the last delay it applied (a retry's backoff, or the delay given)
    // until the job is promoted, which sets it to 0.
    delay:
      j.state !== JobState.DELAYED && j.state !== JobState.WAITING_CHILDREN
        ? 0
        : j.attempt === 0 && !j.errors.length
          ? Number(opts.delay ?? 0)
          : j.state === JobState.DELAYED && j.dueNs && j.stateNs
            ? ms(j.dueNs - j.stateNs)
            : 0,
    priority: j.opts?.priority ?? 0,
    failedReason: "",
    returnvalue: text(j.result?.data) || "null",
  };
  if (j.processedNs) json.processedOn = ms(j.processedNs);
  if (j.finishedNs) json.finishedOn = ms(j.finishedNs);
  if (j.errors.length) {
    const last = j.errors[j.errors.length - 1];
    // job.retry() clears BullMQ's failedReason; Loam keeps the error history and resets
    // processedNs, so a retried job that has not run since shows no reason.
    if (j.processedNs || stateName(j.state) === "failed") json.failedReason = last.message;
    json.stacktrace = last.stacktrace || "[]";
  }
  if (j.deferredFailure) json.deferredFailure = j.deferredFailure;
  else if (j.state === JobState.ACTIVE && j.failedChild) json.deferredFailure = j.failedChild;
  const parent = j.parents.length || j.opts?.parent ? parseJson(h[H_PARENT] ?? "", null) : null;
  if (parent) {
    json.parentKey = parent.key;
    json.parent = { id: parent.id, queueKey: parent.queueKey };
    for (const f of ["fpof", "rdof", "idof", "cpof"] as const) {
      const name = { fpof: "failParentOnFailure", rdof: "removeDependencyOnFailure", idof: "ignoreDependencyOnFailure", cpof: "continueParentOnFailure" }[f];
      if (opts[name]) json.parent[f] = true;
    }
  }
  const rjk = h[H_REPEAT] || h[H_SCHEDULE];
  if (rjk) json.repeatJobKey = rjk.startsWith("bullmq:") ? rjk.slice(rjk.indexOf(":", 7) + 1) : rjk;
  if (j.opts?.dedup?.id) json.deduplicationId = j.opts.dedup.id;
  if (extra?.processedBy ?? j.worker) json.processedBy = extra?.processedBy ?? j.worker;
  return json;
}

export function payloadOf(data: unknown): { data: Uint8Array; contentType: string } {
  return { data: enc.encode(JSON.stringify(data ?? {})), contentType: "application/json" };
}

export function utf8(s: string): Uint8Array {
  return enc.encode(s);
}

export function fromUtf8(b: Uint8Array | undefined): string {
  return text(b);
}

export type { LoamJob, TaskSpec };
