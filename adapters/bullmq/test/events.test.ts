// QueueEvents on Loam's Watch: BullMQ's event names and fields, job.waitUntilFinished,
// and resuming from a last event id (the Watch cursor).
import { describe, expect, it } from "vitest";
import { Queue, QueueEvents, Worker } from "../src/index.js";
import { closeAfterEach, connection, qname, until } from "./helpers.js";

const track = closeAfterEach();

describe("QueueEvents", () => {
  it("emits added, active, progress, completed and failed with BullMQ's fields", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const events = track(new QueueEvents(name, { connection }));
    await events.waitUntilReady();
    const seen: Record<string, any[]> = {};
    for (const e of ["added", "active", "progress", "completed", "failed", "waiting"]) {
      events.on(e as any, (args: any) => (seen[e] ??= []).push(args));
    }
    track(new Worker(name, async (job) => {
      await job.updateProgress({ pct: 50 });
      if (job.data.bad) throw new Error("bad job");
      return { ok: job.data.n };
    }, { connection }));
    const good = await queue.add("good", { n: 7 });
    const bad = await queue.add("bad", { bad: true });
    expect(await good.waitUntilFinished(events, 5000)).toEqual({ ok: 7 });
    await expect(bad.waitUntilFinished(events, 5000)).rejects.toThrow("bad job");
    expect(seen.added?.map((a) => a.jobId)).toEqual([good.id, bad.id]);
    // The bad job may be seen failed (isFinished) before its `failed` event arrives.
    await until(() => !!seen.failed, 5000);
    expect(seen.completed?.[0]).toMatchObject({ jobId: good.id, returnvalue: { ok: 7 } });
    expect(seen.failed?.[0]).toMatchObject({ jobId: bad.id, failedReason: "bad job" });
    expect(seen.progress?.[0]).toMatchObject({ jobId: good.id, data: { pct: 50 } });
    expect(seen.active?.length).toBe(2);
  });
});

describe("drained", () => {
  it("emits the global drained event when the queue goes idle", async () => {
    const name = qname();
    const queue = track(new Queue(name, { connection }));
    const events = track(new QueueEvents(name, { connection }));
    await events.waitUntilReady();
    const drained = new Promise<void>((resolve) => events.once("drained", () => resolve()));
    track(new Worker(name, async () => "ok", { connection }));
    await queue.addBulk([{ name: "a", data: {} }, { name: "b", data: {} }]);
    await drained;
  });
});
