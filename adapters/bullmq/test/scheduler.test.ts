// Job schedulers on Loam schedules (iteration-driven, as in BullMQ): upsert with every /
// pattern, read back, list, remove; the chain of iteration jobs a worker drives.
import { describe, expect, it } from "vitest";
import { Queue, Worker, type Job } from "../src/index.js";
import { connect, envUrl } from "../src/connection.js";
import { ScheduleDriver } from "../src/gen/loam/jobs/v1/types_pb.js";
import { closeAfterEach, connection, qname, sleep, until } from "./helpers.js";

const track = closeAfterEach();

describe("job schedulers", () => {
  it("fires an `every` scheduler, reads it back, lists and removes it", async () => {
    const name = qname();
    const queue = new Queue(name, { connection });
    track(queue);
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
    track(worker);
    await until(() => seen.length >= 2, 5000);
    expect(seen[0]).toEqual({ k: 1 });
    expect(await queue.removeJobScheduler("tick")).toBe(true);
    expect(await queue.getJobScheduler("tick")).toBeUndefined();
    await queue.removeJobScheduler("nightly");
  });

  it("chains iterations as delayed jobs `repeat:<id>:<millis>`, each advanced once by the worker that takes it", async () => {
    const name = qname();
    const queue = new Queue(name, { connection });
    track(queue);
    const first = await queue.upsertJobScheduler("tick", { every: 250 }, { name: "tick-job", data: { k: 2 } });
    expect(first!.id).toMatch(/^repeat:tick:\d+$/);
    // The scheduler is a Loam schedule the server shows but does not fire itself.
    const loam = connect(connection).client;
    const rec = (await loam.getSchedule({ id: `bullmq:${name}:tick` })).schedule!;
    expect(rec.driver).toBe(ScheduleDriver.ITERATIONS);
    expect(rec.count).toBe(1);
    // The pending iteration belongs to the scheduler: BullMQ refuses to remove it (-8).
    const pending = await queue.getJob(first!.id!);
    await expect(pending!.remove()).rejects.toThrow(/belongs to a job scheduler and cannot be removed directly. remove/);
    const done: Job[] = [];
    // Two workers: an iteration is taken by one of them and advances the chain once.
    for (let i = 0; i < 2; i++) {
      const w = new Worker(name, async (j) => {
        done.push(j);
      }, { connection, concurrency: 2 });
      track(w);
    }
    await until(() => done.length >= 4, 8000);
    const ids = done.map((j) => j.id!);
    expect(new Set(ids).size).toBe(ids.length);
    const millis = ids.map((id) => Number(id.split(":")[2])).sort((a, b) => a - b);
    for (let i = 1; i < millis.length; i++) expect(millis[i] - millis[i - 1]).toBe(250);
    expect(done.every((j) => j.repeatJobKey === "tick" && j.name === "tick-job" && j.data.k === 2)).toBe(true);
    const s = await queue.getJobScheduler("tick");
    expect(s!.iterationCount).toBeGreaterThanOrEqual(done.length);
    expect(await queue.getDelayedCount()).toBeLessThanOrEqual(1);
    // Removed: the pending iteration goes with it and the chain stops.
    expect(await queue.removeJobScheduler("tick")).toBe(true);
    const n = done.length;
    await sleep(700);
    expect(done.length).toBeLessThanOrEqual(n + 1); // at most the one a worker had taken
    expect(await queue.getDelayedCount()).toBe(0);
  });

  it("converges when producers in different processes upsert one scheduler at once", async () => {
    const name = qname();
    // Two connections to the same server and namespace, as two processes would have
    // (the same process serialises its own upserts of one scheduler).
    const url = envUrl()!;
    const a = new Queue(name, { connection: { url } });
    const b = new Queue(name, { connection: { url: url.replace("127.0.0.1", "localhost") } });
    track(a, b);
    await Promise.all([a, b, a, b].map((q) => q.upsertJobScheduler("race", { every: 60_000 }, { name: "r" })));
    expect(await a.getJobSchedulersCount()).toBe(1);
    expect(await a.getJobCountByTypes("waiting", "delayed")).toBe(1);
  });
});
