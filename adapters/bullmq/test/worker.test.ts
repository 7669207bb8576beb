// Consumer-side groups: fetching (prefetch within concurrency), completing and failing
// (coalesced), retries with backoff, moveToDelayed from the processor, manual rate
// limiting, lock extension, stalled jobs reclaimed by the server, global concurrency.
import { describe, expect, it } from "vitest";
import { DelayedError, Job, Queue, UnrecoverableError, Worker } from "../src/index.js";
import { connect } from "../src/connection.js";
import { Fetcher } from "../src/worker-path.js";
import { closeAfterEach, connection, qname, sleep, until } from "./helpers.js";

const track = closeAfterEach();

describe("processing", () => {
  it("processes many jobs at concurrency 20 with each job once", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    await queue.addBulk(Array.from({ length: 300 }, (_, i) => ({ name: "n", data: { i } })));
    const seen = new Set<number>();
    let dup = 0;
    let active = 0;
    let maxActive = 0;
    const worker = track(
      new Worker(
        name,
        async (job) => {
          active++;
          maxActive = Math.max(maxActive, active);
          if (seen.has(job.data.i)) dup++;
          seen.add(job.data.i);
          await sleep(5);
          active--;
        },
        { connection, concurrency: 20 },
      ),
    );
    // Leased on the server (handed out, prefetched or being fetched with a completion)
    // never exceeds the worker's concurrency either.
    let maxLeased = 0;
    await until(async () => {
      maxLeased = Math.max(maxLeased, await queue.getActiveCount());
      return (await queue.getCompletedCount()) === 300;
    }, 10_000, 5);
    expect(seen.size).toBe(300);
    expect(dup).toBe(0);
    expect(maxActive).toBeLessThanOrEqual(20);
    expect(maxLeased).toBeGreaterThan(0);
    expect(maxLeased).toBeLessThanOrEqual(20);
    await worker.close();
    expect(await queue.getActiveCount()).toBe(0);
  });

  it("a long poll is not sent once the blocking side disconnected while a lease was out", async () => {
    // A worker closing disconnects its blocking side; a wait() that was behind an
    // in-flight lease must then answer at once, not send a poll nothing can interrupt.
    const queue = track(new Queue(qname(), { connection }));
    await queue.waitUntilReady();
    const fetcher = new Fetcher(
      connect(connection).client,
      {
        queue: queue.name,
        worker: "w",
        visibilityNs: 30_000_000_000n,
        concurrency: () => 1,
        handedOut: () => 0,
        lockDurationMs: 30_000,
      },
      () => undefined,
    );
    const taken = fetcher.take(); // a Lease that does not wait, now in flight
    const t0 = Date.now();
    const waited = fetcher.wait(10); // behind it
    fetcher.blockingDisconnected = true; // the worker closes meanwhile
    fetcher.interrupt();
    expect(await taken).toBeNull();
    expect(await waited).toBe(false);
    expect(Date.now() - t0).toBeLessThan(5_000);
  });

  it("moveToFinished with fetchNext looks for the next job with the completion, not after it", async () => {
    // As BullMQ's script does on Redis: the CompleteBatch leases the freed slot, and when
    // it comes back empty the worker does not ask again; a job added later is still had.
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const [a, b] = await queue.addBulk([{ name: "a", data: {} }, { name: "b", data: {} }]);
    const w = track(new Worker(name, null, { connection, autorun: false }));
    const client = connect(connection).client;
    const lease = client.lease;
    let leases = 0;
    client.lease = (...args: Parameters<typeof lease>) => {
      leases++;
      return lease(...args);
    };
    try {
      const first = (await w.getNextJob("tok"))!;
      expect(first.id).toBe(a.id);
      leases = 0;
      const next = (await first.moveToCompleted("one", "tok", true)) as any[];
      expect(next[1]).toBe(b.id); // leased by the completion itself
      const second = Job.fromJSON(queue, next[0], next[1]);
      expect(await second.moveToCompleted("two", "tok", true)).toEqual([null, "", 0, 0]); // nothing left
      expect(leases).toBe(0);
      const c = await queue.add("c", {});
      expect((await w.getNextJob("tok"))!.id).toBe(c.id);
    } finally {
      client.lease = lease;
    }
  });

  it("retries with backoff, then fails with the reason and stacktrace", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const job = await queue.add("f", {}, { attempts: 3, backoff: { type: "fixed", delay: 50 } });
    let calls = 0;
    const failed = new Promise<Job>((resolve) => {
      const w = track(new Worker(name, async () => {
        calls++;
        throw new Error(`boom ${calls}`);
      }, { connection }));
      w.on("failed", (j) => j && j.attemptsMade === 3 && resolve(j));
    });
    await failed;
    const got = (await queue.getJob(job.id!))!;
    expect(calls).toBe(3);
    expect(await got.getState()).toBe("failed");
    expect(got.failedReason).toBe("boom 3");
    expect(got.attemptsMade).toBe(3);
    expect(got.stacktrace.length).toBeGreaterThan(0);
  });

  it("fails at once on UnrecoverableError", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const job = await queue.add("f", {}, { attempts: 5 });
    track(new Worker(name, async () => {
      throw new UnrecoverableError("no way");
    }, { connection }));
    await until(async () => (await queue.getFailedCount()) === 1);
    const got = (await queue.getJob(job.id!))!;
    expect(got.failedReason).toBe("no way");
    expect(got.attemptsMade).toBe(1);
  });

  it("moves a job to delayed from the processor without spending an attempt", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const job = await queue.add("d", {});
    let runs = 0;
    track(new Worker(name, async (j, token) => {
      runs++;
      if (runs === 1) {
        await j.moveToDelayed(Date.now() + 200, token);
        throw new DelayedError();
      }
      return "later";
    }, { connection }));
    await until(async () => (await queue.getJobState(job.id!)) === "delayed");
    await until(async () => (await queue.getJobState(job.id!)) === "completed", 5000);
    expect(runs).toBe(2);
    const done = (await queue.getJob(job.id!))!;
    expect(done.returnvalue).toBe("later");
    expect([done.attemptsMade, done.attemptsStarted, done.delay]).toEqual([1, 2, 0]); // promoted: no delay left
  });

  it("clears failedReason on job.retry and keeps it on an automatic retry", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const job = await queue.add("r", {}, { attempts: 2 });
    let runs = 0;
    let reasonOnRetry: string | undefined;
    const worker = track(new Worker(name, async (j) => {
      runs++;
      if (runs === 2) reasonOnRetry = j.failedReason;
      if (runs <= 2) throw new Error(`run ${runs}`);
      return "ok";
    }, { connection }));
    await until(async () => (await queue.getJobState(job.id!)) === "failed", 5000);
    expect(reasonOnRetry).toBe("run 1"); // BullMQ keeps the reason while it retries
    await worker.pause();
    const failed = (await queue.getJob(job.id!))!;
    await failed.retry("failed", { resetAttemptsMade: true, resetAttemptsStarted: true });
    const retried = (await queue.getJob(job.id!))!;
    expect([retried.failedReason, retried.attemptsMade, retried.attemptsStarted]).toEqual([undefined, 0, 0]);
    worker.resume();
    await until(async () => (await queue.getJobState(job.id!)) === "completed", 5000);
  });

  it("emits completed at once when the queue is left empty (not after the idle poll)", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const worker = track(new Worker(name, async () => sleep(50), { connection, concurrency: 2, drainDelay: 5 }));
    await worker.waitUntilReady();
    const t0 = Date.now();
    const done = new Promise<number>((resolve) => {
      let n = 0;
      worker.on("completed", () => ++n === 3 && resolve(Date.now() - t0));
    });
    await queue.addBulk([1, 2, 3].map((i) => ({ name: "j", data: { i } })));
    expect(await done).toBeLessThan(2000);
  });

  it("rate-limits manually with worker.rateLimit and RateLimitError", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    await queue.add("a", {});
    let runs = 0;
    const worker = track(new Worker(name, async () => {
      runs++;
      if (runs === 1) {
        await worker.rateLimit(300);
        throw Worker.RateLimitError();
      }
    }, { connection }));
    const start = Date.now();
    await until(async () => (await queue.getCompletedCount()) === 1, 5000);
    expect(runs).toBe(2);
    expect(Date.now() - start).toBeGreaterThanOrEqual(250);
  });

  it("extends locks of long jobs and a lost lease is reclaimed as stalled", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const job = await queue.add("long", {});
    // A worker that takes the job and never finishes it: its lease lapses after the lock
    // duration and the server's sweep puts the job back, where a second worker runs it.
    const w1 = track(new Worker(name, null, { connection, lockDuration: 500 }));
    const token = "tok-1";
    const got = await w1.getNextJob(token);
    expect(got!.id).toBe(job.id);
    expect(await got!.extendLock(token, 500)).toBe(1);
    expect(await got!.extendLock("other", 500)).toBe(0);
    track(new Worker(name, async () => "second", { connection }));
    await until(async () => (await queue.getJobState(job.id!)) === "completed", 8000);
    const done = (await queue.getJob(job.id!))!;
    expect(done.returnvalue).toBe("second");
    expect(done.stalledCounter).toBeGreaterThanOrEqual(1);
    await expect(got!.moveToCompleted("late", token, false)).rejects.toThrow();
  });

  it("fails a job stalled past maxStalledCount in the next worker, which reports the stall", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const job = await queue.add("s", {});
    const w1 = track(new Worker(name, null, { connection, lockDuration: 300, maxStalledCount: 0 }));
    await w1.waitUntilReady();
    expect((await w1.getNextJob("t1"))!.id).toBe(job.id);
    const stalled: string[] = [];
    const failed = new Promise<[any, Error]>((resolve) => {
      const w2 = track(new Worker(name, async () => "never", { connection, maxStalledCount: 0, stalledInterval: 100 }));
      w2.on("stalled", (id) => stalled.push(id));
      w2.on("failed", (j, err) => resolve([j, err]));
    });
    const [j, err] = await failed;
    expect(j.id).toBe(job.id);
    expect(err.message).toBe("job stalled more than allowable limit");
    expect(j.stalledCounter).toBe(1);
    await until(() => stalled.includes(job.id!), 3000);
  });

  it("skipStalledCheck keeps the server's stalled sweep off a lapsed lock", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const job = await queue.add("slow", {});
    const w = track(new Worker(name, null, { connection, lockDuration: 300, skipStalledCheck: true }));
    await w.waitUntilReady();
    const got = await w.getNextJob("t1");
    expect(got!.id).toBe(job.id);
    // Without skipStalledCheck the sweep (every 0.2 s in loam dev) reclaims the job once
    // its 300 ms lock lapses (the test above); here it must still be this worker's.
    await sleep(1500);
    expect(await queue.getJobState(job.id!)).toBe("active");
    await got!.moveToCompleted("done", "t1", false);
    expect(await queue.getJobState(job.id!)).toBe("completed");
  });

  it("a worker's stalled options become its queue's settings", async () => {
    const name = qname();
    const w = track(new Worker(name, null, { connection, stalledInterval: 2000, maxStalledCount: 3 }));
    await w.waitUntilReady();
    const settings = async () =>
      (await connect(connection).client.queueAdmin({ queue: name, op: { op: { case: "counts", value: {} } } })).config!;
    let cfg = await settings();
    expect([cfg.stalledIntervalNs, cfg.maxStalled, cfg.skipStalledCheck]).toEqual([2_000_000_000n, 3, false]);
    // A worker left at BullMQ's default interval (30 s) puts the sweep back at lease expiry.
    const w2 = track(new Worker(name, null, { connection, skipStalledCheck: true }));
    await w2.waitUntilReady();
    cfg = await settings();
    expect([cfg.stalledIntervalNs, cfg.skipStalledCheck]).toEqual([0n, true]);
  });

  it("respects global concurrency across workers", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    await queue.setGlobalConcurrency(2);
    await queue.addBulk(Array.from({ length: 12 }, () => ({ name: "n", data: {} })));
    let active = 0;
    let maxActive = 0;
    const proc = async () => {
      active++;
      maxActive = Math.max(maxActive, active);
      await sleep(30);
      active--;
    };
    track(new Worker(name, proc, { connection, concurrency: 5 }));
    track(new Worker(name, proc, { connection, concurrency: 5 }));
    await until(async () => (await queue.getCompletedCount()) === 12, 8000);
    expect(maxActive).toBeLessThanOrEqual(2);
  });

  it("processes at once when another client removes the rate limit a worker set", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const worker = track(new Worker(name, async () => "ok", { connection, autorun: false, limiter: { max: 1, duration: 1000 } }));
    await worker.rateLimit(10_000);
    expect(await queue.getRateLimitTtl()).toBeGreaterThan(9000);
    await queue.removeRateLimitKey();
    const job = await queue.add("j", {});
    void worker.run();
    await until(async () => (await queue.getJobState(job.id!)) === "completed", 3000);
  });

  it("collects per-minute metrics with the metrics option", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    track(new Worker(name, async (j) => {
      if (j.data.bad) throw new Error("bad");
    }, { connection, metrics: { maxDataPoints: 60 } }));
    await queue.addBulk([{}, {}, { bad: true }].map((data) => ({ name: "m", data })));
    await until(async () => (await queue.getMetrics("completed")).meta.count === 2 && (await queue.getMetrics("failed")).meta.count === 1, 5000);
    const m = await queue.getMetrics("completed");
    expect(m.meta.prevTS).toBeGreaterThan(0); // the first job opened the first minute
    expect(m.count).toBe(m.data.length);
  });

  it("applies the worker's removeOnComplete when the job has none", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const kept = await queue.add("kept", {}, { removeOnComplete: false });
    const gone = await queue.add("gone", {});
    track(new Worker(name, async () => "x", { connection, removeOnComplete: { count: 0 } }));
    await until(async () => (await queue.getJobState(kept.id!)) === "completed");
    await until(async () => (await queue.getJob(gone.id!)) === undefined);
  });

  it("lists live workers", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const w = track(new Worker(name, async () => {}, { connection, name: "w1" }));
    await w.waitUntilReady();
    expect(await queue.getWorkersCount()).toBeGreaterThanOrEqual(1);
    await w.close();
    expect(await queue.getWorkersCount()).toBe(0);
  });
});
