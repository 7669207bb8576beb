/**
 * The TypeScript SDK (`@resonatehq/sdk` 0.11.5, through `loamResonate`) against a real
 * `loam dev`, workers in separate processes: a basic workflow, the same id again, a
 * worker killed inside step 2 resuming on another without re-running step 1, and an rpc
 * to another group. Steps are counted in side files.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loamDurableUrl, loamResonate, type Resonate } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const tsx = resolve(here, "..", "node_modules", ".bin", "tsx");
const scratch = mkdtempSync(join(tmpdir(), "loam-durable-ts-"));
const children: ChildProcess[] = [];

function startWorker(group: string, counts: string, dieIn = ""): Promise<ChildProcess> {
  const proc = spawn(tsx, [join(here, "worker.ts"), group, counts, dieIn], {
    stdio: ["ignore", "pipe", "pipe"],
    env: process.env,
    detached: true,
  });
  children.push(proc);
  let out = "";
  return new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error(`worker did not start:\n${out}`)), 30_000);
    proc.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      if (out.includes("worker ready")) {
        clearTimeout(t);
        res(proc);
      }
    });
    proc.stderr!.on("data", (b: Buffer) => (out += b.toString()));
  });
}

function counts(file: string): Record<string, number> {
  const out: Record<string, number> = {};
  if (!existsSync(file)) return out;
  for (const line of readFileSync(file, "utf8").split("\n").filter(Boolean)) out[line] = (out[line] ?? 0) + 1;
  return out;
}

async function envelope(kind: string, data: unknown): Promise<any> {
  const resp = await fetch(loamDurableUrl() + "/", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ kind, head: { corrId: "t", version: "2026-04-01" }, data }),
  });
  return resp.json();
}

let client: Resonate;
const main = join(scratch, "counts");

beforeAll(async () => {
  await startWorker("ts-workers", main);
  await startWorker("ts-other", main);
  client = loamResonate({ group: "ts-client" });
});

afterAll(() => {
  client?.stop();
  for (const c of children) {
    try {
      process.kill(-c.pid!, "SIGKILL"); // the process group: tsx and the node it started
    } catch {
      c.kill("SIGKILL");
    }
  }
});

describe("the server URL", () => {
  it("comes from LOAM_URL, then its alias LOAM_JOBS_URL, then the default", () => {
    const both = { LOAM_URL: "http://primary:7720", LOAM_JOBS_URL: "http://alias:7720" };
    expect(loamDurableUrl(undefined, undefined, both)).toBe("http://primary:7720/resonate");
    expect(loamDurableUrl(undefined, undefined, { LOAM_JOBS_URL: "http://alias:7720/" })).toBe("http://alias:7720/resonate");
    expect(loamDurableUrl(undefined, "acme", {})).toBe("http://127.0.0.1:7720/ns/acme/resonate");
    expect(loamDurableUrl("http://explicit:1", undefined, both)).toBe("http://explicit:1/resonate");
  });
});

describe("durable mode with @resonatehq/sdk", () => {
  it("runs a workflow of three steps, each once", async () => {
    const result = await client.rpc("ts-basic-1", "wf", "x", client.options({ target: "ts-workers" }));
    expect(result).toBe("x+step1+step2+step3");
    const c = counts(main);
    expect([c.step1, c.step2, c.step3]).toEqual([1, 1, 1]);
  });

  it("answers the same id again with the same result and runs nothing", async () => {
    const before = counts(main);
    const task = await envelope("task.get", { id: "ts-basic-1" });
    const result = await client.rpc("ts-basic-1", "wf", "x", client.options({ target: "ts-workers" }));
    expect(result).toBe("x+step1+step2+step3");
    expect(counts(main)).toEqual(before);
    expect((await envelope("task.get", { id: "ts-basic-1" })).data.task).toEqual(task.data.task);
  });

  it("resumes a workflow whose worker was killed inside step 2, without re-running step 1", async () => {
    const file = join(scratch, "crash");
    const w1 = await startWorker("ts-crashers", file, "step2");
    const exited = new Promise((res) => w1.once("exit", res));
    const handle = await client.beginRpc("ts-crash-1", "wf", "y", client.options({ target: "ts-crashers" }));
    await exited;
    await startWorker("ts-crashers", file);
    expect(await handle.result()).toBe("y+step1+step2+step3");
    const c = counts(file);
    expect([c.step1, c.step2, c.step3]).toEqual([1, 2, 1]);
  });

  it("calls a function in another group and resumes the parent", async () => {
    const result = await client.rpc("ts-rpc-1", "parent", "z", client.options({ target: "ts-workers" }));
    expect(result).toBe("child(z)|z+parent-step");
    const c = counts(main);
    expect(c["child@ts-other"]).toBe(1);
    expect(c["parent-step"]).toBe(1);
  });
});

describe("the spec's BullMQ example", () => {
  it("sendCampaign resumes after kill -9 of its worker mid-step without repeating finished steps", async () => {
    const { Queue } = await import("../../bullmq/src/index.js");
    const queueName = `campaigns-${Date.now()}`;
    const file = join(scratch, "campaign");
    const hold = file + ".hold";
    (await import("node:fs")).writeFileSync(hold, "");
    const queue = new Queue(queueName, { connection: {} });
    try {
      const job = await queue.add("send", { campaignId: "c1" });
      // its own process group: tsx runs the script in a child node process, and kill -9
      // must take that one down too
      const w1 = spawn(tsx, [join(here, "campaign-worker.ts"), queueName, file], { stdio: "ignore", env: process.env, detached: true });
      children.push(w1);
      await until(() => (counts(file)["sendBatch:1"] ?? 0) === 1, 30_000);
      const exited = new Promise((res) => w1.once("exit", res));
      process.kill(-w1.pid!, "SIGKILL"); // mid-step: the list and batch 0 are done, batch 1 is not
      await exited;
      (await import("node:fs")).rmSync(hold);
      // its own process group too, so afterAll stops tsx and the node it started
      const w2 = spawn(tsx, [join(here, "campaign-worker.ts"), queueName, file], { stdio: "ignore", env: process.env, detached: true });
      children.push(w2);
      await until(async () => (await queue.getJob(job.id!))?.finishedOn !== undefined, 45_000);
      const done = await queue.getJob(job.id!);
      expect(done!.returnvalue).toBe(1200);
      expect(counts(file)).toEqual({ loadRecipients: 1, "sendBatch:0": 1, "sendBatch:1": 2, "sendBatch:2": 1 });
    } finally {
      await queue.close();
    }
  });
});

async function until(f: () => Promise<boolean> | boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await f()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("condition not met in time");
}
