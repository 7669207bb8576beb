/** The REST facade, typed from /openapi.json (api.gen.ts). Every call sends the signed-in
 * token as a bearer header (no cookies); errors come back as ApiError with the
 * server's `{code, message}`. */
import type { components } from "./api.gen";

export type Schemas = components["schemas"];
export type Job = Schemas["JobView"];
export type JobDetail = Schemas["JobDetail"];
export type JobPage = Schemas["JobPage"];
export type Counts = Schemas["Counts"];
export type QueueSummary = Schemas["QueueSummary"];
export type QueueDetail = Schemas["QueueDetail"];
export type QueueStats = Schemas["QueueStats"];
export type QueueActionResult = Schemas["QueueActionResult"];
export type JobActionResult = Schemas["JobActionResult"];
export type Schedule = Schemas["ScheduleView"];
export type Worker = Schemas["WorkerView"];
export type WhoAmI = Schemas["WhoAmI"];
export type Dependency = Schemas["DependencyView"];
export type StateName = Job["state"];
export type Batch = Schemas["BatchView"];
export type BatchBody = Schemas["BatchBody"];
export type MetricsHistory = Schemas["MetricsHistoryView"];
export type MetricsPoint = Schemas["MetricsPoint"];
export type AuditPage = Schemas["AuditPage"];
export type AuditEntry = Schemas["AuditEntry"];
export type EngineRun = Schemas["EngineRunView"];
/** A durable promise tree (durable mode's REST, mounted only with it, so not in the generated types). */
export interface DurableNode { promise: Record<string, unknown>; parent?: string | null;
  task?: Record<string, unknown> | null; timedOut?: boolean | null }
export interface DurableTree { root: string; promises: DurableNode[] }
/** A page of durable executions (their root promises), in id order. */
export interface DurableExecutions { executions: { promise: Record<string, unknown>; timedOut?: boolean | null }[];
  cursor?: string | null }
/** A Flink deployment as the engine answers it (its REST routes are not typed in /openapi.json). */
export interface FlinkDeployment {
  name: string; state: string; version: number; kind: string; job_id: string; last_error: string;
  created_ns: number; updated_ns: number; savepoint_interval_s: number;
  versions: { number: number; created_ns: number; spec: Record<string, unknown> }[];
  savepoints: { path: string; version: number; job_id: string; taken_ns: number; reason: string }[];
  pending: { action: string; step: string } | null;
  job?: { job_id: string; state: string; all_running: boolean; restarts: number; checkpoints: number;
    latest_checkpoint: string; restored_from: string };
}

export const STATES: StateName[] = [
  "waiting", "prioritized", "delayed", "active", "waiting-children",
  "completed", "failed", "dead-lettered", "canceled",
];

const TOKEN_KEY = "loam.token";
const NAMESPACE_KEY = "loam.namespace"; // without auth (loam dev): which namespace to show

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t: string | null): void {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function devNamespace(): string | null {
  return sessionStorage.getItem(NAMESPACE_KEY);
}

export function setDevNamespace(ns: string | null): void {
  if (ns) sessionStorage.setItem(NAMESPACE_KEY, ns);
  else sessionStorage.removeItem(NAMESPACE_KEY);
}

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string) {
    super(message);
  }
}

export function headers(extra: Record<string, string> = {}): Record<string, string> {
  const t = token();
  if (t) return { ...extra, authorization: `Bearer ${t}` };
  const ns = devNamespace(); // a server without auth takes the namespace from this header
  return ns ? { ...extra, "x-loam-namespace": ns } : extra;
}

async function request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  let resp: Response;
  try {
    resp = await fetch(path, {
      method,
      // x-requested-with: a write a browser sends cross-origin only after a preflight,
      // which the server refuses to strangers (its CSRF check, docs/security.md)
      headers: headers(body === undefined ? { "x-requested-with": "loam-console" } : { "content-type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
  } catch (e) {
    if ((e as Error).name === "AbortError") throw e;
    throw new ApiError(0, "unavailable", "the server cannot be reached");
  }
  if (!resp.ok) {
    let code = "internal", message = `HTTP ${resp.status}`;
    try {
      const err = await resp.json();
      code = err.code ?? code;
      message = err.message ?? message;
    } catch { /* not JSON */ }
    throw new ApiError(resp.status, code, message);
  }
  return resp.status === 204 ? (undefined as T) : ((await resp.json()) as T);
}

const q = encodeURIComponent;

/** Save a response (an export) as a file: fetched with the bearer header, which a plain
 * link cannot send. */
export async function download(path: string, filename: string): Promise<void> {
  const resp = await fetch(path, { headers: headers() });
  if (!resp.ok) {
    const err = await resp.json().catch(() => ({}));
    throw new ApiError(resp.status, err.code ?? "internal", err.message ?? `HTTP ${resp.status}`);
  }
  saveBlob(await resp.blob(), filename);
}

export function saveBlob(blob: Blob, filename: string): void {
  const url = URL.createObjectURL(blob);
  const a = Object.assign(document.createElement("a"), { href: url, download: filename });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export const api = {
  whoami: () => request<WhoAmI>("GET", "/v1/whoami"),
  queues: () => request<Schemas["QueueList"]>("GET", "/v1/queues"),
  queueStats: () => request<Schemas["QueueStatsList"]>("GET", "/v1/queues:stats"),
  queue: (name: string) => request<QueueDetail>("GET", `/v1/queues/${q(name)}`),
  jobs: (queue: string, opts: { states: StateName[]; name?: string; pageSize?: number; pageToken?: string }, signal?: AbortSignal) => {
    const p = new URLSearchParams();
    for (const s of opts.states) p.append("state", s);
    if (opts.name) p.set("name", opts.name);
    p.set("page_size", String(opts.pageSize ?? 50));
    if (opts.pageToken) p.set("page_token", opts.pageToken);
    p.set("view", "summary"); // a list shows no payloads: the server leaves them out
    return request<JobPage>("GET", `/v1/queues/${q(queue)}/jobs?${p}`, undefined, signal);
  },
  search: (queue: string, opts: { text: string; field: string; states: StateName[]; name?: string; pageToken?: string }, signal?: AbortSignal) => {
    const p = new URLSearchParams({ text: opts.text, in: opts.field, page_size: "50" });
    for (const s of opts.states) p.append("state", s);
    if (opts.name) p.set("name", opts.name);
    if (opts.pageToken) p.set("page_token", opts.pageToken);
    return request<Schemas["SearchPage"]>("GET", `/v1/queues/${q(queue)}/jobs:search?${p}`, undefined, signal);
  },
  job: (queue: string, id: string) => request<JobDetail>("GET", `/v1/queues/${q(queue)}/jobs/${q(id)}`),
  children: (queue: string, id: string) =>
    request<Schemas["ChildrenList"]>("GET", `/v1/queues/${q(queue)}/jobs/${q(id)}/children`),
  jobAction: (queue: string, id: string, verb: "retry" | "remove" | "promote" | "cancel") =>
    request<JobActionResult>("POST", `/v1/queues/${q(queue)}/jobs/${q(id)}:${verb}`),
  changePriority: (queue: string, id: string, priority: number) =>
    request<JobActionResult>("POST", `/v1/queues/${q(queue)}/jobs/${q(id)}:change-priority`, { priority }),
  retryWithPayload: (queue: string, id: string, data: unknown) =>
    request<JobActionResult>("POST", `/v1/queues/${q(queue)}/jobs/${q(id)}:retry-with-payload`, { data }),
  redrivePreview: (queue: string) => request<Schemas["RedrivePreview"]>("GET", `/v1/queues/${q(queue)}/dead-letters:preview?limit=20`),
  failures: (queue: string, state: "failed" | "dead-lettered") =>
    request<Schemas["FailureGroups"]>("GET", `/v1/queues/${q(queue)}/failures?state=${state}`),
  enqueue: (queue: string, body: Schemas["EnqueueBody"]) => request<Schemas["EnqueueResult"]>("POST", `/v1/queues/${q(queue)}/jobs`, body),
  exportPath: (queue: string, format: string, opts: { states: StateName[]; name?: string; text?: string; field?: string }) => {
    const p = new URLSearchParams({ format });
    for (const s of opts.states) p.append("state", s);
    if (opts.name) p.set("name", opts.name);
    if (opts.text) { p.set("text", opts.text); p.set("in", opts.field ?? "any"); }
    return `/v1/queues/${q(queue)}/jobs:export?${p}`;
  },
  queueAction: (queue: string, verb: "pause" | "resume" | "drain" | "clean", body?: unknown) =>
    request<QueueActionResult>("POST", `/v1/queues/${q(queue)}:${verb}`, body ?? {}),
  redrive: (queue: string) => request<QueueActionResult>("POST", `/v1/queues/${q(queue)}/dead-letters:redrive`, {}),
  startBatch: (queue: string, body: BatchBody) => request<Batch>("POST", `/v1/queues/${q(queue)}/batches`, body),
  /** The batch record; with afterVersion, the server waits up to waitMs for a newer one. */
  batch: (id: string, afterVersion = 0, waitMs = 0, signal?: AbortSignal) =>
    request<Batch>("GET", `/v1/batches/${q(id)}?after_version=${afterVersion}&wait_ms=${waitMs}`, undefined, signal),
  schedules: (pageToken?: string) =>
    request<Schemas["SchedulePage"]>("GET", `/v1/schedules?page_size=100${pageToken ? `&page_token=${q(pageToken)}` : ""}`),
  workers: (queue: string) => request<Schemas["WorkerList"]>("GET", `/v1/queues/${q(queue)}/workers`),
  metrics: (queue: string, range: string) => request<MetricsHistory>("GET", `/v1/queues/${q(queue)}/metrics?range=${q(range)}`),
  audit: (opts: { queue?: string; job?: string; before?: string; limit?: number } = {}) => {
    const p = new URLSearchParams({ limit: String(opts.limit ?? 50) });
    if (opts.queue) p.set("queue", opts.queue);
    if (opts.job) p.set("job", opts.job);
    if (opts.before) p.set("before", opts.before);
    return request<AuditPage>("GET", `/v1/audit?${p}`);
  },
  flow: (id: string) => request<Schemas["FlowView"]>("GET", `/v1/flows/${q(id)}`),
  engineRuns: (pageToken?: string) =>
    request<Schemas["EngineRunList"]>("GET", `/v1/engines/runs?page_size=50${pageToken ? `&page_token=${q(pageToken)}` : ""}`),
  engineRun: (id: string) => request<EngineRun>("GET", `/v1/engines/runs/${q(id)}`),
  engineRunLogs: (id: string, after = 0) =>
    request<Schemas["EngineLogPage"]>("GET", `/v1/engines/runs/${q(id)}/logs?after=${after}&limit=1000&wait_ms=10000`),
  engineRunCancel: (id: string) => request<EngineRun>("POST", `/v1/engines/runs/${q(id)}/cancel`),
  flinkDeployments: () => request<{ deployments: FlinkDeployment[] }>("GET", "/v1/engines/flink/deployments"),
  flinkDeployment: (name: string) => request<FlinkDeployment>("GET", `/v1/engines/flink/deployments/${q(name)}`),
  flinkLogs: (name: string) =>
    request<{ lines: { seq: number; at_ns: number; text: string }[] }>("GET", `/v1/engines/flink/deployments/${q(name)}/logs?limit=200`),
  flinkAction: (name: string, verb: "savepoint" | "suspend" | "resume" | "cancel") =>
    request<unknown>("POST", `/v1/engines/flink/deployments/${q(name)}:${verb}`, verb === "resume" ? {} : undefined),
  durableTree: (id: string) => request<DurableTree>("GET", `/v1/durable/promises/${q(id)}`),
  durableExecutions: (opts: { state?: string; prefix?: string; cursor?: string }) => {
    const p = new URLSearchParams({ limit: "50" });
    if (opts.state) p.set("state", opts.state);
    if (opts.prefix) p.set("id_prefix", opts.prefix);
    if (opts.cursor) p.set("cursor", opts.cursor);
    return request<DurableExecutions>("GET", `/v1/durable/executions?${p}`);
  },
};
