/**
 * The hidden-change count for BullMQ is zero: the unmodified app in
 * tests/fixtures/bullmq_app (Queue, Worker, QueueEvents, FlowProducer, Redis
 * connection options and all) is copied byte for byte, only its import line changes from
 * "bullmq" to "@loam/bullmq" (the test asserts the diff), and it runs as its own process
 * with LOAM_URL in its environment, against the `loam dev` of the test setup.
 *
 * `node_modules/@loam/bullmq` beside the copy stands for `npm install @loam/bullmq`: a
 * module that re-exports this package's source.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { envUrl } from "../src/connection.js";

const here = dirname(fileURLToPath(import.meta.url));
const fixture = resolve(here, "..", "..", "..", "tests", "fixtures", "bullmq_app");
const tsx = resolve(here, "..", "node_modules", ".bin", "tsx");
const IMPORT_LINE = /^import .* from "bullmq";$/;

function files(dir: string, base = dir): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.name === "node_modules" ? [] : e.isDirectory() ? files(join(dir, e.name), base) : [join(dir, e.name).slice(base.length + 1)],
  );
}

/** Every line in which `copy` differs from `original`, file by file (same line count assumed, as a one-line switch keeps it). */
function changedLines(original: string, copy: string): { file: string; before: string; after: string }[] {
  const out: { file: string; before: string; after: string }[] = [];
  const names = new Set([...files(original), ...files(copy)]);
  for (const file of [...names].sort()) {
    const a = readFileSync(join(original, file), "utf8").split("\n");
    const b = readFileSync(join(copy, file), "utf8").split("\n");
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      if (a[i] !== b[i]) out.push({ file, before: a[i] ?? "", after: b[i] ?? "" });
    }
  }
  return out;
}

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, ms: number) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((res, rej) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      rej(new Error(`the app did not finish in ${ms} ms:\n${stdout}\n${stderr}`));
    }, ms);
    child.on("exit", (code) => {
      clearTimeout(timer);
      res({ code, stdout, stderr });
    });
  });
}

describe("an unmodified BullMQ app with only its import changed", () => {
  const scratch = mkdtempSync(join(tmpdir(), "loam-bullmq-switch-"));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it("differs from the original by that one line and runs on Loam", async () => {
    const app = join(scratch, "app");
    cpSync(fixture, app, { recursive: true });
    const source = join(app, "app.ts");
    const lines = readFileSync(source, "utf8").split("\n");
    const at = lines.findIndex((l) => IMPORT_LINE.test(l));
    expect(at).toBeGreaterThanOrEqual(0);
    lines[at] = lines[at].replace('from "bullmq"', 'from "@loam/bullmq"');
    writeFileSync(source, lines.join("\n"));

    const changes = changedLines(fixture, app);
    expect(changes).toEqual([
      { file: "app.ts", before: 'import { FlowProducer, Queue, QueueEvents, Worker } from "bullmq";', after: 'import { FlowProducer, Queue, QueueEvents, Worker } from "@loam/bullmq";' },
    ]);

    const installed = join(app, "node_modules", "@loam", "bullmq");
    mkdirSync(installed, { recursive: true });
    writeFileSync(join(installed, "package.json"), JSON.stringify({ name: "@loam/bullmq", type: "module", exports: "./index.ts" }));
    writeFileSync(join(installed, "index.ts"), `export * from ${JSON.stringify(pathToFileURL(resolve(here, "..", "src", "index.ts")).href)};\n`);

    const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LOAM_")));
    env.LOAM_URL = envUrl();
    env.LOAM_NAMESPACE = `switch-${randomUUID().slice(0, 8)}`; // the dev tenant, so runs never share the "orders" queue
    const { code, stdout, stderr } = await run(tsx, ["app.ts"], app, env, 60_000);
    expect(code, `${stdout}\n${stderr}`).toBe(0);
    const result = JSON.parse(stdout.trim().split("\n").pop()!);
    expect(result).toEqual({
      charged: { charged: 42 },
      shipped: ["packed book", "packed lamp"],
      counts: { completed: 4, failed: 0 },
    });
    // The Redis connection was noted once, naming the variable the server came from.
    const notes = stderr.split("\n").filter((l) => l.includes("@loam/bullmq"));
    expect(notes).toHaveLength(1);
    expect(notes[0]).toBe(`@loam/bullmq: the Redis connection option is ignored; jobs go to Loam at ${envUrl()} (from LOAM_URL)`);
  }, 90_000);
});
