/**
 * A queue as a whole: pause, drain, clean, obliterate, retry or promote all; its meta
 * fields (concurrency, the rate limit and paused are the queue's config on Loam; Loam
 * has no home for any other field, so those are kept per connection in this process);
 * and its rate limit, which the server keeps so every worker and client sees the same one.
 */
import { JobState } from "./gen/loam/jobs/v1/types_pb.js";
import { errKind, isNotFound } from "./errors.js";
import { bullId, ms, ns, STATE_BY_TYPE } from "./jobs.js";
import { MAX_RANGE, type QueueCalls } from "./queue-calls.js";

export class QueueAdmin {
  constructor(
    private readonly calls: QueueCalls,
    private readonly metas: Map<string, Map<string, string>>, // by queue, shared by the connection's backends
  ) {}

  // -- bulk admin ---------------------------------------------------------------------
  async pause(pause: boolean): Promise<void> {
    await this.calls.queueOp(pause ? { case: "pause", value: {} } : { case: "resume", value: {} }).catch((e) => {
      if (!isNotFound(e)) throw e;
      if (pause) return this.calls.queueOp({ case: "create", value: { config: {} } }).then(() => this.calls.queueOp({ case: "pause", value: {} }));
    });
  }

  async drain(delayed: boolean): Promise<void> {
    await this.calls.queueOp({ case: "drain", value: { delayed } }).catch((e) => {
      if (!isNotFound(e)) throw e;
    });
  }

  async cleanJobsByState(state: string, timestamp: number, limit = 0): Promise<string[]> {
    const states = STATE_BY_TYPE[state === "paused" ? "wait" : state] ?? [];
    if (!states.length || state === "active") return [];
    const grace = Math.max(0, Date.now() - timestamp);
    const candidates = (await this.calls.listJobs(states, limit || MAX_RANGE))
      .filter((j) => {
        const t = j.finishedNs || j.createdNs;
        return ms(t) <= timestamp;
      })
      .map((j) => bullId(j));
    const r = await this.calls.queueOp({ case: "clean", value: { state: states[0], graceNs: ns(grace), limit: limit || 0 } }).catch((e) => {
      if (isNotFound(e)) return undefined;
      throw e;
    });
    const n = Number(r?.affected ?? 0);
    return candidates.reverse().slice(0, n);
  }

  async obliterate(opts: { force: boolean; count: number }): Promise<number> {
    try {
      await this.calls.queueOp({ case: "obliterate", value: { force: !!opts.force } });
    } catch (e) {
      if (isNotFound(e)) return 0;
      if (errKind(e) === "invalid_state") throw new Error("Cannot obliterate queue with active jobs");
      throw e;
    }
    this.metas.delete(this.calls.queue);
    return 0;
  }

  async removeOrphanedJobs(_count?: number, _limit?: number): Promise<number> {
    return 0;
  }

  async retryFinishedJobs(state: "failed" | "completed" = "failed", _count?: number, timestamp?: number): Promise<number> {
    if (timestamp) {
      const st = state === "completed" ? JobState.COMPLETED : JobState.FAILED;
      for (const j of (await this.calls.listJobs([st], MAX_RANGE)).reverse()) {
        if (ms(j.finishedNs) <= timestamp) await this.calls.jobOp(j.id, { case: "retry", value: {} }).catch(() => undefined);
      }
      return 0;
    }
    await this.calls.queueOp({ case: "retryAll", value: { state: state === "completed" ? JobState.COMPLETED : JobState.FAILED } }).catch((e) => {
      if (!isNotFound(e)) throw e;
    });
    return 0;
  }

  async promoteJobs(_count?: number): Promise<number> {
    await this.calls.queueOp({ case: "promoteAll", value: {} }).catch((e) => {
      if (!isNotFound(e)) throw e;
    });
    return 0;
  }

  // -- queue meta ---------------------------------------------------------------------------
  private localMeta(): Map<string, string> {
    let m = this.metas.get(this.calls.queue);
    if (!m) this.metas.set(this.calls.queue, (m = new Map()));
    return m;
  }

  async setQueueMeta(values: Record<string, string | number>): Promise<number> {
    let n = 0;
    const v = { ...values };
    if ("concurrency" in v) {
      await this.calls.queueOp({ case: "setConcurrency", value: { concurrency: Number(v.concurrency) } });
      delete v.concurrency;
      n++;
    }
    if ("max" in v || "duration" in v) {
      const cfg = await this.calls.config();
      const max = Number(v.max ?? cfg?.rateLimit?.max ?? 0);
      const duration = v.duration !== undefined ? ns(Number(v.duration)) : (cfg?.rateLimit?.durationNs ?? 0n);
      await this.calls.queueOp({ case: "setRateLimit", value: { rateLimit: { max, durationNs: duration } } });
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
    const cfg = await this.calls.config();
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
      if (f === "concurrency") await this.calls.queueOp({ case: "setConcurrency", value: { concurrency: 0 } }).catch(() => undefined);
      else if (f === "max" || f === "duration") await this.calls.queueOp({ case: "setRateLimit", value: { rateLimit: {} } }).catch(() => undefined);
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
    if (ms_) await this.calls.queueOp({ case: "rateLimitFor", value: { forNs: ns(ms_) } });
  }

  async getRateLimitTtl(maxJobs?: number): Promise<number> {
    const r = await this.calls.queueOp({ case: "counts", value: {} }).catch(() => undefined);
    const ttl = r ? ms(r.rateLimitTtlNs) : 0;
    if (!ttl) return maxJobs ? 0 : -2;
    if (maxJobs && (r?.rateLimitUsed ?? 0) < maxJobs) return 0;
    return ttl;
  }

  async removeRateLimitKey(): Promise<number> {
    const had = (await this.getRateLimitTtl()) > 0;
    await this.calls.queueOp({ case: "rateLimitFor", value: { forNs: 0n } }).catch(() => undefined);
    return had ? 1 : 0;
  }

  async removeDeprecatedPriorityKey(): Promise<number> {
    return 0;
  }
}
