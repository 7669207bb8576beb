/**
 * The worker's hot path: leases prefetched and handed to BullMQ's moveToActive one at a
 * time, and completions from concurrent moveToFinished calls coalesced into CompleteBatch
 * calls, two in flight (a batch leaves at once when a lane is free; the calls that arrive
 * meanwhile go in the next one). BullMQ's worker token maps to the Loam lease
 * token (queue, job id, epoch) here, in the backend's memory.
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { JobsClient } from "./connection.js";
import { CompleteRequestSchema, type Lease, LeaseRequestSchema } from "./gen/loam/jobs/v1/jobs_pb.js";
import { Coalescer } from "./coalesce.js";
import { kindOf } from "./errors.js";

export interface Held {
  bullToken: string;
  queue: string;
  job: string; // Loam job id
  epoch: bigint;
  key: string; // BullMQ id
}

/** Leases handed to BullMQ, by queue and BullMQ id (shared by a connection's backends). */
export class LeaseBook {
  private readonly held = new Map<string, Held>();

  private k(queue: string, key: string): string {
    return `${queue}\u0000${key}`;
  }

  set(h: Held): void {
    this.held.set(this.k(h.queue, h.key), h);
  }

  get(queue: string, key: string): Held | undefined {
    return this.held.get(this.k(queue, key));
  }

  delete(queue: string, key: string): void {
    this.held.delete(this.k(queue, key));
  }
}

export type CompleteInit = MessageInitShape<typeof CompleteRequestSchema>;

export class CompleteFailed extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
  }
  get kind() {
    return kindOf(this.code, this.message);
  }
}

const MAX_BATCH = 1000;
/**
 * CompleteBatch calls in flight at once. With one, a worker at concurrency 50 and the
 * server took turns: 50 completions out, 50 leases back, 50 handlers run while the server
 * waited (bench/README.md, "Two completion batches in flight").
 */
const COMPLETE_LANES = 2;

interface Completion {
  item: CompleteInit;
  refill?: Fetcher; // its worker fetches next: the batch may lease for it
}

export interface Finished {
  state: number;
  moved: boolean;
  /**
   * The batch leased for this completion's worker and the server had no more jobs to
   * give: the next job was looked for with the completion, as moveToFinished's script
   * does on Redis, so the worker need not ask again.
   */
  noMoreJobs: boolean;
}

/**
 * Coalesces Complete calls: at most COMPLETE_LANES CompleteBatch calls in flight per
 * client. A batch whose completions fetch next (moveToFinished with fetchNext) also
 * leases, in the same call, the free slots of the worker with the most of them.
 */
export class Completer {
  private readonly batches: Coalescer<Completion, Finished>;

  constructor(client: JobsClient) {
    this.batches = new Coalescer<Completion, Finished>(MAX_BATCH, "CompleteBatch", async (batch) => {
      const { fetcher, own } = busiest(batch);
      const lease = fetcher?.reserve(own);
      let res;
      try {
        res = await client.completeBatch({ items: batch.map((c) => c.item), lease });
      } finally {
        if (lease) fetcher!.unreserve(lease.max! - own);
        for (const c of batch) if (c.refill) c.refill.settling--;
      }
      if (lease) fetcher!.accept(res.leases);
      const drained = !!lease && res.leases.length < lease.max!;
      return batch.map((c, i) => {
        const r = res.results[i]?.result;
        if (r?.case === "completed") {
          return { state: r.value.state, moved: r.value.moved, noMoreJobs: drained && c.refill === fetcher };
        }
        if (r?.case === "error") return new CompleteFailed(r.value.code, r.value.message);
        return undefined;
      });
    }, COMPLETE_LANES);
  }

  complete(item: CompleteInit, refill?: Fetcher): Promise<Finished> {
    if (refill) refill.settling++;
    return this.batches.add({ item, refill });
  }
}

/** The fetcher most of a batch's completions fetch next for, and how many do. */
function busiest(batch: Completion[]): { fetcher?: Fetcher; own: number } {
  const n = new Map<Fetcher, number>();
  let fetcher: Fetcher | undefined;
  let own = 0;
  for (const { refill } of batch) {
    if (!refill || refill.closed) continue;
    const c = (n.get(refill) ?? 0) + 1;
    n.set(refill, c);
    if (c > own) [fetcher, own] = [refill, c];
  }
  return { fetcher, own };
}

export interface FetcherOptions {
  queue: string;
  worker: string;
  visibilityNs: bigint;
  concurrency: () => number;
  handedOut: () => number;
  lockDurationMs: number;
}

interface Buffered {
  lease: Lease;
  at: number;
}

const MAX_WAIT_S = 30;

/**
 * Prefetches leases for one worker: never more than its concurrency leased at once
 * (handed out + buffered), so a worker at concurrency 1 takes one job at a time.
 */
/** How long an ended long poll may take to answer before its call is dropped. */
const END_WAIT_GRACE_MS = 2_000;

export class Fetcher {
  private buffer: Buffered[] = [];
  private reserved = 0; // slots asked for by a CompleteBatch in flight
  /**
   * Completions that fetch next for this worker, sent or waiting to be: BullMQ no longer
   * holds their jobs, but the server does until their batch commits.
   */
  settling = 0;
  private inflight: Promise<void> | null = null; // a Lease that does not wait
  private blockingInflight: Promise<void> | null = null; // wait()'s long poll
  private abort: AbortController | null = null;
  blockingDisconnected = false;
  closed = false;

  constructor(
    private readonly client: JobsClient,
    private readonly o: FetcherOptions,
    private readonly release: (leases: Lease[]) => void,
  ) {}

  get buffered(): number {
    return this.buffer.length;
  }

  /**
   * The worker's free slots: its concurrency less what it holds, has buffered, has asked
   * for or is settling (the server counts those jobs active until their batch commits).
   */
  private free(): number {
    return this.o.concurrency() - this.o.handedOut() - this.buffer.length - this.reserved - this.settling;
  }

  private want(): number {
    return Math.max(1, this.free());
  }

  /**
   * A Lease for a CompleteBatch carrying `own` of this worker's settling completions:
   * their slots (the batch commits them before it leases) and the free ones, which are
   * held until unreserve(max - own).
   */
  reserve(own: number): MessageInitShape<typeof LeaseRequestSchema> | undefined {
    const max = this.free() + own;
    if (max <= 0 || this.closed) return undefined;
    this.reserved += max - own;
    return { queues: [this.o.queue], worker: this.o.worker, max, visibilityNs: this.o.visibilityNs };
  }

  unreserve(n: number): void {
    this.reserved -= n;
  }

  /** Leases a CompleteBatch brought back. */
  accept(leases: Lease[]): void {
    if (this.closed) {
      this.release(leases);
      return;
    }
    const now = Date.now();
    for (const l of leases) this.buffer.push({ lease: l, at: now });
  }

  /** Leases bought too long ago to hand out safely (their lock would soon lapse). */
  private dropStale(): void {
    const limit = Date.now() - this.o.lockDurationMs / 2;
    if (!this.buffer.length || this.buffer[0].at > limit) return;
    const stale = this.buffer.filter((b) => b.at <= limit);
    this.buffer = this.buffer.filter((b) => b.at > limit);
    this.release(stale.map((b) => b.lease));
  }

  private async lease(waitS: number, atLeast = 1, max?: number): Promise<void> {
    const ac = waitS > 0 ? new AbortController() : null;
    if (ac) this.abort = ac;
    try {
      const res = await this.client.lease(
        {
          queues: [this.o.queue],
          worker: this.o.worker,
          max: max ?? Math.max(atLeast, this.want()),
          waitNs: BigInt(Math.round(Math.min(waitS, MAX_WAIT_S) * 1e9)),
          visibilityNs: this.o.visibilityNs,
        },
        ac ? { signal: ac.signal } : undefined,
      );
      const now = Date.now();
      if (this.closed) {
        this.release(res.leases);
        return;
      }
      for (const l of res.leases) this.buffer.push({ lease: l, at: now });
    } finally {
      if (ac && this.abort === ac) this.abort = null;
    }
  }

  /**
   * The next lease without waiting (moveToActive), or null. Concurrent calls share one
   * Lease call that asks for every free slot of the worker at once. `bufferOnly`: the
   * server was just asked (Finished.noMoreJobs), so only the buffer is looked at.
   */
  async take(bufferOnly = false): Promise<Lease | null> {
    this.dropStale();
    if (this.buffer.length || this.closed || bufferOnly) return this.buffer.shift()?.lease ?? null;
    return new Promise((resolve, reject) => {
      this.takers.push({ resolve, reject });
      if (!this.pumping) void this.pump();
    });
  }

  private takers: { resolve: (l: Lease | null) => void; reject: (e: unknown) => void }[] = [];
  private pumping = false;

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      while (this.takers.length) {
        if (this.inflight) await this.inflight.catch(() => undefined);
        const takers = this.takers;
        this.takers = [];
        if (!this.buffer.length && !this.closed) {
          // Not behind a long poll (the worker's wait for a job): a finished job's fetch
          // of the next must not wait out the drain delay. The poll asked for the free
          // slots then, so ask only for these takers' beside it.
          const p = this.blockingInflight ? this.lease(0, takers.length, takers.length) : this.lease(0, takers.length);
          this.inflight = p;
          try {
            await p;
          } catch (e) {
            for (const t of takers) t.reject(e);
            continue;
          } finally {
            if (this.inflight === p) this.inflight = null;
          }
        }
        for (const t of takers) t.resolve(this.buffer.shift()?.lease ?? null);
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Wait up to `seconds` for a job to be leasable; true if one is buffered. */
  async wait(seconds: number): Promise<boolean> {
    this.dropStale();
    if (this.buffer.length) return true;
    if (this.blockingDisconnected || this.closed) return false;
    for (const other of [this.inflight, this.blockingInflight]) {
      if (!other) continue;
      await other.catch(() => undefined);
      if (this.buffer.length) return true;
    }
    // Disconnected meanwhile (the worker closing): a poll sent now could not be interrupted.
    if (this.blockingDisconnected || this.closed) return false;
    const p = this.lease(seconds);
    this.blockingInflight = p;
    try {
      await p;
      this.kicked = false;
    } catch (e) {
      if (this.kicked) {
        this.kicked = false;
        return this.buffer.length > 0;
      }
      if (this.blockingDisconnected || this.closed) return false;
      throw e;
    } finally {
      if (this.blockingInflight === p) this.blockingInflight = null;
    }
    return this.buffer.length > 0;
  }

  /** Leases to hand out next (held back stalled jobs, now reported). */
  putBack(leases: Lease[]): void {
    const now = Date.now();
    this.buffer.unshift(...leases.map((lease) => ({ lease, at: now })));
    if (this.abort) {
      this.kicked = true; // wake a blocked wait(): there is work now
      this.interrupt();
    }
  }

  private kicked = false;

  /**
   * End the long poll in flight. The server is asked to answer it now rather than the
   * call being dropped: by the time we stop waiting it may have leased jobs for us, and
   * a dropped answer would leave them active with nobody to run them until their lock
   * lapsed. The call is aborted only if that answer does not come.
   */
  interrupt(): void {
    const ac = this.abort;
    if (!ac) return;
    const abort = () => {
      if (this.abort === ac) ac.abort();
    };
    const grace = setTimeout(abort, END_WAIT_GRACE_MS);
    grace.unref?.();
    void this.client.endLeaseWait({ queues: [this.o.queue], worker: this.o.worker }).catch(abort);
  }

  drainBuffer(): Lease[] {
    const out = this.buffer.map((b) => b.lease);
    this.buffer = [];
    return out;
  }
}
