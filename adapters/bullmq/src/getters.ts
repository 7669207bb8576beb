/**
 * BullMQ's getters on Loam: a job's state, data and logs, whether it finished, the
 * queue's counts and ranges by BullMQ type (STATE_BY_TYPE in jobs.ts), its metrics and
 * whether it is at its concurrency.
 */
import { JobState } from "./gen/loam/jobs/v1/types_pb.js";
import type { QueueAdminResponse } from "./gen/loam/jobs/v1/jobs_pb.js";
import { isNotFound } from "./errors.js";
import { bullId, stateName, STATE_BY_TYPE, toJobJson } from "./jobs.js";
import * as R from "./redis-shape.js";
import { MAX_RANGE, type QueueCalls } from "./queue-calls.js";

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

const LIST_TYPES = new Set(["wait", "waiting", "paused", "active"]);

export class Getters {
  constructor(
    private readonly calls: QueueCalls,
    private readonly qualifiedName: string, // BullMQ's, for the key in its messages
  ) {}

  async getState(jobId: string): Promise<string> {
    const j = await this.calls.getJob(jobId);
    return j ? stateName(j.state) : "unknown";
  }

  async isFinished(jobId: string, returnValue?: boolean): Promise<number | [number, string]> {
    const j = await this.calls.getJob(jobId);
    let code = 0;
    let v = "";
    if (!j) {
      code = -1;
      v = `Missing key for job ${R.toKey(this.qualifiedName, jobId)}. isFinished`;
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
    const j = await this.calls.getJob(jobId);
    if (!j) return false;
    const name = stateName(j.state);
    return name === state || (state === "wait" && name === "waiting");
  }

  async getJobData(jobId: string): Promise<any | undefined> {
    const j = await this.calls.getJob(jobId);
    return j ? toJobJson(j) : undefined;
  }

  async getJobLogs(jobId: string, start: number, end: number, asc: boolean): Promise<{ logs: string[]; count: number }> {
    try {
      const r = await this.calls.jobOp(jobId, { case: "logs", value: { start: 0, end: 0 } });
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

  async getCounts(types: string[], _delayedTimestamp?: number): Promise<number[]> {
    const c = await this.calls.counts();
    return types.map((t) => {
      const f = COUNT_FIELD[t];
      if (!c || !f) return 0;
      let n = Number(c[f] ?? 0);
      if (t === "failed") n += Number(c.deadLettered ?? 0) + Number(c.canceled ?? 0);
      return n;
    });
  }

  async getCountsPerPriority(priorities: number[]): Promise<number[]> {
    const jobs = await this.calls.listJobs([JobState.WAITING, JobState.PRIORITIZED], MAX_RANGE);
    return priorities.map((p) => jobs.filter((j) => (j.opts?.priority ?? 0) === Number(p)).length);
  }

  async getRanges(types: string[], start = 0, end = -1, asc = false): Promise<[string][]> {
    const out: any[] = [];
    for (const t of types) {
      const states = STATE_BY_TYPE[t] ?? [];
      if (!states.length) {
        out.push([]);
        continue;
      }
      // Lists (wait, active) come newest first and BullMQ reverses them itself for asc;
      // sorted sets (the rest) come in the order asked.
      const reversed = asc && !LIST_TYPES.has(t);
      // A range counted from the newest end (a dashboard's first page) needs only the
      // jobs up to its end: listing MAX_RANGE jobs for it cost ~170 ms a call.
      const upTo = !reversed && start >= 0 && end >= 0 ? Math.min(end + 1, MAX_RANGE) : MAX_RANGE;
      let ids = (await this.calls.listJobs(states, upTo)).map((j) => bullId(j));
      if (reversed) ids = ids.reverse();
      const n = ids.length;
      const lo = start < 0 ? Math.max(start + n, 0) : start;
      const hi = end < 0 ? end + n : Math.min(end, n - 1);
      out.push(ids.slice(lo, hi + 1));
    }
    return out;
  }

  async getMetrics(type: "completed" | "failed", start = 0, end = -1): Promise<[string[], string[], number]> {
    const r = await this.calls.queueOp({ case: "metrics", value: { kind: type } }).catch((e) => {
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

  async isMaxed(): Promise<boolean> {
    const r = await this.calls.queueOp({ case: "counts", value: {} }).catch(() => undefined);
    const c = r?.config?.concurrency ?? 0;
    return !!c && Number(r?.counts?.active ?? 0) >= c;
  }
}
