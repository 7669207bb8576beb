/**
 * A job by its BullMQ id, outside a worker's lease: retry a finished one, promote, change
 * its delay, priority, data or progress, its logs, remove it or its pending children,
 * detach it from its parent, and its deduplication key. Loam's not-found and
 * invalid-state answers become BullMQ's error codes and messages (redis-shape.ts).
 */
import { DependencyState, JobState } from "./gen/loam/jobs/v1/types_pb.js";
import { errKind, isNotFound } from "./errors.js";
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

export class JobAdmin {
  constructor(
    private readonly calls: QueueCalls,
    private readonly h: JobAdminHost,
  ) {}

  async retryFinishedJob(job: any, state: "failed" | "completed", opts?: any): Promise<void> {
    const j = await this.calls.getJob(job.id);
    if (!j) throw R.finishedError({ code: R.ErrorCode.JobNotExist, jobId: job.id, command: "reprocessJob" });
    if (stateName(j.state) !== state) {
      throw R.finishedError({ code: R.ErrorCode.JobNotInState, jobId: job.id, command: "reprocessJob", state });
    }
    await this.calls.jobOp(job.id, { case: "retry", value: { keepAttempts: !opts?.resetAttemptsMade } });
  }

  private async byId(jobId: string, op: any, command: string, state?: string) {
    try {
      return await this.calls.jobOp(jobId, op);
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
