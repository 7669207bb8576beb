/**
 * The producer's path: concurrent addJob calls on one queue are coalesced into one
 * EnqueueBulk per round trip, in call order. That keeps BullMQ's guarantee that
 * `Promise.all([add(a), add(b)])` stores a before b (Redis gets it from its single
 * command stream), and turns bursts of single adds into batches.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { JobsClient } from "./connection.js";
import type { BulkItemSchema, Enqueued } from "./gen/loam/jobs/v1/jobs_pb.js";
import { Coalescer } from "./coalesce.js";
import { itemError } from "./errors.js";

type Item = MessageInitShape<typeof BulkItemSchema>;

const MAX_BULK = 10_000;

export class Enqueuer {
  private readonly batches: Coalescer<Item, Enqueued>;

  constructor(client: JobsClient, queue: string) {
    this.batches = new Coalescer<Item, Enqueued>(MAX_BULK, "EnqueueBulk", async (jobs) => {
      const res = await client.enqueueBulk({ queue, jobs });
      return jobs.map((_, i) => {
        const r = res.results[i]?.result;
        if (r?.case === "enqueued") return r.value;
        if (r?.case === "error") return itemError(r.value.code, r.value.message);
        return undefined;
      });
    });
  }

  enqueue(item: Item): Promise<Enqueued> {
    return this.batches.add(item);
  }
}
