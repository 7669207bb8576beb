/**
 * The producer's path: concurrent addJob calls on one queue are coalesced into one
 * EnqueueBulk per round trip, in call order. That keeps BullMQ's guarantee that
 * `Promise.all([add(a), add(b)])` stores a before b (Redis gets it from its single
 * command stream), and turns bursts of single adds into batches.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { JobsClient } from "./connection.js";
import type { BulkItemSchema, Enqueued } from "./gen/loam/jobs/v1/jobs_pb.js";
import { itemError } from "./errors.js";

type Item = MessageInitShape<typeof BulkItemSchema>;

interface Pending {
  item: Item;
  resolve: (e: Enqueued) => void;
  reject: (e: unknown) => void;
}

const MAX_BULK = 10_000;

export class Enqueuer {
  private pending: Pending[] = [];
  private flushing = false;
  private scheduled = false;

  constructor(private readonly client: JobsClient, private readonly queue: string) {}

  enqueue(item: Item): Promise<Enqueued> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (!this.flushing && !this.scheduled) {
        this.scheduled = true;
        setImmediate(() => {
          this.scheduled = false;
          void this.flush();
        });
      }
    });
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.pending.length) {
        const batch = this.pending.splice(0, MAX_BULK);
        try {
          const res = await this.client.enqueueBulk({ queue: this.queue, jobs: batch.map((p) => p.item) });
          batch.forEach((p, i) => {
            const r = res.results[i]?.result;
            if (r?.case === "enqueued") p.resolve(r.value);
            else if (r?.case === "error") p.reject(itemError(r.value.code, r.value.message));
            else p.reject(new Error("EnqueueBulk: no result for an item"));
          });
        } catch (e) {
          for (const p of batch) p.reject(e);
        }
      }
    } finally {
      this.flushing = false;
    }
  }
}
