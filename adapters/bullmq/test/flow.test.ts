// Flows: FlowProducer trees on Loam flows (parents in waiting-children, children values,
// dependency getters, failure flags) and children added by a running job.
import { describe, expect, it } from "vitest";
import { FlowProducer, Queue, WaitingChildrenError, Worker } from "../src/index.js";
import { closeAfterEach, connection, qname, until } from "./helpers.js";

const track = closeAfterEach();

describe("flows", () => {
  it("runs children first and gives the parent their values", async () => {
    const parentQ = qname();
    const childQ = qname();
    const flow = track(new FlowProducer({ connection }));
    const tree = await flow.add({
      name: "parent",
      queueName: parentQ,
      data: {},
      children: [
        { name: "c1", queueName: childQ, data: { v: 1 } },
        { name: "c2", queueName: childQ, data: { v: 2 } },
      ],
    });
    const parentQueue = track(new Queue(parentQ, { connection }));
    expect(await tree.job.getState()).toBe("waiting-children");
    expect(await tree.job.getDependenciesCount()).toMatchObject({ unprocessed: 2 });
    let values: Record<string, number> = {};
    track(new Worker(childQ, async (j) => j.data.v * 10, { connection }));
    track(new Worker(parentQ, async (j) => {
      values = await j.getChildrenValues();
      return "parent done";
    }, { connection }));
    await until(async () => (await parentQueue.getJobState(tree.job.id!)) === "completed", 8000);
    expect(Object.values(values).sort()).toEqual([10, 20]);
    for (const c of tree.children!) expect(values[`${childQ}:${c.job.id}`]).toBeDefined();
    const deps = await tree.job.getDependencies();
    expect(Object.keys(deps.processed!)).toHaveLength(2);
  });

  it("ignores a failed child with ignoreDependencyOnFailure and fails the parent with failParentOnFailure", async () => {
    const q = qname();
    const queue = track(new Queue(q, { connection }));
    const flow = track(new FlowProducer({ connection }));
    const ignored = await flow.add({
      name: "p1", queueName: q, data: {},
      children: [{ name: "bad", queueName: q, data: {}, opts: { ignoreDependencyOnFailure: true } }],
    });
    const failing = await flow.add({
      name: "p2", queueName: q, data: {},
      children: [{ name: "bad", queueName: q, data: {}, opts: { failParentOnFailure: true } }],
    });
    track(new Worker(q, async (j) => {
      if (j.name === "bad") throw new Error("child broke");
      return "ok";
    }, { connection }));
    await until(async () => (await queue.getJobState(ignored.job.id!)) === "completed", 8000);
    const failures = await (await queue.getJob(ignored.job.id!))!.getIgnoredChildrenFailures();
    expect(Object.values(failures)).toEqual(["child broke"]);
    await until(async () => (await queue.getJobState(failing.job.id!)) === "failed", 8000);
  });

  it("keeps a parent waiting on a child that failed without flags, and runs it once the child is removed", async () => {
    const q = qname();
    const queue = track(new Queue(q, { connection }));
    const flow = track(new FlowProducer({ connection }));
    const tree = await flow.add({ name: "p", queueName: q, data: {}, children: [{ name: "bad", queueName: q, data: {} }] });
    const child = tree.children![0].job;
    track(new Worker(q, async (j) => {
      if (j.name === "bad") throw new Error("no");
      return "parent ran";
    }, { connection }));
    await until(async () => (await queue.getJobState(child.id!)) === "failed", 8000);
    expect(await queue.getJobState(tree.job.id!)).toBe("waiting-children");
    expect(await tree.job.getDependenciesCount()).toMatchObject({ unprocessed: 1 });
    await child.remove();
    await until(async () => (await queue.getJobState(tree.job.id!)) === "completed", 8000);
  });

  it("adds children from a running job and waits for them", async () => {
    const q = qname();
    const queue = track(new Queue(q, { connection }));
    const parent = await queue.add("parent", { step: 0 });
    track(new Worker(q, async (job, token) => {
      if (job.name === "child") return "child value";
      if (job.data.step === 0) {
        await queue.add("child", {}, { parent: { id: job.id!, queue: job.queueQualifiedName } });
        await job.updateData({ step: 1 });
        if (await job.moveToWaitingChildren(token!)) throw new WaitingChildrenError();
      }
      return Object.values(await job.getChildrenValues());
    }, { connection, concurrency: 2 }));
    await until(async () => (await queue.getJobState(parent.id!)) === "completed", 8000);
    expect((await queue.getJob(parent.id!))!.returnvalue).toEqual(["child value"]);
  });

  it("fails a parent of a failParentOnFailure child in a worker, with BullMQ's reason", async () => {
    const q = qname();
    const queue = track(new Queue(q, { connection }));
    track(new Worker(q, async (j) => {
      if (j.name === "bad") throw new Error("child broke");
      return "ok";
    }, { connection }));
    const flow = track(new FlowProducer({ connection }));
    const tree = await flow.add({
      name: "p", queueName: q, data: {},
      children: [{ name: "bad", queueName: q, data: {}, opts: { failParentOnFailure: true } }],
    });
    await until(async () => (await queue.getJobState(tree.job.id!)) === "failed", 8000);
    const parent = (await queue.getJob(tree.job.id!))!;
    expect(parent.failedReason).toBe(`child ${q}:${tree.children![0].job.id} failed`);
    expect(parent.processedOn).toBeTypeOf("number"); // a worker took it: it failed from active
  });

  it("refuses to complete a job whose children are pending (BullMQ's -4)", async () => {
    const q = qname();
    const queue = track(new Queue(q, { connection }));
    const job = await queue.add("parent", {});
    const flow = track(new FlowProducer({ connection }));
    track(new Worker(q, async (j) => {
      await flow.add({ name: "child", queueName: `${q}-kids`, data: {}, opts: { parent: { id: j.id!, queue: j.queueQualifiedName } } });
      return "done too early";
    }, { connection }));
    await until(async () => (await queue.getJobState(job.id!)) === "failed", 8000);
    expect((await queue.getJob(job.id!))!.failedReason).toBe(`Job ${job.id} has pending dependencies. moveToFinished`);
  });

  it("counts a retried child as pending again and keeps failed children on removeUnprocessedChildren", async () => {
    const q = qname();
    const queue = track(new Queue(q, { connection }));
    const flow = track(new FlowProducer({ connection }));
    const tree = await flow.add({
      name: "p", queueName: `${q}-parent`, data: {},
      children: [
        { name: "bad", queueName: q, data: {} },
        { name: "ignored", queueName: q, data: {}, opts: { ignoreDependencyOnFailure: true } },
        { name: "later", queueName: q, data: {}, opts: { delay: 60_000 } },
      ],
    });
    const [bad, ignored, later] = tree.children!.map((c) => c.job);
    const worker = track(new Worker(q, async () => {
      throw new Error("no");
    }, { connection }));
    await until(async () => (await queue.getJobState(bad.id!)) === "failed" && (await queue.getJobState(ignored.id!)) === "failed", 8000);
    await worker.close();
    expect(await tree.job.getDependenciesCount()).toMatchObject({ ignored: 1, unprocessed: 2 });
    await (await queue.getJob(ignored.id!))!.retry("failed");
    expect(await tree.job.getDependenciesCount()).toMatchObject({ ignored: 0, unprocessed: 3 });
    await tree.job.removeUnprocessedChildren();
    expect(await queue.getJobState(later.id!)).toBe("unknown");
    expect(await queue.getJobState(ignored.id!)).toBe("unknown");
    expect(await queue.getJobState(bad.id!)).toBe("failed"); // failed, though still pending for the parent
  });

  it("runs a flow across queues whose names Loam would refuse (mapped both ways)", async () => {
    const parentQ = `parent "${qname()}" \\ é`;
    const childQ = `child ${qname()}\n`;
    const flow = track(new FlowProducer({ connection }));
    const tree = await flow.add({ name: "p", queueName: parentQ, data: {}, children: [{ name: "c", queueName: childQ, data: {} }] });
    track(new Worker(childQ, async () => 7, { connection }));
    track(new Worker(parentQ, async (j) => Object.keys(await j.getChildrenValues()), { connection }));
    const parentQueue = track(new Queue(parentQ, { connection }));
    await until(async () => (await parentQueue.getJobState(tree.job.id!)) === "completed", 8000);
    expect((await parentQueue.getJob(tree.job.id!))!.returnvalue).toEqual([`${childQ}:${tree.children![0].job.id}`]);
    expect(await parentQueue.getJobCounts("completed")).toEqual({ completed: 1 });
  });

  it("links a child re-added with a new parent, completed or not", async () => {
    const q = qname();
    const queue = track(new Queue(q, { connection }));
    const flow = track(new FlowProducer({ connection }));
    await flow.add({ name: "mon", queueName: q, data: {}, opts: { jobId: "mon" } });
    const worker = track(new Worker(q, async () => "v", { connection }));
    await until(async () => (await queue.getJobState("mon")) === "completed", 8000);
    await worker.close();
    const tree = await flow.add({ name: "tue", queueName: q, data: {}, opts: { jobId: "tue" }, children: [{ name: "mon", queueName: q, data: {}, opts: { jobId: "mon" } }] });
    expect(await tree.job.getState()).toBe("waiting");
    expect(await tree.job.getDependenciesCount()).toMatchObject({ processed: 1, unprocessed: 0 });
    await expect(queue.add("mon", {}, { jobId: "mon", parent: { id: "other", queue: q } })).rejects.toThrow(
      `The parent job ${q}:other cannot be replaced. addJob`,
    );
  });
});
