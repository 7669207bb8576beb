// Producer-side groups: adding (ids, bulk, delay, priority, dedup), counts and getters,
// moving jobs by id, logs and progress, pause/drain/clean/obliterate, queue meta.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { connect } from "../src/connection.js";
import { Queue } from "../src/index.js";
import { connection, qname } from "./helpers.js";

let queue: InstanceType<typeof Queue>;
beforeEach(() => {
  queue = new Queue(qname(), { connection });
});
afterEach(async () => {
  await queue.obliterate({ force: true });
  await queue.close();
});

describe("adding", () => {
  it("numbers auto ids per queue and keeps custom ids; a duplicate id returns the existing job", async () => {
    const [a, b] = [await queue.add("a", { x: 1 }), await queue.add("b", { x: 2 })];
    expect([a.id, b.id]).toEqual(["1", "2"]);
    const c = await queue.add("c", { x: 3 }, { jobId: "custom" });
    expect(c.id).toBe("custom");
    const dup = await queue.add("c", { x: 4 }, { jobId: "custom" });
    expect(dup.id).toBe("custom");
    expect((await queue.getJob("custom"))!.data).toEqual({ x: 3 });
    expect(await queue.count()).toBe(3);
  });

  it("adds in bulk, in order", async () => {
    const jobs = await queue.addBulk([
      { name: "a", data: { i: 0 } },
      { name: "b", data: { i: 1 }, opts: { jobId: "b1" } },
      { name: "c", data: { i: 2 } },
    ]);
    expect(jobs.map((j) => j.id)).toEqual(["1", "b1", "2"]);
    const waiting = await queue.getWaiting();
    expect(waiting.map((j) => j.data.i)).toEqual([0, 1, 2]);
  });

  it("routes delayed and prioritized jobs, counts them, and lists them", async () => {
    await queue.add("w", {});
    await queue.add("d", {}, { delay: 60_000 });
    await queue.add("p", {}, { priority: 3 });
    expect(await queue.getJobCounts("waiting", "delayed", "prioritized")).toEqual({ waiting: 1, delayed: 1, prioritized: 1 });
    const [d] = await queue.getDelayed();
    expect(d.name).toBe("d");
    expect(await d.getState()).toBe("delayed");
    expect(d.delay).toBe(60_000);
    expect(await queue.getCountsPerPriority([0, 3])).toEqual({ "0": 1, "3": 1 });
  });

  it("deduplicates by id while the first job is live", async () => {
    const a = await queue.add("a", { n: 1 }, { deduplication: { id: "k" } });
    const b = await queue.add("a", { n: 2 }, { deduplication: { id: "k" } });
    expect(b.id).toBe(a.id);
    expect(await queue.count()).toBe(1);
    expect(await queue.getDeduplicationJobId("k")).toBe(a.id);
    await queue.removeDeduplicationKey("k");
    await queue.add("a", { n: 3 }, { deduplication: { id: "k" } });
    expect(await queue.count()).toBe(2);
  });

  it("replaces a delayed job with replace, and returns a running one's id without a new job", async () => {
    const dedup = { deduplication: { id: "r", ttl: 60_000, replace: true }, delay: 60_000 };
    const a = await queue.add("a", { n: 1 }, dedup);
    const b = await queue.add("a", { n: 2 }, dedup);
    expect(b.id).not.toBe(a.id);
    expect(await queue.getJob(a.id!)).toBeUndefined();
    expect(await queue.getDeduplicationJobId("r")).toBe(b.id);
    await queue.promoteJobs();
    const c = await queue.add("a", { n: 3 }, dedup); // b is waiting now: c is dropped
    expect(c.id).toBe(b.id);
    expect(await queue.count()).toBe(1);
  });
});

describe("ranges", () => {
  it("a page from the newest end is that part of the whole listing, read only up to its end", async () => {
    for (let i = 0; i < 2500; i += 500) await queue.addBulk(Array.from({ length: 500 }, (_, j) => ({ name: "j", data: { i: i + j } })));
    const all = (await queue.getJobs(["waiting"], 0, -1)).map((j) => j.id);
    expect(all.length).toBe(2500);
    const client = connect(connection).client as any; // the queue's own (connections are shared)
    const query = client.query;
    const pageSizes: number[] = [];
    client.query = (req: any, ...rest: any[]) => (pageSizes.push(req.pageSize), query.call(client, req, ...rest));
    try {
      expect((await queue.getJobs(["waiting"], 0, 9)).map((j) => j.id)).toEqual(all.slice(0, 10));
      expect((await queue.getJobs(["waiting"], 5, 1204)).map((j) => j.id)).toEqual(all.slice(5, 1205));
    } finally {
      client.query = query;
    }
    expect(pageSizes).toEqual([10, 1000, 205]); // up to each range's end, none past it
  });
});

describe("moving jobs by id", () => {
  it("promotes, changes delay and priority, updates data, progress and logs", async () => {
    const d = await queue.add("d", { v: 1 }, { delay: 60_000 });
    await d.changeDelay(120_000);
    expect(await d.getState()).toBe("delayed");
    await d.promote();
    expect(await d.getState()).toBe("waiting");
    await expect(d.promote()).rejects.toThrow(`Job ${d.id} is not in the delayed state. promote`);
    await d.changePriority({ priority: 5 });
    expect(await d.getState()).toBe("prioritized");
    await d.updateData({ v: 2 });
    await d.updateProgress(42);
    expect(await d.log("one")).toBe(1);
    expect(await d.log("two")).toBe(2);
    const got = (await queue.getJob(d.id!))!;
    expect(got.data).toEqual({ v: 2 });
    expect(got.progress).toBe(42);
    expect(await queue.getJobLogs(d.id!)).toEqual({ logs: ["one", "two"], count: 2 });
    await got.clearLogs(1);
    expect((await queue.getJobLogs(d.id!)).logs).toEqual(["two"]);
    await expect(queue.getJob("nope").then((j) => j)).resolves.toBeUndefined();
  });

  it("takes concurrent progress and log reports of many jobs, each job's in order, and refuses a missing job's alone", async () => {
    const jobs = await queue.addBulk(Array.from({ length: 20 }, (_, i) => ({ name: "r", data: { i } })));
    const gone = await queue.add("gone", {});
    await gone.remove();
    const made = await Promise.allSettled([
      ...jobs.flatMap((j) => [j.updateProgress(1), j.log("a"), j.updateProgress({ step: 2 }), j.log("b")]),
      gone.updateProgress(5),
      gone.log("x"),
    ]);
    const answers = made.slice(0, 80).map((r) => (r.status === "fulfilled" ? r.value : r.reason));
    expect(answers).toEqual(jobs.flatMap(() => [undefined, 1, undefined, 2])); // log answers the lines held
    expect(made.slice(80).map((r) => (r.status === "rejected" ? String(r.reason.message) : "fulfilled"))).toEqual([
      `Missing key for job ${gone.id}. updateProgress`,
      `Missing key for job ${gone.id}. addLog`,
    ]);
    for (const j of jobs) {
      expect((await queue.getJob(j.id!))!.progress).toEqual({ step: 2 });
      expect(await queue.getJobLogs(j.id!)).toEqual({ logs: ["a", "b"], count: 2 });
    }
  });

  it("removes jobs and reports missing ones", async () => {
    const j = await queue.add("a", {});
    await j.remove();
    expect(await queue.getJob(j.id!)).toBeUndefined();
    expect(await queue.getJobState(j.id!)).toBe("unknown");
  });
});

describe("queue admin", () => {
  it("pauses and resumes", async () => {
    expect(await queue.isPaused()).toBe(false);
    await queue.pause();
    expect(await queue.isPaused()).toBe(true);
    await queue.add("a", {});
    expect(await queue.getWaitingCount()).toBe(1); // paused jobs still count as waiting
    await queue.resume();
    expect(await queue.isPaused()).toBe(false);
  });

  it("drains waiting (and delayed when asked) jobs", async () => {
    await queue.add("a", {});
    await queue.add("b", {}, { delay: 60_000 });
    await queue.drain();
    expect(await queue.getJobCounts("waiting", "delayed")).toEqual({ waiting: 0, delayed: 1 });
    await queue.drain(true);
    expect(await queue.getDelayedCount()).toBe(0);
  });

  it("cleans by state and grace, and obliterates", async () => {
    await queue.add("a", {});
    await queue.add("b", {});
    const cleaned = await queue.clean(0, 10, "wait");
    expect(cleaned).toHaveLength(2);
    expect(await queue.count()).toBe(0);
    await queue.add("c", {});
    await queue.obliterate();
    expect(await queue.count()).toBe(0);
  });

  it("keeps global concurrency and rate limit as queue meta", async () => {
    await queue.setGlobalConcurrency(4);
    expect(await queue.getGlobalConcurrency()).toBe(4);
    await queue.setGlobalRateLimit(10, 1000);
    expect(await queue.getGlobalRateLimit()).toEqual({ max: 10, duration: 1000 });
    await queue.removeGlobalConcurrency();
    expect(await queue.getGlobalConcurrency()).toBeNull();
  });
});
