/**
 * The Loam calls on one queue that the backend's groups share: queue and job admin ops, a
 * job by its BullMQ id, the queue's counts and config, jobs listed by state and a parent's
 * children. Not-found answers mean "nothing there yet" wherever BullMQ sees an empty queue.
 */
import type { JobsClient } from "./connection.js";
import type { QueueAdminResponse } from "./gen/loam/jobs/v1/jobs_pb.js";
import type { JobState, Job as LoamJob } from "./gen/loam/jobs/v1/types_pb.js";
import { errKind, isNotFound } from "./errors.js";

/** The most jobs a listing reads (getRanges, clean, retry by time, counts per priority). */
export const MAX_RANGE = 10_000;

/** Queue ops that create the queue first when nothing was added to it yet. */
const CREATES = new Set(["setConcurrency", "setRateLimit", "pause", "resume", "update", "rateLimitFor"]);

export class QueueCalls {
  constructor(
    readonly client: JobsClient,
    readonly queue: string, // the Loam name (queue-names.ts)
  ) {}

  async queueOp(op: any): Promise<QueueAdminResponse> {
    try {
      return await this.client.queueAdmin({ queue: this.queue, op: { op } });
    } catch (e) {
      // Settings on a queue nothing was added to yet: BullMQ creates queues on first use.
      if (!isNotFound(e) || !CREATES.has(op.case)) throw e;
      await this.client.queueAdmin({ queue: this.queue, op: { op: { case: "create", value: { config: {} } } } }).catch(() => undefined);
      return this.client.queueAdmin({ queue: this.queue, op: { op } });
    }
  }

  async jobOp(jobId: string, op: any) {
    return this.client.jobAdmin({ queue: this.queue, job: String(jobId), op: { op } });
  }

  async getJob(jobId: string): Promise<LoamJob | undefined> {
    try {
      return (await this.jobOp(jobId, { case: "get", value: {} })).job;
    } catch (e) {
      if (isNotFound(e) || errKind(e) === "invalid_argument") return undefined;
      throw e;
    }
  }

  /** The queue's counts and config (one Counts op answers both); undefined if it does not exist. */
  private async countsReply() {
    try {
      return await this.queueOp({ case: "counts", value: {} });
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  async counts() {
    return (await this.countsReply())?.counts;
  }

  async config() {
    return (await this.countsReply())?.config;
  }

  /** Jobs in `states`, newest first, up to `limit`. */
  async listJobs(states: JobState[], limit: number): Promise<LoamJob[]> {
    const out: LoamJob[] = [];
    let pageToken = "";
    do {
      let r;
      try {
        r = await this.client.query({ queue: this.queue, states, pageSize: Math.min(1000, limit - out.length), pageToken });
      } catch (e) {
        if (isNotFound(e)) return out;
        throw e;
      }
      out.push(...r.jobs);
      pageToken = r.nextPageToken;
    } while (pageToken && out.length < limit);
    return out.slice(0, limit);
  }

  /** A parent's dependencies (none for a job that is gone or has no children). */
  async children(jobId: string) {
    return (await this.jobOp(jobId, { case: "children", value: {} }).catch(() => undefined))?.children ?? [];
  }
}
