// Job schedulers on Loam schedules: upsert with every / pattern, read back, list, remove.
import { afterEach, describe, expect, it } from "vitest";
import { Queue, Worker } from "../src/index.js";
import { connection, qname, until } from "./helpers.js";

const closers: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c.close();
});

describe("job schedulers", () => {
  it("fires an `every` scheduler, reads it back, lists and removes it", async () => {
    const name = qname();
    const queue = new Queue(name, { connection });
    closers.push(queue);
    await queue.upsertJobScheduler("tick", { every: 300 }, { name: "tick-job", data: { k: 1 } });
    await queue.upsertJobScheduler("nightly", { pattern: "0 3 * * *", tz: "Europe/Paris" }, { name: "n" });
    const s = await queue.getJobScheduler("tick");
    expect(s).toMatchObject({ key: "tick", name: "tick-job", every: 300 });
    expect(s!.next).toBeGreaterThan(Date.now() - 1000);
    const n = await queue.getJobScheduler("nightly");
    expect(n).toMatchObject({ pattern: "0 3 * * *", tz: "Europe/Paris" });
    expect(await queue.getJobSchedulersCount()).toBe(2);
    expect((await queue.getJobSchedulers()).map((x) => x.key).sort()).toEqual(["nightly", "tick"]);
    const seen: unknown[] = [];
    const worker = new Worker(name, async (j) => {
      seen.push(j.data);
      expect(j.repeatJobKey).toBe("tick");
    }, { connection });
    closers.push(worker);
    await until(() => seen.length >= 2, 5000);
    expect(seen[0]).toEqual({ k: 1 });
    expect(await queue.removeJobScheduler("tick")).toBe(true);
    expect(await queue.getJobScheduler("tick")).toBeUndefined();
    await queue.removeJobScheduler("nightly");
  });
});
