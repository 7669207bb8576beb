/**
 * `LoamQueueBackend`: BullMQ 6.7's IQueueBackend over Loam's JobsService. The class owns
 * the lifecycle (names, readiness, close) and adding jobs; every other member is one line
 * that hands the call to its group: active-jobs.ts (fetching, locking, finishing and
 * stalled jobs), job-admin.ts (a job by id), queue-admin.ts (bulk admin, queue meta, rate
 * limits), getters.ts, flows.ts and schedulers.ts. The Loam calls the groups share are in
 * queue-calls.ts; Redis-shaped values come from redis-shape.ts, job conversions from
 * jobs.ts and QueueEvents from events.ts.
 */
import { EventEmitter } from "node:events";
import { randomUUID } from "node:crypto";
import { ConnectError } from "@connectrpc/connect";
import { connect, type Connection } from "./connection.js";
import type { Job as LoamJob } from "./gen/loam/jobs/v1/types_pb.js";
import { errKind } from "./errors.js";
import { EventReader } from "./events.js";
import { ns, toLoam, type JobJsonIn } from "./jobs.js";
import * as R from "./redis-shape.js";
import { Enqueuer } from "./producer-path.js";
import { toBullQueue, toLoamQueue } from "./queue-names.js";
import { rememberDelayed } from "./client-clock.js";
import { Completer, LeaseBook } from "./worker-path.js";
import { QueueCalls } from "./queue-calls.js";
import { ActiveJobs } from "./active-jobs.js";
import { JobAdmin } from "./job-admin.js";
import { QueueAdmin } from "./queue-admin.js";
import { Getters } from "./getters.js";
import { Flows, type FlowEntry } from "./flows.js";
import { Schedulers } from "./schedulers.js";

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

export class LoamQueueBackend extends EventEmitter {
  readonly qualifiedName: string;
  readonly keys: R.KeysMap;
  readonly minimumBlockTimeout = 0.001;
  readonly maximumBlockTimeout = 30;
  private closingPromise: Promise<void> | undefined;
  private readonly s: Shared;
  private reader: EventReader | null = null;
  private names: string[] = [];
  private readonly calls: QueueCalls;
  private readonly active: ActiveJobs;
  private readonly jobAdmin: JobAdmin;
  private readonly queueAdmin: QueueAdmin;
  private readonly getters: Getters;
  private readonly flows: Flows;

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
    this.s = sharedOf(conn);
    this.calls = new QueueCalls(conn.client, this.queueName);
    this.active = new ActiveJobs(this.calls, {
      opts,
      workerId: `${opts.name ?? "bullmq"}:${randomUUID().slice(0, 8)}`,
      connKey: conn.key,
      book: this.s.book,
      completer: this.s.completer,
      ready: () => this.ready(),
      isClosing: () => this.closingPromise !== undefined,
      promote: (id) => this.promote(id),
      rateLimitTtl: () => this.getRateLimitTtl(),
    });
    this.jobAdmin = new JobAdmin(this.calls, {
      forQueue: (q) => this.forQueue(q),
      refuseRemoval: (id) => this.schedulers().refuseRemoval(id),
    });
    this.queueAdmin = new QueueAdmin(this.calls, this.s.meta);
    this.getters = new Getters(this.calls, this.qualifiedName);
    this.flows = new Flows(this.calls, (q) => this.forQueue(q));
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
    if (!this.reader) this.reader = new EventReader(this.conn.client, this.queueName);
    return this.reader;
  }

  private async applyWorkerOptions(): Promise<void> {
    // The stalled check is the server's sweep on Loam, so the worker's stalled options
    // become the queue's (README, "Stalled jobs"): maxStalledCount → max_stalled (a job
    // stalled past it is failed by the next worker that takes it: deferred failure),
    // skipStalledCheck → skip_stalled_check, stalledInterval → stalled_interval_ns.
    const msc = typeof this.opts.maxStalledCount === "number" ? this.opts.maxStalledCount : undefined;
    const skip = this.opts.skipStalledCheck === true;
    const intervalNs = stalledIntervalNs(this.opts.stalledInterval);
    const cfg = await this.calls.config();
    const wantStalled = msc ?? (cfg?.maxStalled ?? 1);
    // A parent failed by a child (failParentOnFailure) is failed by a worker too, as
    // BullMQ does: it goes back to wait with the reason as its deferred failure.
    if (
      !cfg || !cfg.deferStalledFailure || !cfg.deferChildFailure || (msc !== undefined && cfg.maxStalled !== msc) ||
      cfg.skipStalledCheck !== skip || cfg.stalledIntervalNs !== intervalNs
    ) {
      // Only these fields: a whole config written back would undo a setting another
      // client changed since the read (a global rate limit set as the worker starts).
      const config = {
        maxStalled: wantStalled, deferStalledFailure: true, deferChildFailure: true,
        skipStalledCheck: skip, stalledIntervalNs: intervalNs,
      };
      const fields = ["max_stalled", "defer_stalled_failure", "defer_child_failure", "skip_stalled_check", "stalled_interval_ns"];
      await this.calls.queueOp({ case: "update", value: { config, fields } });
    }
    const l = this.opts.limiter;
    if (l && l.max && l.duration) {
      await this.calls.queueOp({ case: "setRateLimit", value: { rateLimit: { max: l.max, durationNs: ns(l.duration) } } });
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
        this.active.close();
        this.emit("close");
      })();
    }
    return this.closingPromise;
  }

  async disconnect(): Promise<void> {
    this.reader?.close();
    this.active.interrupt();
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

  getJob(jobId: string): Promise<LoamJob | undefined> {
    return this.calls.getJob(jobId);
  }

  // -- adding jobs -------------------------------------------------------------------
  private enqueuer(): Enqueuer {
    let e = this.s.enqueuers.get(this.queueName);
    if (!e) this.s.enqueuers.set(this.queueName, (e = new Enqueuer(this.calls.client, this.queueName)));
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
      const res = await this.calls.client.enqueueBulk({ queue: this.queueName, jobs: chunk });
      res.results.forEach((r, j) => {
        const e = entries[i + j];
        if (r.result.case === "enqueued") out.push(r.result.value.jobKey || String(e.jobId ?? "") || r.result.value.job);
        else if (e.jobId && r.result.case === "error" && r.result.value.code === "already_exists") out.push(String(e.jobId));
        else throw new Error(r.result.case === "error" ? r.result.value.message : "addJobs: no result");
      });
    }
    return out;
  }

  // -- fetching, locking and finishing (active-jobs.ts) ----------------------------------
  moveToActive(token: string, name?: string) { return this.active.moveToActive(token, name); }
  waitForJob(blockTimeout: number) { return this.active.waitForJob(blockTimeout); }
  disconnectBlocking(wait?: boolean) { return this.active.disconnectBlocking(wait); }
  reconnectBlocking() { return this.active.reconnectBlocking(); }
  moveToCompleted(job: any, returnValue: any, removeOnComplete: any, token: string, fetchNext: boolean) {
    return this.active.moveToCompleted(job, returnValue, removeOnComplete, token, fetchNext);
  }
  moveToFailed(job: any, failedReason: string, removeOnFail: any, token: string, fetchNext: boolean, fieldsToUpdate?: Record<string, any>) {
    return this.active.moveToFailed(job, failedReason, removeOnFail, token, fetchNext, fieldsToUpdate);
  }
  moveToDelayed(jobId: string, timestamp: number, delay: number, token?: string, opts?: any) {
    return this.active.moveToDelayed(jobId, timestamp, delay, token, opts);
  }
  retryJob(jobId: string, lifo: boolean, token?: string, opts?: any) { return this.active.retryJob(jobId, lifo, token, opts); }
  moveToWaitingChildren(jobId: string, token: string, opts?: any) { return this.active.moveToWaitingChildren(jobId, token, opts); }
  moveJobFromActiveToWait(jobId: string, token?: string) { return this.active.moveJobFromActiveToWait(jobId, token); }
  extendLock(jobId: string, token: string, duration: number) { return this.active.extendLock(jobId, token, duration); }
  extendLocks(jobIds: string[], tokens: string[], duration: number) { return this.active.extendLocks(jobIds, tokens, duration); }
  moveStalledJobsToWait() { return this.active.moveStalledJobsToWait(); }

  // -- a job by id (job-admin.ts) ---------------------------------------------------------
  retryFinishedJob(job: any, state: "failed" | "completed", opts?: any) { return this.jobAdmin.retryFinishedJob(job, state, opts); }
  promote(jobId: string) { return this.jobAdmin.promote(jobId); }
  changeDelay(jobId: string, delay: number) { return this.jobAdmin.changeDelay(jobId, delay); }
  changePriority(jobId: string, priority?: number, lifo?: boolean) { return this.jobAdmin.changePriority(jobId, priority, lifo); }
  updateData(job: any, data: any) { return this.jobAdmin.updateData(job, data); }
  updateProgress(jobId: string, progress: any) { return this.jobAdmin.updateProgress(jobId, progress); }
  addLog(jobId: string, logRow: string, keepLogs?: number) { return this.jobAdmin.addLog(jobId, logRow, keepLogs); }
  clearLogs(jobId: string, keepLogs?: number) { return this.jobAdmin.clearLogs(jobId, keepLogs); }
  remove(jobId: string, removeChildren: boolean) { return this.jobAdmin.remove(jobId, removeChildren); }
  removeUnprocessedChildren(jobId: string) { return this.jobAdmin.removeUnprocessedChildren(jobId); }
  removeChildDependency(jobId: string, parentKey: string) { return this.jobAdmin.removeChildDependency(jobId, parentKey); }
  removeDeduplicationKey(deduplicationId: string, jobId: string) { return this.jobAdmin.removeDeduplicationKey(deduplicationId, jobId); }
  deleteDeduplicationKey(deduplicationId: string) { return this.jobAdmin.deleteDeduplicationKey(deduplicationId); }
  getDeduplicationJobId(deduplicationId: string) { return this.jobAdmin.getDeduplicationJobId(deduplicationId); }

  // -- bulk admin, queue meta, rate limits (queue-admin.ts) -------------------------------
  pause(pause: boolean) { return this.queueAdmin.pause(pause); }
  drain(delayed: boolean) { return this.queueAdmin.drain(delayed); }
  cleanJobsByState(state: string, timestamp: number, limit?: number) { return this.queueAdmin.cleanJobsByState(state, timestamp, limit); }
  obliterate(opts: { force: boolean; count: number }) { return this.queueAdmin.obliterate(opts); }
  removeOrphanedJobs(count?: number, limit?: number) { return this.queueAdmin.removeOrphanedJobs(count, limit); }
  retryFinishedJobs(state?: "failed" | "completed", count?: number, timestamp?: number) {
    return this.queueAdmin.retryFinishedJobs(state, count, timestamp);
  }
  promoteJobs(count?: number) { return this.queueAdmin.promoteJobs(count); }
  setQueueMeta(values: Record<string, string | number>) { return this.queueAdmin.setQueueMeta(values); }
  getQueueMeta() { return this.queueAdmin.getQueueMeta(); }
  getQueueMetaField(field: string) { return this.queueAdmin.getQueueMetaField(field); }
  getQueueMetaFields(fields: string[]) { return this.queueAdmin.getQueueMetaFields(fields); }
  removeQueueMetaFields(fields: string[]) { return this.queueAdmin.removeQueueMetaFields(fields); }
  hasQueueMetaField(field: string) { return this.queueAdmin.hasQueueMetaField(field); }
  setRateLimit(expireTimeMs: number) { return this.queueAdmin.setRateLimit(expireTimeMs); }
  getRateLimitTtl(maxJobs?: number) { return this.queueAdmin.getRateLimitTtl(maxJobs); }
  removeRateLimitKey() { return this.queueAdmin.removeRateLimitKey(); }
  removeDeprecatedPriorityKey() { return this.queueAdmin.removeDeprecatedPriorityKey(); }

  // -- getters (getters.ts) ---------------------------------------------------------------
  getState(jobId: string) { return this.getters.getState(jobId); }
  isFinished(jobId: string, returnValue?: boolean) { return this.getters.isFinished(jobId, returnValue); }
  isJobInState(state: string, jobId: string) { return this.getters.isJobInState(state, jobId); }
  getJobData(jobId: string) { return this.getters.getJobData(jobId); }
  getJobLogs(jobId: string, start: number, end: number, asc: boolean) { return this.getters.getJobLogs(jobId, start, end, asc); }
  getCounts(types: string[], delayedTimestamp?: number) { return this.getters.getCounts(types, delayedTimestamp); }
  getCountsPerPriority(priorities: number[]) { return this.getters.getCountsPerPriority(priorities); }
  getRanges(types: string[], start?: number, end?: number, asc?: boolean) { return this.getters.getRanges(types, start, end, asc); }
  getMetrics(type: "completed" | "failed", start?: number, end?: number) { return this.getters.getMetrics(type, start, end); }
  isMaxed() { return this.getters.isMaxed(); }

  // -- flows (flows.ts) -------------------------------------------------------------------
  addFlow(entries: FlowEntry[]) { return this.flows.addFlow(entries); }
  getDependencyCounts(jobId: string, types: string[]) { return this.flows.getDependencyCounts(jobId, types); }
  getDependencies(jobId: string, opts: any) { return this.flows.getDependencies(jobId, opts); }
  getProcessedChildrenValues(jobId: string) { return this.flows.getProcessedChildrenValues(jobId); }
  getIgnoredChildrenFailures(jobId: string) { return this.flows.getIgnoredChildrenFailures(jobId); }
  paginate(key: string, opts: { start: number; end: number; fetchJobs?: boolean }) { return this.flows.paginate(key, opts); }

  // -- job schedulers (schedulers.ts) -----------------------------------------------------
  private sched: Schedulers | null = null;

  private schedulers(): Schedulers {
    if (!this.sched) {
      this.sched = new Schedulers({
        client: this.calls.client,
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
  ) {
    return this.schedulers().addJobScheduler(jobSchedulerId, nextMillis, templateData, templateOpts, opts, delayedJobOpts, producerId);
  }
  updateJobSchedulerNextMillis(jobSchedulerId: string, nextMillis: number, templateData: string, delayedJobOpts: any, producerId?: string) {
    return this.schedulers().updateJobSchedulerNextMillis(jobSchedulerId, nextMillis, templateData, delayedJobOpts, producerId);
  }
  removeJobScheduler(jobSchedulerId: string) { return this.schedulers().removeJobScheduler(jobSchedulerId); }
  getJobScheduler(id: string) { return this.schedulers().getJobScheduler(id); }
  isJobScheduler(id: string) { return this.schedulers().isJobScheduler(id); }
  getJobSchedulerData(key: string) { return this.schedulers().getJobSchedulerData(key); }
  getJobSchedulersRange(start: number, end: number, asc: boolean) { return this.schedulers().getJobSchedulersRange(start, end, asc); }
  getJobSchedulersCount() { return this.schedulers().getJobSchedulersCount(); }

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

/** BullMQ's default stalledInterval: a worker that leaves it keeps Loam's sweep at lease
 * expiry (sooner than BullMQ's next check); any other value is the queue's check period. */
const BULLMQ_DEFAULT_STALLED_INTERVAL_MS = 30_000;

function stalledIntervalNs(ms: unknown): bigint {
  return typeof ms === "number" && ms > 0 && ms !== BULLMQ_DEFAULT_STALLED_INTERVAL_MS ? ns(ms) : 0n;
}
