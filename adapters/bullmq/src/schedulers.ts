/**
 * BullMQ's job schedulers on Loam. A scheduler is a Loam schedule (`bullmq:<queue>:<id>`,
 * so the API, CLI and console show it) with driver SCHEDULE_DRIVER_ITERATIONS: the
 * server keeps the rule, the template and the chain's state and never fires it. As in
 * BullMQ, the client computes each next time (cron in JobScheduler, `every` here), each
 * iteration is a delayed job with id `repeat:<id>:<nextMillis>`, enqueued with the record
 * in one transaction, and the worker that takes an iteration advances the chain by one,
 * guarded by the iteration it holds (producerId) so two workers advance it once.
 */
import { JobState, ScheduleDriver, type Job as LoamJob, type ScheduleRecord } from "./gen/loam/jobs/v1/types_pb.js";
import type { JobsClient } from "./connection.js";
import { errKind, isNotFound } from "./errors.js";
import { H_OPTS, H_SCHEDULE, ms, ns, toLoam, utf8 } from "./jobs.js";
import * as R from "./redis-shape.js";
import { rememberDelayed } from "./client-clock.js";

const PREFIX = "bullmq:";
const RACED = Symbol("raced");
const MAX_UPSERT_TRIES = 5;
/** BullMQ walks this many `every` slots past taken ones before giving up (-11). */
const MAX_SLOT_SCANS = 32;
const PENDING = new Set([JobState.WAITING, JobState.PRIORITIZED, JobState.DELAYED]);

export function scheduleId(queue: string, id: string): string {
  return `${PREFIX}${queue}:${id}`;
}

/** The iteration job id BullMQ builds for a scheduler and a time. */
export function iterationId(schedulerId: string, millis: number): string {
  return `repeat:${schedulerId}:${millis}`;
}

/**
 * The next time of an `every` scheduler, and its offset within the interval: the first
 * iteration runs now (or at startDate, or at the next slot plus an explicit offset); later
 * ones follow the previous by `every`, realigned to the slot grid when some were missed.
 */
export function everyNextMillis(prev: number | undefined, every: number, now: number, offset: number, startDate?: number): [number, number] {
  let next: number;
  if (prev === undefined) {
    if (startDate) next = Math.max(startDate, now);
    else if (offset > 0) {
      next = Math.floor(now / every) * every + offset;
      if (next <= now) next += every;
    } else next = now;
  } else {
    next = prev + every;
    if (next < now) {
      const aligned = Math.floor(now / every) * every + (offset || 0);
      next = aligned <= now ? aligned + every : aligned;
    }
  }
  if (!offset) offset = next - Math.floor(next / every) * every;
  return [Math.floor(next), Math.floor(offset)];
}

export interface SchedulerHost {
  readonly client: JobsClient;
  readonly queueName: string;
  readonly connKey: string;
  getJob(jobId: string): Promise<LoamJob | undefined>;
  isPaused(): Promise<boolean>;
}

/**
 * Scheduler changes from this process, one at a time per scheduler. BullMQ's scripts read
 * the current iteration and write the next atomically; here the read and the write are two
 * calls, so concurrent upserts of one id (Promise.all in a producer) must not interleave.
 * Across processes the server's guards hold: an iteration id is taken once, and an advance
 * only moves the iteration it names.
 */
const chains = new Map<string, Promise<unknown>>();

function serially<T>(key: string, fn: () => Promise<T>): Promise<T> {
  const prev = chains.get(key) ?? Promise.resolve();
  const run = prev.then(fn, fn);
  const tail = run.catch(() => undefined);
  chains.set(key, tail);
  void tail.then(() => {
    if (chains.get(key) === tail) chains.delete(key);
  });
  return run;
}

function nonEmpty(json: string | undefined): string | undefined {
  return json && json !== "{}" ? json : undefined;
}

export class Schedulers {
  constructor(private readonly h: SchedulerHost) {}

  private get q(): string {
    return this.h.queueName;
  }

  /** The Loam schedule of a scheduler id, whatever drives it. */
  private async stored(id: string): Promise<ScheduleRecord | undefined> {
    try {
      return (await this.h.client.getSchedule({ id: scheduleId(this.q, id) })).schedule;
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  /** The scheduler: a schedule its iterations drive (one the server fires is not one). */
  async record(id: string): Promise<ScheduleRecord | undefined> {
    const rec = await this.stored(id);
    return rec && rec.driver === ScheduleDriver.ITERATIONS ? rec : undefined;
  }

  private iteration(name: string, data: string, delayedJobOpts: any, jobId: string, delay: number, now: number, schedulerId: string) {
    const { task, opts } = toLoam(
      {
        name,
        data: data || "{}",
        opts: { ...(delayedJobOpts ?? {}), delay, jobId },
        timestamp: Number(delayedJobOpts?.timestamp ?? now),
        repeatJobKey: schedulerId,
      },
      jobId,
    );
    delete (opts as any).dedup; // an iteration is named by its id; dedup would drop the chain
    return { task, opts };
  }

  private lockKey(schedulerId: string): string {
    return `${this.h.connKey}\0${this.q}\0${schedulerId}`;
  }

  addJobScheduler(
    schedulerId: string,
    nextMillis: number,
    templateData: string,
    templateOpts: any,
    opts: any,
    delayedJobOpts: any,
    _producerId?: string,
  ): Promise<[string, number]> {
    return serially(this.lockKey(schedulerId), () => this.upsert(schedulerId, nextMillis, templateData, templateOpts, opts, delayedJobOpts));
  }

  /** Another process changed the scheduler between our read and our write: read again
   * (the write is guarded by what was read; the last try goes unguarded). */
  private async upsert(id: string, next: number, data: string, tplOpts: any, opts: any, jobOpts: any): Promise<[string, number]> {
    for (let attempt = 1; ; attempt++) {
      const r = await this.upsertOnce(id, next, data, tplOpts, opts, jobOpts, attempt < MAX_UPSERT_TRIES);
      if (r !== RACED) return r;
    }
  }

  private async upsertOnce(
    schedulerId: string,
    nextMillis: number,
    templateData: string,
    templateOpts: any,
    opts: any,
    delayedJobOpts: any,
    guarded = true,
  ): Promise<[string, number] | typeof RACED> {
    const now = Date.now();
    const stored = await this.stored(schedulerId);
    const rec = stored?.driver === ScheduleDriver.ITERATIONS ? stored : undefined;
    const prev = rec ? ms(rec.nextNs) : undefined;
    const every = opts.every ? Number(opts.every) : 0;
    const givenOffset = opts.offset ?? delayedJobOpts?.repeat?.offset; // null: none given
    let offset = Number(givenOffset ?? 0) || 0;
    let updatedEvery = false;
    if (every) {
      let seed = prev;
      if (prev !== undefined && (rec!.everyNs ? ms(rec!.everyNs) : 0) !== every) {
        seed = undefined;
        updatedEvery = true;
      }
      const startDate = opts.startDate ? Number(opts.startDate) : undefined;
      [nextMillis, offset] = everyNextMillis(seed, every, now, offset, startDate);
      // An upsert without an offset keeps the one the scheduler was created with.
      if (givenOffset == null && rec && prev !== undefined) offset = ms(rec.offsetNs);
    }
    // The previous iteration goes if it has not started; an `every` rule that did not
    // change then keeps its time. As in BullMQ, a waiting one of a paused queue stays.
    let replace = "";
    if (prev !== undefined) {
      const old = await this.h.getJob(iterationId(schedulerId, prev));
      if (
        old &&
        PENDING.has(old.state) &&
        old.task?.headers?.[H_SCHEDULE] === scheduleId(this.q, schedulerId) &&
        !(old.state === JobState.WAITING && (await this.h.isPaused()))
      ) {
        replace = old.id;
        if (every && !updatedEvery) nextMillis = prev;
      }
    }
    const spec = {
      id: scheduleId(this.q, schedulerId),
      driver: ScheduleDriver.ITERATIONS,
      cron: opts.pattern || undefined,
      tz: opts.pattern ? opts.tz || undefined : undefined,
      everyNs: every ? ns(every) : undefined,
      limit: opts.limit ? Number(opts.limit) : undefined,
      startNs: opts.startDate ? ns(Number(opts.startDate)) : undefined,
      endNs: opts.endDate ? ns(Number(opts.endDate)) : undefined,
      offsetNs: ns(offset),
      queue: this.q,
      task: {
        name: opts.name ?? schedulerId,
        payload: { data: utf8(templateData || "{}"), contentType: "application/json" },
        headers: { [H_OPTS]: JSON.stringify(templateOpts ?? {}) },
      },
    };
    const name = opts.name ?? schedulerId;
    for (let scans = 0; ; scans++) {
      const jobId = iterationId(schedulerId, nextMillis);
      const delay = Math.max(0, nextMillis - now);
      const { task, opts: iopts } = this.iteration(name, templateData, delayedJobOpts, jobId, delay, now, schedulerId);
      try {
        const r = await this.h.client.schedule({
          spec: spec as any,
          nextNs: ns(nextMillis),
          iterationTask: task,
          iterationOpts: { ...iopts, jobKeyKeepsFirst: false },
          replaceJobId: replace,
          ifUpdatedNs: guarded ? (stored?.updatedNs ?? 0n) : undefined,
        });
        if (!r.changed) return RACED;
        rememberDelayed(this.h.connKey, this.q, jobId, delay);
        return [jobId, delay];
      } catch (e) {
        if (errKind(e) !== "already_exists") throw e;
        // A job holds this iteration's id (stale ones of an earlier scheduler under the same
        // id, or one a worker holds): `every` tries the following slots, a pattern refuses.
        if (!every) throw R.finishedError({ code: R.ErrorCode.SchedulerJobIdCollision, command: "addJobScheduler" });
        if (scans + 1 >= MAX_SLOT_SCANS) throw R.finishedError({ code: R.ErrorCode.SchedulerJobSlotsBusy, command: "addJobScheduler" });
        nextMillis += every;
      }
    }
  }

  updateJobSchedulerNextMillis(
    schedulerId: string,
    nextMillis: number,
    templateData: string,
    delayedJobOpts: any,
    producerId?: string,
  ): Promise<string | null> {
    return serially(this.lockKey(schedulerId), () => this.advance(schedulerId, nextMillis, templateData, delayedJobOpts, producerId));
  }

  private async advance(
    schedulerId: string,
    nextMillis: number,
    templateData: string,
    delayedJobOpts: any,
    producerId?: string,
  ): Promise<string | null> {
    const rec = await this.record(schedulerId);
    if (!rec) return null; // removed: the chain ends
    const now = Date.now();
    const prev = ms(rec.nextNs);
    if (producerId !== iterationId(schedulerId, prev)) return null; // not the current iteration
    const every = rec.everyNs ? ms(rec.everyNs) : Number(delayedJobOpts?.repeat?.every ?? 0);
    if (every) {
      const offset = rec.offsetNs ? ms(rec.offsetNs) : Number(delayedJobOpts?.repeat?.offset ?? 0);
      [nextMillis] = everyNextMillis(prev, every, now, offset, rec.startNs ? ms(rec.startNs) : undefined);
    }
    const jobId = iterationId(schedulerId, nextMillis);
    const delay = Math.max(0, nextMillis - now);
    const stored = new TextDecoder().decode(rec.task?.payload?.data ?? new Uint8Array());
    const data = stored && stored !== "{}" ? stored : templateData;
    const { task, opts } = this.iteration(rec.task?.name ?? schedulerId, data, delayedJobOpts, jobId, delay, now, schedulerId);
    const r = await this.h.client.schedule({
      spec: { id: scheduleId(this.q, schedulerId) },
      advance: true,
      ifNextNs: rec.nextNs,
      nextNs: ns(nextMillis),
      iterationTask: task,
      iterationOpts: { ...opts, jobKeyKeepsFirst: true }, // taken: Loam emits `duplicated`
    });
    if (!r.changed) return null;
    rememberDelayed(this.h.connKey, this.q, jobId, delay);
    return jobId;
  }

  async removeJobScheduler(schedulerId: string): Promise<number> {
    const r = await this.h.client.unschedule({ id: scheduleId(this.q, schedulerId) });
    return r.removed ? 0 : 1; // BullMQ: 0 removed, 1 not found
  }

  /** remove(jobId) of a scheduler's pending iteration is refused (-8), as in BullMQ. */
  async refuseRemoval(jobId: string): Promise<void> {
    if (!jobId.startsWith("repeat:")) return;
    const sid = jobId.slice("repeat:".length, jobId.lastIndexOf(":"));
    const rec = sid ? await this.record(sid) : undefined;
    if (rec && iterationId(sid, ms(rec.nextNs)) === jobId) {
      throw R.finishedError({ code: R.ErrorCode.JobBelongsToJobScheduler, jobId, command: "remove" });
    }
  }

  private fields(rec: ScheduleRecord): R.SchedulerFields {
    const h = rec.task?.headers ?? {};
    return {
      name: rec.task?.name ?? "",
      iterationCount: rec.count,
      limit: rec.limit || undefined,
      startDate: rec.startNs ? ms(rec.startNs) : undefined,
      endDate: rec.endNs ? ms(rec.endNs) : undefined,
      tz: rec.tz || undefined,
      pattern: rec.cron || undefined,
      every: rec.everyNs ? ms(rec.everyNs) : undefined,
      offset: ms(rec.offsetNs),
      // BullMQ leaves an empty template's data and opts out of the hash.
      data: nonEmpty(new TextDecoder().decode(rec.task?.payload?.data ?? new Uint8Array())),
      opts: nonEmpty(h[H_OPTS]),
    };
  }

  async getJobScheduler(id: string): Promise<[any, string | null]> {
    const rec = await this.record(id);
    if (!rec) return [null, null];
    return [Object.entries(R.schedulerHash(this.fields(rec))).flat(), String(ms(rec.nextNs))];
  }

  async isJobScheduler(id: string): Promise<boolean> {
    return !!(await this.record(id));
  }

  async getJobSchedulerData(key: string): Promise<Record<string, string>> {
    const rec = await this.record(key);
    return rec ? R.schedulerHash(this.fields(rec)) : {};
  }

  private async all(): Promise<ScheduleRecord[]> {
    const prefix = scheduleId(this.q, "");
    const out: ScheduleRecord[] = [];
    let pageToken = "";
    do {
      const r = await this.h.client.listSchedules({ pageSize: 1000, pageToken });
      out.push(...r.schedules.filter((s) => s.id.startsWith(prefix) && s.driver === ScheduleDriver.ITERATIONS));
      pageToken = r.nextPageToken;
    } while (pageToken);
    return out;
  }

  async getJobSchedulersRange(start: number, end: number, asc: boolean): Promise<string[]> {
    const prefix = scheduleId(this.q, "");
    const recs = (await this.all()).map((r) => [r.id.slice(prefix.length), ms(r.nextNs)] as [string, number]);
    recs.sort((a, b) => (asc ? a[1] - b[1] : b[1] - a[1]));
    const n = recs.length;
    const hi = end < 0 ? end + n : end;
    return R.withScores(recs.slice(Math.max(start, 0), hi + 1));
  }

  async getJobSchedulersCount(): Promise<number> {
    return (await this.all()).length;
  }
}
