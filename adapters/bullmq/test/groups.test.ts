import { describe, expect, it } from "vitest";
import { Queue, Worker } from "../src/index.js";
import { closeAfterEach, connection, qname } from "./helpers.js";

// BullMQ Pro's `group: { id }` job option maps onto a Loam subject: a group's jobs run
// one at a time, in the order they were added, while other groups' jobs run beside them.
describe("groups (BullMQ Pro's group option)", () => {
  const track = closeAfterEach();

  it("runs a group's jobs one at a time in order, other groups beside them", async () => {
    const name = qname();
    const queue = new Queue(name, { connection });
    track(queue);
    for (let i = 0; i < 4; i++) {
      await queue.add("transcode", { group: "a", i }, { group: { id: "user-a" } } as any);
      await queue.add("transcode", { group: "b", i }, { group: { id: "user-b" } } as any);
    }
    const running = new Map<string, number>();
    const order: Record<string, number[]> = { a: [], b: [] };
    let overlap = false;
    let done = 0;
    const finished = new Promise<void>((resolve) => {
      const worker = new Worker(
        name,
        async (j) => {
          const g = j.data.group as string;
          running.set(g, (running.get(g) ?? 0) + 1);
          if ((running.get(g) ?? 0) > 1) overlap = true;
          order[g].push(j.data.i);
          await new Promise((r) => setTimeout(r, 20));
          running.set(g, (running.get(g) ?? 0) - 1);
        },
        { connection, concurrency: 8 },
      );
      track(worker);
      worker.on("completed", () => ++done === 8 && resolve());
    });
    await finished;
    expect(overlap).toBe(false);
    expect(order.a).toEqual([0, 1, 2, 3]);
    expect(order.b).toEqual([0, 1, 2, 3]);
  });
});
