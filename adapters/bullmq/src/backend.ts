/**
 * `LoamQueueBackend`: BullMQ 6.7's IQueueBackend over Loam's JobsService. Each member
 * is one (sometimes two) Loam calls with BullMQ's semantics; Redis-shaped values come
 * from redis-shape.ts, job conversions from jobs.ts, the worker's hot path from
 * worker-path.ts and QueueEvents from events.ts.
 */
import { EventEmitter } from "node:events";
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { connect, type Connection, type JobsClient } from "./connection.js";
import {
  JobOpSchema,
  QueueOpSchema,
  type Lease,
  type QueueAdminResponse,
} from "./gen/loam/jobs/v1/jobs_pb.js";
import {
  DependencyState,
  FailurePolicy,
  JobState,
  type Dependency,
  JobSchema,
  type Job as LoamJob,
} from "./gen/loam/jobs/v1/types_pb.js";
import { errKind, isNotFound, stateInMessage } from "./errors.js";
import { EventReader } from "./events.js";
import {
  bullId,
  keep,
  ms,
  ns,
  payloadOf,
  stateName,
  toJobJson,
  toLoam,
  utf8,
  type JobJsonIn,
} from "./jobs.js";
import * as R from "./redis-shape.js";
import { Enqueuer } from "./producer-path.js";
import { toBullQueue, toLoamQueue } from "./queue-names.js";
import { Schedulers } from "./schedulers.js";
import { promoteDue, rememberDelayed } from "./client-clock.js";
import { CompleteFailed, Completer, Fetcher, LeaseBook, type CompleteInit, type Held } from "./worker-path.js";

/** State shared by every backend on one connection. */
interface Shared {
  book: LeaseBook;
  completer: Completer;
  clients: Map<string, number>; // live connection names (getWorkers / getQueueEvents)
  meta: Map<string, Map<string, string>>; // queue meta fields Loam has no home for
  enqueuers: Map<string, Enqueuer>; // per queue: concurrent adds coalesced, in order
}

const shared = new Map<string, Shared>();

function sharedOf(c: Connection): Shared {
  let s = shared.get(c.key);
  if (!s) {
    s = { book: new LeaseBook(), completer: new Completer(c.client), clients: new Map(), meta: new Map(), enqueuers: new Map() };
    shared.set(c.key, s);
  }
  return s;
}

export interface FactoryOptions {
  blocking?: boolean;
  withBlockingConnection?: boolean;
}

const STATE_BY_TYPE: Record<string, JobState[]> = {
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

const COUNT_FIELD: Record<string, keyof NonNullable<QueueAdminResponse["counts"]> | null> = {
  wait: "waiting",
  waiting: "waiting",
  paused: null,
  prioritized: "prioritized",
  delayed: "delayed",
  active: "active",
  completed: "completed",
  failed: "failed",
  "waiting-children": "waitingChildren",
};

const MAX_RANGE = 10_000;
const CREATES = new Set(["setConcurrency", "setRateLimit", "pause", "resume", "update", "rateLimitFor"]);
const LIST_TYPES = new Set(["wait", "waiting", "paused", "active"]);
/** BullMQ's dependency categories from a Loam dependency: a child failed under
 * continueParentOnFailure is "ignored" in BullMQ, like ignoreDependencyOnFailure. */
/** With an age to keep by, the finish carries this process's clock: BullMQ's scripts
 * judge `removeOnComplete/Fail: {age}` by the worker's timestamp, and so does the core
 * when it is given one (Outcome.clock_ms). */
function clockFor(k: { age?: bigint } | undefined): { clockMs?: bigint } {
  return k?.age !== undefined ? { clockMs: BigInt(Date.now()) } : {};
}

function bucket(d: Dependency): "processed" | "unprocessed" | "failed" | "ignored" | "" {
  switch (d.state) {
    case DependencyState.PENDING:
      return "unprocessed";
    case DependencyState.PROCESSED:
      return "processed";
    case DependencyState.IGNORED:
      return "ignored";
    case DependencyState.FAILED:
      return d.policy === FailurePolicy.CONTINUE_PARENT ? "ignored" : "failed";
    default:
      return "";
  }
}

export class LoamQueueBackend extends EventEmitter {
  readonly qualifiedName: string;
  readonly keys: R.KeysMap;
  readonly minimumBlockTimeout = 0.001;
  readonly maximumBlockTimeout = 30;
  private closingPromise: Promise<void> | undefined;
  private readonly client: JobsClient;
  private readonly s: Shared;
  private fetcher: Fetcher | null = null;
  private reader: EventReader | null = null;
  private handed = 0;
  private names: string[] = [];
  private readonly workerId: string;

  constructor(
    private readonly conn: Connection,
    readonly queueName: string,
    private readonly opts: Record<string, any> = {},
    private readonly fo: FactoryOptions = {},
    private readonly owner = true,
  ) {
    super();
    // BullMQ sees its own name; every Loam call uses the mapped one (queue-names.ts).
    const bullName = toBullQueue(queueName);
    this.queueName = toLoamQueue(bullName);
    this.qualifiedName = bullName;
    this.keys = R.keysMap(bullName);
    this.client = conn.client;
    this.s = sharedOf(conn);
    this.workerId = `${opts.name ?? "bullmq"}:${randomUUID().slice(0, 8)}`;
    if (fo.withBlockingConnection && queueName) {
      this.register(opts.name ? R.clientName(bullName, `:w:${opts.name}`) : R.clientName(bullName));
    }
  }

  // -- lifecycle -------------------------------------------------------------------
  private workerReady: Promise<void> | null = null;

  /** A worker's limiter becomes the queue's rate limit before its first lease. */
  private ready(): Promise<void> {
    if (!this.workerReady) {
      this.workerReady = this.fo.withBlockingConnection && this.queueName ? this.applyWorkerOptions() : Promise.resolve();
      this.workerReady.catch(() => (this.workerReady = null));
    }
    return this.workerReady;
  }

  async waitUntilReady(): Promise<void> {
    await this.ready();
    if (this.fo.blocking && this.queueName) await this.events().startAndWait();
  }

  private events(): EventReader {
    if (!this.reader) this.reader = new EventReader(this.conn.streamClient, this.queueName);
    return this.reader;
  }

  private async applyWorkerOptions(): Promise<void> {
    // BullMQ's maxStalledCount is the queue's max_stalled on Loam (the server sweeps), and
    // a job stalled past it is failed by the next worker that takes it (deferred failure).
    const msc = typeof this.opts.maxStalledCount === "number" ? this.opts.maxStalledCount : undefined;
    const cfg = await this.config();
    const wantStalled = msc ?? (cfg?.maxStalled ?? 1);
    // A parent failed by a child (failParentOnFailure) is failed by a worker too, as
    // BullMQ does: it goes back to wait with the reason as its deferred failure.
    if (!cfg || !cfg.deferStalledFailure || !cfg.deferChildFailure || (msc !== undefined && cfg.maxStalled !== msc)) {
      const next = { ...(cfg ?? {}), maxStalled: wantStalled, deferStalledFailure: true, deferChildFailure: true };
      delete (next as any).$typeName;
      await this.queueOp({ case: "update", value: { config: next } });
    }
    const l = this.opts.limiter;
    if (l && l.max && l.duration) {
      await this.queueOp({ case: "setRateLimit", value: { rateLimit: { max: l.max, durationNs: ns(l.duration) } } });
    }
  }

  get closing(): Promise<void> | undefined {
    return this.closingPromise;
  }

  async close(_force?: boolean): Promise<void> {
    if (!this.closingPromise) {
      this.closingPromise = (async () => {
        for (const n of this.names) this.unregister(n);
        this.names = [];
        this.reader?.close();
        if (this.heldTimer) clearTimeout(this.heldTimer);
        this.releaseLeases(this.stalledHeld.map((h) => h.lease));
        this.stalledHeld = [];
        if (this.fetcher) {
          this.fetcher.closed = true;
          this.fetcher.interrupt();
          this.releaseLeases(this.fetcher.drainBuffer());
        }
        this.emit("close");
      })();
    }
    return this.closingPromise;
  }

  async disconnect(): Promise<void> {
    this.reader?.close();
    this.fetcher?.interrupt();
  }

  async setName(name: string): Promise<void> {
    this.register(name);
  }

  private register(name: string): void {
    this.names.push(name);
    this.s.clients.set(name, (this.s.clients.get(name) ?? 0) + 1);
  }

  private unregister(name: string): void {
    const n = (this.s.clients.get(name) ?? 1) - 1;
    if (n <= 0) this.s.clients.delete(name);
    else this.s.clients.set(name, n);
  }

  forQueue(queueName: string, _prefix?: string): LoamQueueBackend {
    return new LoamQueueBackend(this.conn, queueName, this.opts, {}, false);
  }

  toKey(type: string): string {
    return R.toKey(this.qualifiedName, type);
  }

  parseNodeKey(key: string) {
    return R.parseNodeKey(key);
  }

  clientName(suffix = ""): string {
    return R.clientName(this.qualifiedName, suffix);
  }

  async getClientList(): Promise<string[]> {
    return R.clientListText(this.s.clients);
  }

  // -- small helpers -------------------------------------------------------------------
  private async queueOp(op: any): Promise<QueueAdminResponse> {
    try {
      return await this.client.queueAdmin({ queue: this.queueName, op: { op } });
    } catch (e) {
      // Settings on a queue nothing was added to yet: BullMQ creates queues on first use.
      if (!isNotFound(e) || !CREATES.has(op.case)) throw e;
      await this.client.queueAdmin({ queue: this.queueName, op: { op: { case: "create", value: { config: {} } } } }).catch(() => undefined);
      return this.client.queueAdmin({ queue: this.queueName, op: { op } });
    }
  }

  private async jobOp(jobId: string, op: any, queue = this.queueName) {
    return this.client.jobAdmin({ queue, job: String(jobId), op: { op } });
  }

  async getJob(jobId: string): Promise<LoamJob | undefined> {
    try {
      return (await this.jobOp(jobId, { case: "get", value: {} })).job;
    } catch (e) {
      if (isNotFound(e) || errKind(e) === "invalid_argument") return undefined;
      throw e;
    }
  }

  private async counts() {
    try {
      return (await this.queueOp({ case: "counts", value: {} })).counts;
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  private async config() {
    try {
      return (await this.queueOp({ case: "counts", value: {} })).config;
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  // -- adding jobs -------------------------------------------------------------------
  private enqueuer(): Enqueuer {
    let e = this.s.enqueuers.get(this.queueName);
    if (!e) this.s.enqueuers.set(this.queueName, (e = new Enqueuer(this.client, this.queueName)));
    return e;
  }

  async addJob(job: JobJsonIn, jobId: string, parentKeyOpts?: { parentKey?: string }): Promise<string> {
    const { task, opts } = toLoam(job, jobId, parentKeyOpts?.parentKey);
    try {
      const r = await this.enqueuer().enqueue({ task, opts });
      if (!r.created && opts.parent) await this.refuseNewParent(r.job, parentKeyOpts?.parentKey, opts.parent);
      const id = r.jobKey || String(jobId ?? "") || r.job;
      if (r.created && opts.notBefore) rememberDelayed(this.conn.key, this.queueName, id, Number(job.opts?.delay ?? job.delay ?? 0));
      return id;
    } catch (e) {
      const k = errKind(e);
      if (k === "already_exists" && jobId) return String(jobId); // BullMQ: the existing job wins
      if (k === "not_found" && opts.parent) {
        throw R.finishedError({ code: R.ErrorCode.ParentJobNotExist, parentKey: parentKeyOpts?.parentKey, command: "addJob" });
      }
      throw e;
    }
  }

  /** BullMQ's -7: an id taken by a job that is a child of another parent, which still
   * exists, cannot be added under a new parent. */
  private async refuseNewParent(job: string, parentKey: string | undefined, want: { queue?: string; jobId?: string }) {
    const existing = await this.getJob(job);
    for (const ref of existing?.parents ?? []) {
      const p = await this.forQueue(ref.queue).getJob(ref.jobId);
      if (!p) continue;
      const same = ref.queue === want.queue && (p.id === want.jobId || p.opts?.jobKey === want.jobId);
      if (!same) throw R.finishedError({ code: R.ErrorCode.ParentJobCannotBeReplaced, parentKey, command: "addJob" });
    }
  }

  async addJobs(entries: { job: JobJsonIn; jobId: string; parentKeyOpts?: { parentKey?: string } }[]): Promise<string[]> {
    if (!entries.length) return [];
    const items = entries.map((e) => toLoam(e.job, e.jobId, e.parentKeyOpts?.parentKey));
    const out: string[] = [];
    for (let i = 0; i < items.length; i += 10_000) {
      const chunk = items.slice(i, i + 10_000);
      const res = await this.client.enqueueBulk({ queue: this.queueName, jobs: chunk });
      res.results.forEach((r, j) => {
        const e = entries[i + j];
        if (r.result.case === "enqueued") out.push(r.result.value.jobKey || String(e.jobId ?? "") || r.result.value.job);
        else if (e.jobId && r.result.case === "error" && r.result.value.code === "already_exists") out.push(String(e.jobId));
        else throw new Error(r.result.case === "error" ? r.result.value.message : "addJobs: no result");
      });
    }
    return out;
  }

  async addFlow(
    entries: { jobData: JobJsonIn; jobId: string; parentKeyOpts: { parentKey?: string }; prefix: string; queueName: string }[],
  ): Promise<[Error | null, string | number][]> {
    const nodeId = (q: string, id: string) => R.nodeKey(q, id);
    const results: [Error | null, string | number][] = entries.map((e) => [null, e.jobId]);
    const index = new Map(entries.map((e, i) => [nodeId(e.queueName, e.jobId), i]));
    const parentOf = entries.map((e) => {
      const pk = e.parentKeyOpts?.parentKey;
      if (!pk) return -1;
      const p = R.parseNodeKey(pk);
      return index.get(nodeId(p.queueName, p.id)) ?? -2; // -2: a job outside this flow
    });
    const skipped = new Set<number>();
    const skipTree = (i: number) => {
      skipped.add(i);
      parentOf.forEach((p, j) => p === i && skipTree(j));
    };
    for (const [i, e] of entries.entries()) {
      if (skipped.has(i)) continue;
      const hasChildren = parentOf.includes(i);
      if (parentOf[i] === -2) {
        // A subtree under an existing job: only a childless node can join it (addJob);
        // a missing parent is BullMQ's -5.
        const p = R.parseNodeKey(e.parentKeyOpts.parentKey!);
        if (!(await this.forQueue(p.queueName).getJob(p.id))) {
          results[i] = [null, R.ErrorCode.ParentJobNotExist];
          skipTree(i);
        } else if (!hasChildren) {
          results[i] = [null, await this.forQueue(e.queueName).addJob(e.jobData, e.jobId, e.parentKeyOpts)];
          skipped.add(i);
        }
        continue;
      }
      const dd = e.jobData.opts?.deduplication;
      if (parentOf[i] === -1 && (dd?.id || !hasChildren)) {
        // A root with deduplication, or a lone node: BullMQ's add path decides.
        const existing = dd?.id ? await this.forQueue(e.queueName).getDeduplicationJobId(String(dd.id)) : null;
        if (existing !== null) {
          results[i] = [null, existing];
          skipTree(i);
        } else if (!hasChildren) {
          results[i] = [null, await this.forQueue(e.queueName).addJob(e.jobData, e.jobId)];
          skipped.add(i);
        }
      }
    }
    const nodes = entries.flatMap((e, i) => {
      if (skipped.has(i)) return [];
      const o = e.jobData.opts ?? {};
      // A subtree under a job outside the flow (a step job's children) keeps its parent
      // link: the server attaches the node to that job.
      const outside = parentOf[i] === -2;
      const { task, opts } = toLoam({ ...e.jobData, opts: outside ? o : { ...o, __flowNode: true } }, e.jobId, e.parentKeyOpts?.parentKey);
      if (!outside) delete (opts as any).parent;
      delete (opts as any).dedup;
      // No flag: BullMQ's parent keeps waiting on a failed child (Loam's keep-waiting).
      let onFailure = o.failParentOnFailure ? FailurePolicy.FAIL_PARENT : FailurePolicy.KEEP_WAITING;
      if (o.continueParentOnFailure) onFailure = FailurePolicy.CONTINUE_PARENT;
      else if (o.ignoreDependencyOnFailure) onFailure = FailurePolicy.IGNORE_DEPENDENCY;
      else if (o.removeDependencyOnFailure) onFailure = FailurePolicy.REMOVE_DEPENDENCY;
      const dependsOn = entries.flatMap((c, j) => (parentOf[j] === i && !skipped.has(j) ? [nodeId(c.queueName, c.jobId)] : []));
      // A leaf whose id is taken joins the flow as that job (BullMQ re-adding a child).
      const joinExisting = !dependsOn.length && !outside;
      return [{ id: nodeId(e.queueName, e.jobId), queue: toLoamQueue(e.queueName), task, opts, dependsOn, onFailure, joinExisting }];
    });
    if (nodes.length) await this.client.flow({ graph: { id: randomUUID(), nodes } });
    return results;
  }

  // -- fetching and locking --------------------------------------------------------------
  private fetch(): Fetcher {
    if (!this.fetcher) {
      const lock = Number(this.opts.lockDuration ?? 30_000);
      this.fetcher = new Fetcher(
        this.client,
        {
          queue: this.queueName,
          worker: this.workerId,
          visibilityNs: ns(lock),
          concurrency: () => Math.max(1, Number(this.opts.concurrency ?? 1)),
          handedOut: () => this.handed,
          lockDurationMs: lock,
        },
        (leases) => this.releaseLeases(leases),
      );
    }
    return this.fetcher;
  }

  private releaseLeases(leases: Lease[]): void {
    for (const l of leases) {
      if (!l.token) continue;
      void this.s.completer.complete({ token: l.token, outcome: { kind: { case: "release", value: {} } } }).catch(() => undefined);
    }
  }

  private leaseJob(l: Lease): LoamJob {
    return create(JobSchema, {
      id: l.token!.job,
      queue: l.token!.queue,
      task: l.task,
      opts: l.opts,
      state: JobState.ACTIVE,
      attempt: Math.max(0, l.attempt - 1),
      attemptsMax: l.opts?.attempts || 1,
      stalled: l.stalled,
      createdNs: l.createdNs,
      processedNs: BigInt(Date.now()) * 1_000_000n,
      epoch: l.token!.epoch,
      retryEpoch: l.retryEpoch,
      errors: l.lastError ? [l.lastError] : [],
      parents: l.parent ? [l.parent] : [],
      deferredFailure: l.deferredFailure,
    });
  }

  private hand(l: Lease, token: string, name?: string): any[] {
    const job = this.leaseJob(l);
    const key = bullId(job);
    this.s.book.set({ bullToken: token, queue: this.queueName, job: l.token!.job, epoch: l.token!.epoch, key });
    this.handed++;
    return R.activeTuple(toJobJson(job, { processedBy: name ?? this.opts.name }), key);
  }

  /** Nothing to hand out. A rate limit is the server's to keep (any process may lift
   * it), so no TTL: the worker's next wait is a long poll the server ends when a job can
   * be leased. */
  private noJob(): any[] {
    return R.activeTuple(null, "", 0, 0);
  }

  async moveToActive(token: string, name?: string): Promise<any[]> {
    await this.ready();
    if (this.stalledHeld.length) this.releaseOverdueHeld();
    for (;;) {
      const l = await this.fetch().take();
      // Nothing ready: delayed jobs due by this process's clock may be (client-clock.ts).
      if (!l && (await promoteDue(this.conn.key, this.queueName, (id) => this.promote(id)))) continue;
      if (!l) return this.noJob();
      if (!this.holdIfStalled(l)) return this.hand(l, token, name);
    }
  }

  async waitForJob(blockTimeout: number): Promise<{ member: string; score: number } | null> {
    await this.ready();
    const got = await this.fetch().wait(blockTimeout);
    return got ? { member: this.queueName, score: 0 } : null;
  }

  async disconnectBlocking(_wait?: boolean): Promise<void> {
    const f = this.fetch();
    f.blockingDisconnected = true;
    f.interrupt();
  }

  async reconnectBlocking(): Promise<void> {
    this.fetch().blockingDisconnected = false;
  }

  private held(jobId: string, token: string | undefined, command: string): Held {
    const h = this.s.book.get(this.queueName, String(jobId));
    if (!h) throw R.finishedError({ code: R.ErrorCode.JobLockNotExist, jobId, command });
    if (token && token !== "0" && h.bullToken !== token) {
      throw R.finishedError({ code: R.ErrorCode.JobLockMismatch, jobId, command, state: "active" });
    }
    return h;
  }

  private letGo(h: Held): void {
    this.s.book.delete(h.queue, h.key);
    if (this.handed > 0) this.handed--;
  }

  private async finish(h: Held, outcome: CompleteInit["outcome"], command: string) {
    try {
      return await this.s.completer.complete({ token: { queue: h.queue, job: h.job, epoch: h.epoch }, outcome });
    } catch (e) {
      const kind = e instanceof CompleteFailed ? e.kind : errKind(e);
      const msg = e instanceof Error ? e.message : String(e);
      if (kind === "not_found") throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId: h.key, command });
      if (kind === "fenced") throw R.finishedError({ code: R.ErrorCode.JobLockMismatch, jobId: h.key, command, state: "active" });
      if (kind === "invalid_state" && /pending dependencies/.test(msg)) {
        throw R.finishedError({ code: R.ErrorCode.JobPendingChildren, jobId: h.key, command });
      }
      if (kind === "invalid_state") {
        throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId: h.key, command, state: "active" });
      }
      throw e instanceof CompleteFailed ? new Error(msg) : e;
    }
  }

  /**
   * moveToFinished with fetchNext: the completion (coalesced with its neighbours into one
   * CompleteBatch), then the next lease (coalesced the same way). Measured: sending both
   * at once made smaller batches and a slower drain on this server.
   */
  private async finishAndFetch(h: Held, outcome: CompleteInit["outcome"], fetchNext: boolean, token: string) {
    await this.finish(h, outcome, "moveToFinished");
    const finishedOn = Date.now();
    return { result: await this.next(fetchNext, token, this.opts.name), finishedOn };
  }

  private async next(fetchNext: boolean, token: string, name?: string): Promise<any[] | undefined> {
    if (!fetchNext || this.closingPromise) return undefined;
    return this.moveToActive(token, name);
  }

  private async missingOrNotActive(jobId: string, command: string): Promise<never> {
    const j = await this.getJob(jobId);
    if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command });
    if (j.state !== JobState.ACTIVE) throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId, command, state: "active" });
    throw R.finishedError({ code: R.ErrorCode.JobLockMismatch, jobId, command, state: "active" });
  }

  async moveToCompleted(job: any, returnValue: any, removeOnComplete: any, token: string, fetchNext: boolean) {
    const h = this.s.book.get(this.queueName, String(job.id));
    if (!h || (token && token !== "0" && h.bullToken !== token)) await this.missingOrNotActive(job.id, "moveToFinished");
    this.letGo(h!);
    let rv: string;
    try {
      rv = JSON.stringify(returnValue) ?? "null";
    } catch {
      rv = "null";
    }
    const k = keep(removeOnComplete ?? this.opts.removeOnComplete);
    try {
      return await this.finishAndFetch(
        h!,
        {
          // BullMQ's -4: a job with children still pending cannot complete.
          kind: { case: "ok", value: { result: { data: utf8(rv), contentType: "application/json" }, ifNoPendingChildren: true } },
          ...(k ? { retention: { completedCount: k.count, completedAgeNs: k.age } } : {}),
          ...clockFor(k),
          ...this.metricsPoint(),
        },
        fetchNext,
        token,
      );
    } catch (e) {
      // Refused, the job is still leased to this worker, which fails it next.
      if (e instanceof Error && /has pending dependencies/.test(e.message)) this.holdAgain(h!);
      throw e;
    }
  }

  /** The worker's `metrics` option: the finish counts in the queue's per-minute
   * metrics, at this process's time (BullMQ's scripts take the worker's timestamp). */
  private metricsPoint(): { metrics?: { atMs: bigint; maxDataPoints: number } } {
    const max = Number(this.opts.metrics?.maxDataPoints ?? 0);
    return max > 0 ? { metrics: { atMs: BigInt(Date.now()), maxDataPoints: Math.min(max, 100_000) } } : {};
  }

  private holdAgain(h: Held): void {
    this.s.book.set(h);
    this.handed++;
  }

  async moveToFailed(job: any, failedReason: string, removeOnFail: any, token: string, fetchNext: boolean, fieldsToUpdate?: Record<string, any>) {
    const h = this.s.book.get(this.queueName, String(job.id));
    if (!h || (token && token !== "0" && h.bullToken !== token)) await this.missingOrNotActive(job.id, "moveToFinished");
    this.letGo(h!);
    const error = { code: "error", message: failedReason ?? "", stacktrace: String(fieldsToUpdate?.stacktrace ?? "[]") };
    const attempts = Math.max(1, Number(job.opts?.attempts ?? 1));
    const exhausted = Number(job.attemptsMade ?? 0) + 1 >= attempts;
    const k = keep(removeOnFail ?? this.opts.removeOnFail);
    const outcome: CompleteInit["outcome"] = {
      kind: exhausted ? { case: "retry", value: { error } } : { case: "fail", value: { error } },
      ...(k ? { retention: { failedCount: k.count, failedAgeNs: k.age } } : {}),
      ...clockFor(k),
      ...this.metricsPoint(),
    };
    return this.finishAndFetch(h!, outcome, fetchNext, token);
  }

  async moveToDelayed(jobId: string, timestamp: number, delay: number, token?: string, opts?: any): Promise<void | any[]> {
    const h = this.held(jobId, token, "moveToDelayed");
    this.letGo(h);
    const f = opts?.fieldsToUpdate;
    if (opts?.skipAttempt || !f) {
      await this.finish(h, { kind: { case: "delay", value: { untilNs: ns(timestamp + delay) } } }, "moveToDelayed");
    } else {
      const error = { code: "error", message: String(f.failedReason ?? ""), stacktrace: String(f.stacktrace ?? "[]") };
      await this.finish(h, { kind: { case: "retry", value: { error, afterNs: ns(delay) } } }, "moveToDelayed");
    }
    const next = opts?.fetchNext ? await this.next(true, token ?? "", this.opts.name) : undefined;
    return next && next[0] ? next : [];
  }

  async retryJob(jobId: string, _lifo: boolean, token?: string, opts?: any): Promise<void> {
    const h = this.s.book.get(this.queueName, String(jobId));
    if (!h) {
      const j = await this.getJob(jobId);
      if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command: "retryJob" });
      throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId, command: "retryJob", state: "active" });
    }
    this.letGo(h);
    const f = opts?.fieldsToUpdate ?? {};
    const error = { code: "error", message: String(f.failedReason ?? ""), stacktrace: String(f.stacktrace ?? "[]") };
    await this.finish(h, { kind: { case: "retry", value: { error, afterNs: 0n } } }, "retryJob");
  }

  async moveToWaitingChildren(jobId: string, token: string, _opts?: any): Promise<boolean> {
    const h = this.s.book.get(this.queueName, String(jobId));
    if (!h) {
      const j = await this.getJob(jobId);
      if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command: "moveToWaitingChildren" });
      if (token === "0" || !token) {
        throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId, command: "moveToWaitingChildren", state: "active" });
      }
      throw R.finishedError({ code: R.ErrorCode.JobLockNotExist, jobId, command: "moveToWaitingChildren" });
    }
    // A child failed under failParentOnFailure while this job ran: BullMQ's -9, thrown
    // while the job is still active, so the worker fails it with that message.
    if ((await this.getJob(jobId))?.failedChild) {
      throw R.finishedError({ code: R.ErrorCode.JobHasFailedChildren, jobId, command: "moveToWaitingChildren" });
    }
    const done = await this.finish(h, { kind: { case: "waitChildren", value: {} } }, "moveToWaitingChildren");
    if (done.state === JobState.FAILED) {
      this.letGo(h);
      throw R.finishedError({ code: R.ErrorCode.JobHasFailedChildren, jobId, command: "moveToWaitingChildren" });
    }
    if (!done.moved) return false;
    this.letGo(h);
    return true;
  }

  async moveJobFromActiveToWait(jobId: string, token?: string): Promise<number> {
    const h = this.s.book.get(this.queueName, String(jobId));
    if (!h) {
      const j = await this.getJob(jobId);
      if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command: "moveJobFromActiveToWait" });
      throw R.finishedError({ code: R.ErrorCode.JobLockNotExist, jobId, command: "moveJobFromActiveToWait" });
    }
    this.letGo(h);
    // The block was set by rateLimit(); the job goes back to wait without an attempt.
    await this.finish(h, { kind: { case: "release", value: {} } }, "moveJobFromActiveToWait");
    return Math.max(0, await this.getRateLimitTtl());
  }

  async extendLock(jobId: string, token: string, duration: number): Promise<number> {
    const h = this.s.book.get(this.queueName, String(jobId));
    if (!h || (token && h.bullToken !== token)) return 0;
    try {
      await this.client.extend({ token: { queue: h.queue, job: h.job, epoch: h.epoch }, byNs: ns(Math.max(duration, 1)) });
      return 1;
    } catch {
      return 0;
    }
  }

  async extendLocks(jobIds: string[], tokens: string[], duration: number): Promise<string[]> {
    const res = await Promise.all(jobIds.map((id, i) => this.extendLock(id, tokens[i], duration)));
    return jobIds.filter((_, i) => res[i] !== 1);
  }

  // -- stalled jobs ----------------------------------------------------------------------
  // The server's sweeper reclaims lapsed leases. A lease of a job the server reclaimed
  // says so (`stalled`); while BullMQ's stalled check runs, such a job is held back until
  // the next check reports it (as BullMQ recovers stalled jobs at that check), so the
  // worker's `stalled` event comes before the job runs again. A job is held at most a
  // stalled interval, half its lock, or 1 s, whichever is shortest; then it goes out and
  // is reported at the next check.
  private stalledCheckOn = false;
  private stalledHeld: { lease: Lease; at: number; key: string }[] = [];
  private stalledSeen = new Map<string, number>(); // job key → stall count reported

  private holdIfStalled(l: Lease): boolean {
    if (!this.stalledCheckOn || !l.stalled) return false;
    const key = l.opts?.jobKey || l.token!.job;
    if ((this.stalledSeen.get(key) ?? 0) >= l.stalled) return false;
    this.stalledHeld.push({ lease: l, at: Date.now(), key });
    if (!this.heldTimer) {
      this.heldTimer = setTimeout(() => {
        this.heldTimer = null;
        this.releaseOverdueHeld(true);
      }, this.holdMs() + 5);
      this.heldTimer.unref?.();
    }
    return true;
  }

  private heldTimer: NodeJS.Timeout | null = null;

  private holdMs(): number {
    return Math.min(Number(this.opts.stalledInterval ?? 30_000) + 50, Number(this.opts.lockDuration ?? 30_000) / 2, 1000);
  }

  async moveStalledJobsToWait(): Promise<string[]> {
    this.stalledCheckOn = true;
    const held = this.stalledHeld;
    this.stalledHeld = [];
    for (const h of held) {
      this.stalledSeen.set(h.key, h.lease.stalled);
      if (this.stalledSeen.size > 10_000) this.stalledSeen.delete(this.stalledSeen.keys().next().value!);
    }
    if (held.length) this.fetch().putBack(held.map((h) => h.lease));
    return held.map((h) => h.key);
  }

  private releaseOverdueHeld(all = false): void {
    const limit = Date.now() - this.holdMs();
    const overdue = this.stalledHeld.filter((h) => all || h.at <= limit);
    if (!overdue.length) return;
    this.stalledHeld = this.stalledHeld.filter((h) => !overdue.includes(h));
    for (const h of overdue) this.stalledSeen.set(h.key, h.lease.stalled);
    this.fetch().putBack(overdue.map((h) => h.lease));
  }

  async isMaxed(): Promise<boolean> {
    const r = await this.queueOp({ case: "counts", value: {} }).catch(() => undefined);
    const c = r?.config?.concurrency ?? 0;
    return !!c && Number(r?.counts?.active ?? 0) >= c;
  }

  // -- moving jobs by id ---------------------------------------------------------------
  async retryFinishedJob(job: any, state: "failed" | "completed", opts?: any): Promise<void> {
    const j = await this.getJob(job.id);
    if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId: job.id, command: "reprocessJob" });
    if (stateName(j.state) !== state) {
      throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId: job.id, command: "reprocessJob", state });
    }
    await this.jobOp(job.id, { case: "retry", value: { keepAttempts: !opts?.resetAttemptsMade } });
  }

  private async byId(jobId: string, op: any, command: string, state?: string) {
    try {
      return await this.jobOp(jobId, op);
    } catch (e) {
      const k = errKind(e);
      if (k === "not_found") throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command });
      if (k === "invalid_state" && state) throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId, command, state });
      throw e;
    }
  }

  async promote(jobId: string): Promise<void> {
    await this.byId(jobId, { case: "promote", value: {} }, "promote", "delayed");
  }

  async changeDelay(jobId: string, delay: number): Promise<void> {
    await this.byId(jobId, { case: "changeDelay", value: { delayNs: ns(delay) } }, "changeDelay", "delayed");
  }

  async changePriority(jobId: string, priority = 0, lifo = false): Promise<void> {
    await this.byId(jobId, { case: "changePriority", value: { priority, lifo } }, "changePriority");
  }

  async updateData(job: any, data: any): Promise<void> {
    await this.byId(job.id, { case: "updateData", value: { data: payloadOf(data) } }, "updateData");
  }

  async updateProgress(jobId: string, progress: any): Promise<void> {
    await this.byId(jobId, { case: "progress", value: { progress: utf8(JSON.stringify(progress)) } }, "updateProgress");
  }

  async addLog(jobId: string, logRow: string, keepLogs?: number): Promise<number> {
    const r = await this.byId(jobId, { case: "addLog", value: { line: logRow, keep: keepLogs ?? 0 } }, "addLog");
    return r.logCount;
  }

  async clearLogs(jobId: string, keepLogs?: number): Promise<void> {
    await this.byId(jobId, { case: "clearLogs", value: { keep: keepLogs ?? 0 } }, "clearLogs");
  }

  async remove(jobId: string, removeChildren: boolean): Promise<number> {
    await this.schedulers().refuseRemoval(String(jobId));
    try {
      await this.jobOp(jobId, { case: "remove", value: { children: !!removeChildren } });
      return 1;
    } catch (e) {
      if (errKind(e) === "invalid_state") return 0; // held by a worker
      if (isNotFound(e) || errKind(e) === "invalid_argument") return 1;
      throw e;
    }
  }

  async removeUnprocessedChildren(jobId: string): Promise<void> {
    const deps = (await this.jobOp(jobId, { case: "children", value: {} }).catch(() => undefined))?.children ?? [];
    for (const d of deps) {
      if (d.state !== DependencyState.PENDING) continue;
      // A failed child stays pending for a parent that waits on it (no failure flag), and
      // a running one is locked: BullMQ removes neither.
      const child = this.forQueue(d.queue);
      const j = await child.getJob(d.jobId);
      if (!j || j.state === JobState.ACTIVE || stateName(j.state) === "failed" || j.state === JobState.COMPLETED) continue;
      await child.remove(d.jobKey || d.jobId, true).catch(() => 0);
    }
  }

  async removeChildDependency(jobId: string, parentKey: string): Promise<boolean> {
    const p = R.parseNodeKey(parentKey);
    if (!(await this.forQueue(p.queueName).getJob(p.id))) {
      throw R.finishedError({ code: R.ErrorCode.ParentJobNotExist, parentKey, command: "removeChildDependency" });
    }
    const r = await this.byId(jobId, { case: "removeChildDependency", value: {} }, "removeChildDependency");
    return r.removed;
  }

  async removeDeduplicationKey(deduplicationId: string, jobId: string): Promise<number> {
    const cur = await this.getDeduplicationJobId(deduplicationId);
    if (cur !== String(jobId)) return 0; // expired, or another job's now
    return this.deleteDeduplicationKey(deduplicationId);
  }

  async deleteDeduplicationKey(deduplicationId: string): Promise<number> {
    const r = await this.client.jobAdmin({ queue: this.queueName, op: { op: { case: "removeDedupKey", value: { dedupId: deduplicationId } } } }).catch(() => undefined);
    return r?.removed ? 1 : 0;
  }

  async getDeduplicationJobId(deduplicationId: string): Promise<string | null> {
    try {
      const r = await this.client.jobAdmin({ queue: this.queueName, op: { op: { case: "getDedup", value: { dedupId: deduplicationId } } } });
      return r.job ? bullId(r.job) : null;
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
  }

  // -- bulk admin ---------------------------------------------------------------------
  async pause(pause: boolean): Promise<void> {
    await this.queueOp(pause ? { case: "pause", value: {} } : { case: "resume", value: {} }).catch((e) => {
      if (!isNotFound(e)) throw e;
      if (pause) return this.queueOp({ case: "create", value: { config: {} } }).then(() => this.queueOp({ case: "pause", value: {} }));
    });
  }

  async drain(delayed: boolean): Promise<void> {
    await this.queueOp({ case: "drain", value: { delayed } }).catch((e) => {
      if (!isNotFound(e)) throw e;
    });
  }

  async cleanJobsByState(state: string, timestamp: number, limit = 0): Promise<string[]> {
    const states = STATE_BY_TYPE[state === "paused" ? "wait" : state] ?? [];
    if (!states.length || state === "active") return [];
    const grace = Math.max(0, Date.now() - timestamp);
    const candidates = (await this.listJobs(states, limit || MAX_RANGE))
      .filter((j) => {
        const t = j.finishedNs || j.createdNs;
        return ms(t) <= timestamp;
      })
      .map((j) => bullId(j));
    const r = await this.queueOp({ case: "clean", value: { state: states[0], graceNs: ns(grace), limit: limit || 0 } }).catch((e) => {
      if (isNotFound(e)) return undefined;
      throw e;
    });
    const n = Number(r?.affected ?? 0);
    return candidates.reverse().slice(0, n);
  }

  async obliterate(opts: { force: boolean; count: number }): Promise<number> {
    try {
      await this.queueOp({ case: "obliterate", value: { force: !!opts.force } });
    } catch (e) {
      if (isNotFound(e)) return 0;
      if (errKind(e) === "invalid_state") throw new Error("Cannot obliterate queue with active jobs");
      throw e;
    }
    this.s.meta.delete(this.queueName);
    return 0;
  }

  async removeOrphanedJobs(_count?: number, _limit?: number): Promise<number> {
    return 0;
  }

  async retryFinishedJobs(state: "failed" | "completed" = "failed", _count?: number, timestamp?: number): Promise<number> {
    if (timestamp) {
      const st = state === "completed" ? JobState.COMPLETED : JobState.FAILED;
      for (const j of (await this.listJobs([st], MAX_RANGE)).reverse()) {
        if (ms(j.finishedNs) <= timestamp) await this.jobOp(j.id, { case: "retry", value: {} }).catch(() => undefined);
      }
      return 0;
    }
    await this.queueOp({ case: "retryAll", value: { state: state === "completed" ? JobState.COMPLETED : JobState.FAILED } }).catch((e) => {
      if (!isNotFound(e)) throw e;
    });
    return 0;
  }

  async promoteJobs(_count?: number): Promise<number> {
    await this.queueOp({ case: "promoteAll", value: {} }).catch((e) => {
      if (!isNotFound(e)) throw e;
    });
    return 0;
  }

  // -- getters --------------------------------------------------------------------------
  async getState(jobId: string): Promise<string> {
    const j = await this.getJob(jobId);
    return j ? stateName(j.state) : "unknown";
  }

  async isFinished(jobId: string, returnValue?: boolean): Promise<number | [number, string]> {
    const j = await this.getJob(jobId);
    let code = 0;
    let v = "";
    if (!j) {
      code = -1;
      v = `Missing key for job ${this.toKey(jobId)}. isFinished`;
    }
    else if (j.state === JobState.COMPLETED) {
      code = 1;
      v = toJobJson(j).returnvalue;
    } else if (stateName(j.state) === "failed") {
      code = 2;
      v = j.errors.length ? j.errors[j.errors.length - 1].message : "";
    }
    return returnValue ? [code, v] : code;
  }

  async isJobInState(state: string, jobId: string): Promise<boolean> {
    const j = await this.getJob(jobId);
    if (!j) return false;
    const name = stateName(j.state);
    return name === state || (state === "wait" && name === "waiting");
  }

  async getJobData(jobId: string): Promise<any | undefined> {
    const j = await this.getJob(jobId);
    return j ? toJobJson(j) : undefined;
  }

  async getJobLogs(jobId: string, start: number, end: number, asc: boolean): Promise<{ logs: string[]; count: number }> {
    try {
      const r = await this.jobOp(jobId, { case: "logs", value: { start: 0, end: 0 } });
      let lines = r.logs.map((l) => l.line);
      if (!asc) lines = lines.reverse();
      const n = lines.length;
      const lo = start < 0 ? start + n : start;
      const hi = end < 0 ? end + n : end;
      return { logs: lines.slice(Math.max(lo, 0), Math.max(hi + 1, 0)), count: n };
    } catch (e) {
      if (isNotFound(e)) return { logs: [], count: 0 };
      throw e;
    }
  }

  async getRateLimitTtl(maxJobs?: number): Promise<number> {
    const r = await this.queueOp({ case: "counts", value: {} }).catch(() => undefined);
    const ttl = r ? ms(r.rateLimitTtlNs) : 0;
    if (!ttl) return maxJobs ? 0 : -2;
    if (maxJobs && (r?.rateLimitUsed ?? 0) < maxJobs) return 0;
    return ttl;
  }

  async getCounts(types: string[], _delayedTimestamp?: number): Promise<number[]> {
    const c = await this.counts();
    return types.map((t) => {
      const f = COUNT_FIELD[t];
      if (!c || !f) return 0;
      let n = Number(c[f] ?? 0);
      if (t === "failed") n += Number(c.deadLettered ?? 0) + Number(c.canceled ?? 0);
      return n;
    });
  }

  async getCountsPerPriority(priorities: number[]): Promise<number[]> {
    const jobs = await this.listJobs([JobState.WAITING, JobState.PRIORITIZED], MAX_RANGE);
    return priorities.map((p) => jobs.filter((j) => (j.opts?.priority ?? 0) === Number(p)).length);
  }

  /** Jobs in `states`, newest first, up to `limit`. */
  private async listJobs(states: JobState[], limit: number): Promise<LoamJob[]> {
    const out: LoamJob[] = [];
    let pageToken = "";
    do {
      let r;
      try {
        r = await this.client.query({ queue: this.queueName, states, pageSize: 1000, pageToken });
      } catch (e) {
        if (isNotFound(e)) return out;
        throw e;
      }
      out.push(...r.jobs);
      pageToken = r.nextPageToken;
    } while (pageToken && out.length < limit);
    return out.slice(0, limit);
  }

  async getRanges(types: string[], start = 0, end = -1, asc = false): Promise<[string][]> {
    const out: any[] = [];
    for (const t of types) {
      const states = STATE_BY_TYPE[t] ?? [];
      if (!states.length) {
        out.push([]);
        continue;
      }
      let ids = (await this.listJobs(states, MAX_RANGE)).map((j) => bullId(j));
      // Lists (wait, active) come newest first and BullMQ reverses them itself for asc;
      // sorted sets (the rest) come in the order asked.
      if (asc && !LIST_TYPES.has(t)) ids = ids.reverse();
      const n = ids.length;
      const lo = start < 0 ? Math.max(start + n, 0) : start;
      const hi = end < 0 ? end + n : Math.min(end, n - 1);
      out.push(ids.slice(lo, hi + 1));
    }
    return out;
  }

  async paginate(key: string, opts: { start: number; end: number; fetchJobs?: boolean }) {
    const parts = key.split(":");
    const kind = parts[parts.length - 1];
    const jobId = parts[parts.length - 2];
    const deps = (await this.jobOp(jobId, { case: "children", value: {} }).catch(() => undefined))?.children ?? [];
    const picked = deps.filter((d) => bucket(d) === (kind === "processed" ? "processed" : "unprocessed"));
    const all = picked.map((d) => ({
      id: R.nodeKey(toBullQueue(d.queue), d.jobKey || d.jobId),
      ...(kind === "processed" ? { v: JSON.parse(new TextDecoder().decode(d.value?.data ?? utf8("null")) || "null") } : {}),
    }));
    const total = all.length;
    const end = opts.end < 0 ? total - 1 : opts.end;
    const items = all.slice(opts.start, end + 1);
    let jobs: any[] | undefined;
    if (opts.fetchJobs) {
      jobs = [];
      for (const it of items) {
        const p = R.parseNodeKey(it.id);
        const j = await this.forQueue(p.queueName).getJobData(p.id);
        if (j) jobs.push(j);
      }
    }
    return { cursor: end + 1 >= total ? "0" : String(end + 1), items, total, ...(jobs ? { jobs } : {}) };
  }

  // -- flows --------------------------------------------------------------------------------
  private async deps(jobId: string) {
    return (await this.jobOp(jobId, { case: "children", value: {} }).catch(() => undefined))?.children ?? [];
  }

  async getDependencyCounts(jobId: string, types: string[]): Promise<number[]> {
    const deps = await this.deps(jobId);
    return types.map((t) => deps.filter((d) => bucket(d) === t).length);
  }

  async getDependencies(jobId: string, opts: any): Promise<any> {
    const deps = await this.deps(jobId);
    const key = (d: any) => R.nodeKey(toBullQueue(d.queue), d.jobKey || d.jobId);
    const out: any = {};
    const page = (o: any, items: any[]) => {
      const cursor = Number(o?.cursor ?? 0);
      const count = Number(o?.count ?? 20);
      const slice = items.slice(cursor, cursor + count);
      const next = cursor + count >= items.length ? 0 : cursor + count;
      return { slice, next };
    };
    const none = !opts || (!opts.processed && !opts.unprocessed && !opts.failed && !opts.ignored);
    if (none || opts.processed) {
      const { slice, next } = page(opts?.processed, deps.filter((d) => bucket(d) === "processed"));
      out.processed = Object.fromEntries(slice.map((d) => [key(d), JSON.parse(new TextDecoder().decode(d.value?.data ?? utf8("null")) || "null")]));
      out.nextProcessedCursor = next;
    }
    if (none || opts.unprocessed) {
      const { slice, next } = page(opts?.unprocessed, deps.filter((d) => bucket(d) === "unprocessed"));
      out.unprocessed = slice.map(key);
      out.nextUnprocessedCursor = next;
    }
    if (none || opts.failed) {
      const { slice, next } = page(opts?.failed, deps.filter((d) => bucket(d) === "failed"));
      out.failed = slice.map(key);
      out.nextFailedCursor = next;
    }
    if (none || opts.ignored) {
      const { slice, next } = page(opts?.ignored, deps.filter((d) => bucket(d) === "ignored"));
      out.ignored = Object.fromEntries(slice.map((d) => [key(d), d.error?.message ?? ""]));
      out.nextIgnoredCursor = next;
    }
    return out;
  }

  async getProcessedChildrenValues(jobId: string): Promise<Record<string, string>> {
    const deps = await this.deps(jobId);
    return Object.fromEntries(
      deps.filter((d) => bucket(d) === "processed").map((d) => [R.nodeKey(toBullQueue(d.queue), d.jobKey || d.jobId), new TextDecoder().decode(d.value?.data ?? utf8("null")) || "null"]),
    );
  }

  async getIgnoredChildrenFailures(jobId: string): Promise<Record<string, string>> {
    const deps = await this.deps(jobId);
    return Object.fromEntries(deps.filter((d) => bucket(d) === "ignored").map((d) => [R.nodeKey(toBullQueue(d.queue), d.jobKey || d.jobId), d.error?.message ?? ""]));
  }

  async getMetrics(type: "completed" | "failed", start = 0, end = -1): Promise<[string[], string[], number]> {
    const r = await this.queueOp({ case: "metrics", value: { kind: type } }).catch((e) => {
      if (isNotFound(e)) return undefined;
      throw e;
    });
    const m = r?.metrics;
    const points = (m?.points ?? []).map(Number);
    const n = points.length;
    const lo = start < 0 ? Math.max(start + n, 0) : start; // LRANGE's indexes
    const hi = end < 0 ? end + n : Math.min(end, n - 1);
    return R.metricsTuple(Number(m?.count ?? 0), points.slice(lo, hi + 1), n, Number(m?.prevMs ?? 0), Number(m?.prevCount ?? 0));
  }

  // -- queue meta ---------------------------------------------------------------------------
  private localMeta(): Map<string, string> {
    let m = this.s.meta.get(this.queueName);
    if (!m) this.s.meta.set(this.queueName, (m = new Map()));
    return m;
  }

  async setQueueMeta(values: Record<string, string | number>): Promise<number> {
    let n = 0;
    const v = { ...values };
    if ("concurrency" in v) {
      await this.queueOp({ case: "setConcurrency", value: { concurrency: Number(v.concurrency) } });
      delete v.concurrency;
      n++;
    }
    if ("max" in v || "duration" in v) {
      const cfg = await this.config();
      const max = Number(v.max ?? cfg?.rateLimit?.max ?? 0);
      const duration = v.duration !== undefined ? ns(Number(v.duration)) : (cfg?.rateLimit?.durationNs ?? 0n);
      await this.queueOp({ case: "setRateLimit", value: { rateLimit: { max, durationNs: duration } } });
      delete v.max;
      delete v.duration;
      n++;
    }
    if ("paused" in v) {
      await this.pause(true);
      delete v.paused;
      n++;
    }
    const m = this.localMeta();
    for (const [k, val] of Object.entries(v)) {
      m.set(k, String(val));
      n++;
    }
    return n;
  }

  async getQueueMeta(): Promise<Record<string, string>> {
    const cfg = await this.config();
    const out: Record<string, string> = Object.fromEntries(this.localMeta());
    if (cfg?.paused) out.paused = "1";
    if (cfg?.concurrency) out.concurrency = String(cfg.concurrency);
    if (cfg?.rateLimit?.max) {
      out.max = String(cfg.rateLimit.max);
      out.duration = String(ms(cfg.rateLimit.durationNs));
    }
    return out;
  }

  async getQueueMetaField(field: string): Promise<string | null> {
    return (await this.getQueueMeta())[field] ?? null;
  }

  async getQueueMetaFields(fields: string[]): Promise<(string | null)[]> {
    const m = await this.getQueueMeta();
    return fields.map((f) => m[f] ?? null);
  }

  async removeQueueMetaFields(fields: string[]): Promise<number> {
    let n = 0;
    for (const f of fields) {
      if (f === "concurrency") await this.queueOp({ case: "setConcurrency", value: { concurrency: 0 } }).catch(() => undefined);
      else if (f === "max" || f === "duration") await this.queueOp({ case: "setRateLimit", value: { rateLimit: {} } }).catch(() => undefined);
      else if (f === "paused") await this.pause(false);
      else if (!this.localMeta().delete(f)) continue;
      n++;
    }
    return n;
  }

  async hasQueueMetaField(field: string): Promise<boolean> {
    return (await this.getQueueMetaField(field)) !== null;
  }

  // -- rate limits ----------------------------------------------------------------------------
  /** BullMQ's rateLimit(ms): the queue takes no leases for `ms` (server-side, so every
   * worker and getRateLimitTtl see it). */
  async setRateLimit(expireTimeMs: number): Promise<void> {
    const ms_ = Math.max(0, Math.round(expireTimeMs));
    if (ms_) await this.queueOp({ case: "rateLimitFor", value: { forNs: ns(ms_) } });
  }

  async removeRateLimitKey(): Promise<number> {
    const had = (await this.getRateLimitTtl()) > 0;
    await this.queueOp({ case: "rateLimitFor", value: { forNs: 0n } }).catch(() => undefined);
    return had ? 1 : 0;
  }

  async removeDeprecatedPriorityKey(): Promise<number> {
    return 0;
  }

  // -- job schedulers (schedulers.ts) -------------------------------------------------------------
  private sched: Schedulers | null = null;

  private schedulers(): Schedulers {
    if (!this.sched) {
      this.sched = new Schedulers({
        client: this.client,
        queueName: this.queueName,
        connKey: this.conn.key,
        getJob: (id) => this.getJob(id),
        isPaused: () => this.hasQueueMetaField("paused"),
      });
    }
    return this.sched;
  }

  addJobScheduler(
    jobSchedulerId: string,
    nextMillis: number,
    templateData: string,
    templateOpts: any,
    opts: any,
    delayedJobOpts: any,
    producerId?: string,
  ): Promise<[string, number]> {
    return this.schedulers().addJobScheduler(jobSchedulerId, nextMillis, templateData, templateOpts, opts, delayedJobOpts, producerId);
  }

  updateJobSchedulerNextMillis(
    jobSchedulerId: string,
    nextMillis: number,
    templateData: string,
    delayedJobOpts: any,
    producerId?: string,
  ): Promise<string | null> {
    return this.schedulers().updateJobSchedulerNextMillis(jobSchedulerId, nextMillis, templateData, delayedJobOpts, producerId);
  }

  removeJobScheduler(jobSchedulerId: string): Promise<number> {
    return this.schedulers().removeJobScheduler(jobSchedulerId);
  }

  getJobScheduler(id: string): Promise<[any, string | null]> {
    return this.schedulers().getJobScheduler(id);
  }

  isJobScheduler(id: string): Promise<boolean> {
    return this.schedulers().isJobScheduler(id);
  }

  getJobSchedulerData(key: string): Promise<Record<string, string>> {
    return this.schedulers().getJobSchedulerData(key);
  }

  getJobSchedulersRange(start: number, end: number, asc: boolean): Promise<string[]> {
    return this.schedulers().getJobSchedulersRange(start, end, asc);
  }

  getJobSchedulersCount(): Promise<number> {
    return this.schedulers().getJobSchedulersCount();
  }

  // -- events -----------------------------------------------------------------------------------
  async trimEvents(_maxLength: number): Promise<number> {
    return 0; // Loam keeps events by time (spec §6.6)
  }

  async publishEvent(_fields: Record<string, string | number>, _maxEvents: number): Promise<string> {
    throw new Error("publishEvent: custom events are not supported on Loam yet");
  }

  async readEvents(id: string, blockTimeout: number): Promise<any> {
    const entries = await this.events().read(id, blockTimeout);
    return R.xreadReply(this.toKey("events"), entries);
  }
}

export function createLoamBackend(name: string, opts: any, options?: FactoryOptions): LoamQueueBackend {
  return new LoamQueueBackend(connect(opts?.connection), name, opts ?? {}, options ?? {});
}

export { ConnectError };
