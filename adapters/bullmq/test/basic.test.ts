import { describe, expect, it } from "vitest";
import { Queue, Worker } from "../src/index.js";
import { closeAfterEach, connection, qname } from "./helpers.js";

describe("add and process", () => {
  const track = closeAfterEach();

  it("adds a job with a decimal id and a worker completes it", async () => {
    const name = qname();
    const queue = new Queue(name, { connection });
    track(queue);
    const job = await queue.add("hello", { n: 1 });
    expect(job.id).toBe("1");
    const job2 = await queue.add("hello", { n: 2 });
    expect(job2.id).toBe("2");
    const seen: number[] = [];
    const done = new Promise<void>((resolve) => {
      const worker = new Worker(
        name,
        async (j) => {
          seen.push(j.data.n);
          return j.data.n * 10;
        },
        { connection },
      );
      track(worker);
      worker.on("completed", () => seen.length === 2 && resolve());
    });
    await done;
    expect(seen.sort()).toEqual([1, 2]);
    const got = await queue.getJob("1");
    expect(got?.returnvalue).toBe(10);
    expect(await got?.getState()).toBe("completed");
    expect(got?.attemptsMade).toBe(1);
  });
});
