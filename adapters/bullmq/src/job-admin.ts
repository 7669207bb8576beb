/**
 * A job by its BullMQ id, outside a worker's lease: retry a finished one, promote, change
 * its delay, priority, data or progress, its logs, remove it or its pending children,
 * detach it from its parent, and its deduplication key. Loam's not-found and
 * invalid-state answers become BullMQ's error codes and messages (redis-shape.ts).
 */
import { DependencyState, JobState } from "./gen/loam/jobs/v1/types_pb.js";
import type { JobAdminResponse } from "./gen/loam/jobs/v1/jobs_pb.js";
import { Coalescer } from "./coalesce.js";
import { errKind, isNotFound, itemError } from "./errors.js";
import { bullId, ns, payloadOf, stateName, utf8 } from "./jobs.js";
import * as R from "./redis-shape.js";
import type { QueueCalls } from "./queue-calls.js";
import type { LoamQueueBackend } from "./backend.js";

export interface JobAdminHost {
  /** The backend of another queue: a parent's or a child's. */
  forQueue(queue: string): LoamQueueBackend;
  /** Throws BullMQ's -8 for a scheduler's pending iteration (schedulers.ts). */
  refuseRemoval(jobId: string): Promise<void>;
}

/** A running job's report: its id and a Progress or AddLog op. */
interface Report {
  job: string;
  op: any;
}

/** The most reports one JobAdminBatch carries. */
const MAX_REPORTS = 1_000;

export class JobAdmin {
  /**
   * updateProgress and log calls of concurrent processors, coalesced into one
   * JobAdminBatch per round trip. One lane: a job's reports reach the server in the
   * order they were made, as Redis runs them.
   */
  private readonly reports: Coalescer<Report, JobAdminResponse>;

  constructor(
    private readonly calls: QueueCalls,
    private readonly h: JobAdminHost,
  ) {
    const send = async (items: Report[]) => {
      const res = await calls.client.jobAdminBatch({ queue: calls.queue, items: items.map((r) => ({ job: r.job, op: { op: r.op } })) });
      return items.map((_, i) => {
        const r = res.results[i]?.result;
        if (r?.case === "response") return r.value;
        if (r?.case === "error") return itemError(r.value.code, r.value.message);
        return undefined;
      });
    };
    this.reports = new Coalescer<Report, JobAdminResponse>(MAX_REPORTS, "JobAdminBatch", send);
  }

  /** A report by job id, through the coalesced JobAdminBatch, with BullMQ's errors. */
  private report(jobId: string, op: any, command: string): Promise<JobAdminResponse> {
    return asBullMQ(this.reports.add({ job: String(jobId), op }), jobId, command);
  }

  async retryFinishedJob(job: any, state: "failed" | "completed", opts?: any): Promise<void> {
    const j = await this.calls.getJob(job.id);
    if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId: job.id, command: "reprocessJob" });
    if (stateName(j.state) !== state) {
      throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId: job.id, command: "reprocessJob", state });
    }
    await this.calls.jobOp(job.id, { case: "retry", value: { keepAttempts: !opts?.resetAttemptsMade } });
  }

  private byId(jobId: string, op: any, command: string, state?: string) {
    return asBullMQ(this.calls.jobOp(jobId, op), jobId, command, state);
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
    await this.report(jobId, { case: "progress", value: { progress: utf8(JSON.stringify(progress)) } }, "updateProgress");
  }

  async addLog(jobId: string, logRow: string, keepLogs?: number): Promise<number> {
    const r = await this.report(jobId, { case: "addLog", value: { line: logRow, keep: keepLogs ?? 0 } }, "addLog");
    return r.logCount;
  }

  async clearLogs(jobId: string, keepLogs?: number): Promise<void> {
    await this.byId(jobId, { case: "clearLogs", value: { keep: keepLogs ?? 0 } }, "clearLogs");
  }

  async remove(jobId: string, removeChildren: boolean): Promise<number> {
    await this.h.refuseRemoval(String(jobId));
    try {
      await this.calls.jobOp(jobId, { case: "remove", value: { children: !!removeChildren } });
      return 1;
    } catch (e) {
      if (errKind(e) === "invalid_state") return 0; // held by a worker
      if (isNotFound(e) || errKind(e) === "invalid_argument") return 1;
      throw e;
    }
  }

  async removeUnprocessedChildren(jobId: string): Promise<void> {
    const deps = await this.calls.children(jobId);
    for (const d of deps) {
      if (d.state !== DependencyState.PENDING) continue;
      // A failed child stays pending for a parent that waits on it (no failure flag), and
      // a running one is locked: BullMQ removes neither.
      const child = this.h.forQueue(d.queue);
      const j = await child.getJob(d.jobId);
      if (!j || j.state === JobState.ACTIVE || stateName(j.state) === "failed" || j.state === JobState.COMPLETED) continue;
      await child.remove(d.jobKey || d.jobId, true).catch(() => 0);
    }
  }

  async removeChildDependency(jobId: string, parentKey: string): Promise<boolean> {
    const p = R.parseNodeKey(parentKey);
    if (!(await this.h.forQueue(p.queueName).getJob(p.id))) {
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
    const r = await this.calls.client.jobAdmin({ queue: this.calls.queue, op: { op: { case: "removeDedupKey", value: { dedupId: deduplicationId } } } }).catch(() => undefined);
    return r?.removed ? 1 : 0;
  }

  async getDeduplicationJobId(deduplicationId: string): Promise<string | null> {
    try {
      const r = await this.calls.client.jobAdmin({ queue: this.calls.queue, op: { op: { case: "getDedup", value: { dedupId: deduplicationId } } } });
      return r.job ? bullId(r.job) : null;
    } catch (e) {
      if (isNotFound(e)) return null;
      throw e;
    }
  }
}

/** A call on a job by id, its not-found (and, given `state`, invalid-state) answer as
 * BullMQ's error for `command`. */
async function asBullMQ<T>(call: Promise<T>, jobId: string, command: string, state?: string): Promise<T> {
  try {
    return await call;
  } catch (e) {
    const k = errKind(e);
    if (k === "not_found") throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId, command });
    if (k === "invalid_state" && state) throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId, command, state });
    throw e;
  }
}
