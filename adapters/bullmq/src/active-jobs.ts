/**
 * The jobs a BullMQ worker holds: moveToActive hands out leases (worker-path.ts prefetches
 * them), the moveTo* calls, retryJob and moveJobFromActiveToWait finish them, extendLock
 * extends them, and jobs the server reclaimed as stalled are held back for BullMQ's
 * stalled check. A job handed out is in the connection's LeaseBook under BullMQ's token,
 * which every finish checks.
 */
import { create } from "@bufbuild/protobuf";
import type { Lease } from "./gen/loam/jobs/v1/jobs_pb.js";
import { JobSchema, JobState, type Job as LoamJob } from "./gen/loam/jobs/v1/types_pb.js";
import { errKind } from "./errors.js";
import { bullId, keep, ns, toJobJson, utf8 } from "./jobs.js";
import * as R from "./redis-shape.js";
import { promoteDue } from "./client-clock.js";
import type { QueueCalls } from "./queue-calls.js";
import { CompleteFailed, type Completer, Fetcher, type LeaseBook, type CompleteInit, type Held } from "./worker-path.js";

/** What the holder of a worker's jobs takes from its backend. */
export interface ActiveJobsHost {
  readonly opts: Record<string, any>; // the worker's: lockDuration, concurrency, name, removeOn*, metrics, stalledInterval
  readonly workerId: string;
  readonly connKey: string;
  readonly book: LeaseBook; // shared by the connection's backends
  readonly completer: Completer; // shared by the connection's backends
  ready(): Promise<void>; // the worker's options applied to the queue
  isClosing(): boolean;
  promote(jobId: string): Promise<void>;
  rateLimitTtl(): Promise<number>;
}

/** With an age to keep by, the finish carries this process's clock: BullMQ's scripts
 * judge `removeOnComplete/Fail: {age}` by the worker's timestamp, and so does the core
 * when it is given one (Outcome.clock_ms). */
function clockFor(k: { age?: bigint } | undefined): { clockMs?: bigint } {
  return k?.age !== undefined ? { clockMs: BigInt(Date.now()) } : {};
}

export class ActiveJobs {
  private fetcher: Fetcher | null = null;
  private handed = 0; // jobs handed to BullMQ, not yet finished: the fetcher leases up to concurrency minus these

  constructor(
    private readonly calls: QueueCalls,
    private readonly h: ActiveJobsHost,
  ) {}

  /** The backend closes: leases held back or prefetched go back to their queue. */
  close(): void {
    if (this.heldTimer) clearTimeout(this.heldTimer);
    this.releaseLeases(this.stalledHeld.map((h) => h.lease));
    this.stalledHeld = [];
    if (this.fetcher) {
      this.fetcher.closed = true;
      this.fetcher.interrupt();
      this.releaseLeases(this.fetcher.drainBuffer());
    }
  }

  /** The backend disconnects: a long poll in flight ends now. */
  interrupt(): void {
    this.fetcher?.interrupt();
  }

  // -- fetching and locking --------------------------------------------------------------
  private fetch(): Fetcher {
    if (!this.fetcher) {
      const lock = Number(this.h.opts.lockDuration ?? 30_000);
      this.fetcher = new Fetcher(
        this.calls.client,
        {
          queue: this.calls.queue,
          worker: this.h.workerId,
          visibilityNs: ns(lock),
          concurrency: () => Math.max(1, Number(this.h.opts.concurrency ?? 1)),
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
      void this.h.completer.complete({ token: l.token, outcome: { kind: { case: "release", value: {} } } }).catch(() => undefined);
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
    this.h.book.set({ bullToken: token, queue: this.calls.queue, job: l.token!.job, epoch: l.token!.epoch, key });
    this.handed++;
    return R.activeTuple(toJobJson(job, { processedBy: name ?? this.h.opts.name }), key);
  }

  /** Nothing to hand out. A rate limit is the server's to keep (any process may lift
   * it), so no TTL: the worker's next wait is a long poll the server ends when a job can
   * be leased. */
  private noJob(): any[] {
    return R.activeTuple(null, "", 0, 0);
  }

  /** `bufferOnly`: see Fetcher.take; BullMQ itself never passes it. */
  async moveToActive(token: string, name?: string, bufferOnly = false): Promise<any[]> {
    await this.h.ready();
    if (this.stalledHeld.length) this.releaseOverdueHeld();
    for (;;) {
      const l = await this.fetch().take(bufferOnly);
      bufferOnly = false; // after a promotion below, the server has jobs to give
      // Nothing ready: delayed jobs due by this process's clock may be (client-clock.ts).
      if (!l && (await promoteDue(this.h.connKey, this.calls.queue, (id) => this.h.promote(id)))) continue;
      if (!l) return this.noJob();
      if (!this.holdIfStalled(l)) return this.hand(l, token, name);
    }
  }

  async waitForJob(blockTimeout: number): Promise<{ member: string; score: number } | null> {
    await this.h.ready();
    const got = await this.fetch().wait(blockTimeout);
    return got ? { member: this.calls.queue, score: 0 } : null;
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
    const h = this.h.book.get(this.calls.queue, String(jobId));
    if (!h) throw R.finishedError({ code: R.ErrorCode.JobLockNotExist, jobId, command });
    if (token && token !== "0" && h.bullToken !== token) {
      throw R.finishedError({ code: R.ErrorCode.JobLockMismatch, jobId, command, state: "active" });
    }
    return h;
  }

  private letGo(h: Held): void {
    this.h.book.delete(h.queue, h.key);
    if (this.handed > 0) this.handed--;
  }

  private async finish(h: Held, outcome: CompleteInit["outcome"], command: string, fetchNext = false) {
    try {
      const item = { token: { queue: h.queue, job: h.job, epoch: h.epoch }, outcome };
      return await this.h.completer.complete(item, fetchNext && !this.h.isClosing() ? this.fetch() : undefined);
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
   * moveToFinished with fetchNext: the completion, coalesced with its neighbours into one
   * CompleteBatch that also leases the slots they free (worker-path.ts), then the next
   * job from those leases. Measured: a Lease sent beside the CompleteBatch instead made
   * smaller batches and a slower drain.
   */
  private async finishAndFetch(h: Held, outcome: CompleteInit["outcome"], fetchNext: boolean, token: string) {
    const done = await this.finish(h, outcome, "moveToFinished", fetchNext);
    const finishedOn = Date.now();
    return { result: await this.next(fetchNext, token, this.h.opts.name, done.noMoreJobs), finishedOn };
  }

  private async next(fetchNext: boolean, token: string, name?: string, bufferOnly = false): Promise<any[] | undefined> {
    if (!fetchNext || this.h.isClosing()) return undefined;
    return this.moveToActive(token, name, bufferOnly);
  }

  private async missingOrNotActive(jobId: string, command: string): Promise<never> {
    const j = await this.calls.getJob(jobId);
    if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command });
    if (j.state !== JobState.ACTIVE) throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId, command, state: "active" });
    throw R.finishedError({ code: R.ErrorCode.JobLockMismatch, jobId, command, state: "active" });
  }

  async moveToCompleted(job: any, returnValue: any, removeOnComplete: any, token: string, fetchNext: boolean) {
    const h = this.h.book.get(this.calls.queue, String(job.id));
    if (!h || (token && token !== "0" && h.bullToken !== token)) await this.missingOrNotActive(job.id, "moveToFinished");
    this.letGo(h!);
    let rv: string;
    try {
      rv = JSON.stringify(returnValue) ?? "null";
    } catch {
      rv = "null";
    }
    const k = keep(removeOnComplete ?? this.h.opts.removeOnComplete);
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
    const max = Number(this.h.opts.metrics?.maxDataPoints ?? 0);
    return max > 0 ? { metrics: { atMs: BigInt(Date.now()), maxDataPoints: Math.min(max, 100_000) } } : {};
  }

  private holdAgain(h: Held): void {
    this.h.book.set(h);
    this.handed++;
  }

  async moveToFailed(job: any, failedReason: string, removeOnFail: any, token: string, fetchNext: boolean, fieldsToUpdate?: Record<string, any>) {
    const h = this.h.book.get(this.calls.queue, String(job.id));
    if (!h || (token && token !== "0" && h.bullToken !== token)) await this.missingOrNotActive(job.id, "moveToFinished");
    this.letGo(h!);
    const error = { code: "error", message: failedReason ?? "", stacktrace: String(fieldsToUpdate?.stacktrace ?? "[]") };
    const attempts = Math.max(1, Number(job.opts?.attempts ?? 1));
    const exhausted = Number(job.attemptsMade ?? 0) + 1 >= attempts;
    const k = keep(removeOnFail ?? this.h.opts.removeOnFail);
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
    const next = opts?.fetchNext ? await this.next(true, token ?? "", this.h.opts.name) : undefined;
    return next && next[0] ? next : [];
  }

  async retryJob(jobId: string, _lifo: boolean, token?: string, opts?: any): Promise<void> {
    const h = this.h.book.get(this.calls.queue, String(jobId));
    if (!h) {
      const j = await this.calls.getJob(jobId);
      if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command: "retryJob" });
      throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId, command: "retryJob", state: "active" });
    }
    this.letGo(h);
    const f = opts?.fieldsToUpdate ?? {};
    const error = { code: "error", message: String(f.failedReason ?? ""), stacktrace: String(f.stacktrace ?? "[]") };
    await this.finish(h, { kind: { case: "retry", value: { error, afterNs: 0n } } }, "retryJob");
  }

  async moveToWaitingChildren(jobId: string, token: string, _opts?: any): Promise<boolean> {
    const h = this.h.book.get(this.calls.queue, String(jobId));
    if (!h) {
      const j = await this.calls.getJob(jobId);
      if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command: "moveToWaitingChildren" });
      if (token === "0" || !token) {
        throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId, command: "moveToWaitingChildren", state: "active" });
      }
      throw R.finishedError({ code: R.ErrorCode.JobLockNotExist, jobId, command: "moveToWaitingChildren" });
    }
    // A child failed under failParentOnFailure while this job ran: BullMQ's -9, thrown
    // while the job is still active, so the worker fails it with that message.
    if ((await this.calls.getJob(jobId))?.failedChild) {
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
    const h = this.h.book.get(this.calls.queue, String(jobId));
    if (!h) {
      const j = await this.calls.getJob(jobId);
      if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command: "moveJobFromActiveToWait" });
      throw R.finishedError({ code: R.ErrorCode.JobLockNotExist, jobId, command: "moveJobFromActiveToWait" });
    }
    this.letGo(h);
    // The block was set by rateLimit(); the job goes back to wait without an attempt.
    await this.finish(h, { kind: { case: "release", value: {} } }, "moveJobFromActiveToWait");
    return Math.max(0, await this.h.rateLimitTtl());
  }

  async extendLock(jobId: string, token: string, duration: number): Promise<number> {
    const h = this.h.book.get(this.calls.queue, String(jobId));
    if (!h || (token && h.bullToken !== token)) return 0;
    try {
      await this.calls.client.extend({ token: { queue: h.queue, job: h.job, epoch: h.epoch }, byNs: ns(Math.max(duration, 1)) });
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
    return Math.min(Number(this.h.opts.stalledInterval ?? 30_000) + 50, Number(this.h.opts.lockDuration ?? 30_000) / 2, 1000);
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
}
