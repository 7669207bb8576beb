/**
 * BullMQ on Loam next to BullMQ on Redis, in one run: bulk add, drain with one worker at
 * concurrency 50, and enqueue→start latency (p50/p99) with an idle worker waiting.
 *
 *   npm run bench            # starts `loam dev` (and redis-server when installed)
 *   BENCH_JOBS=50000 npm run bench
 *
 * LOAM_URL (or its alias LOAM_JOBS_URL) uses a running server instead; REDIS_URL (redis://host:port) a running
 * Redis; BENCH_REDIS=0 skips Redis; BENCH_JOB_OPTS (JSON) the options each job is added with;
 * BENCH_QUEUE_EVENTS=1 a QueueEvents listener through the drain; BENCH_DASHBOARD=1 a
 * dashboard's polling through it; BENCH_PROCESSOR=progress|log a processor that reports
 * progress or logs a line for each job; BENCH_SINGLE_ADDS=N adds one at a time as well.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import net from "node:net";
import { performance } from "node:perf_hooks";
import { Queue, QueueEvents, Worker, type BackendFactory } from "bullmq";
import { loamBackend } from "../src/index.js";
import { startLoamDev } from "../test/loam-dev.js";

const N = Number(process.env.BENCH_JOBS ?? 20_000);
const LAT_N = Number(process.env.BENCH_LATENCY_JOBS ?? 1000);
const CHUNK = 1000;
// BENCH_SKIP_STALLED=1: the drain worker skips BullMQ's stalled check (on Loam that check
// only reports the server's stall events, read from a Watch stream of the queue).
const SKIP_STALLED = process.env.BENCH_SKIP_STALLED === "1";
// BENCH_JOB_OPTS: the options every job is added with, as JSON (production settings such
// as '{"removeOnComplete":{"age":3600}}', '{"removeOnComplete":true}', '{"priority":5}').
const JOB_OPTS = process.env.BENCH_JOB_OPTS ? JSON.parse(process.env.BENCH_JOB_OPTS) : undefined;
// BENCH_QUEUE_EVENTS=1: a QueueEvents listener (a dashboard's, say) reads the queue's
// events through the drain; the drain then ends when it has seen every `completed`.
const QUEUE_EVENTS = process.env.BENCH_QUEUE_EVENTS === "1";
// BENCH_PROCESSOR=progress|log: the drain's processor reports each job's progress
// (job.updateProgress(50)) or writes a log line (job.log), instead of doing nothing.
const PROCESSOR = process.env.BENCH_PROCESSOR ?? "";
const processor = async (job: any) => {
  if (PROCESSOR === "progress") await job.updateProgress(50);
  else if (PROCESSOR === "log") await job.log("step");
};
// BENCH_DASHBOARD=1: through the drain, a dashboard's polling (Bull Board's, say): the
// queue's counts every 100 ms and the first page of completed jobs every 250 ms.
const DASHBOARD = process.env.BENCH_DASHBOARD === "1";
// BENCH_SINGLE_ADDS=N: also N adds one at a time (each awaited, as an app handling one
// request at a time adds them), on a queue of their own: adds/s, p50 and this process's
// CPU an add.
const SINGLE_ADDS = Number(process.env.BENCH_SINGLE_ADDS ?? 0);

interface Figures {
  backend: string;
  single?: { perS: number; p50Ms: number; cpuUs: number };
  bulkAddPerS: number;
  drainPerS: number;
  p50Ms: number;
  p99Ms: number;
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

async function run(label: string, connection: any, factory?: BackendFactory<any, any>): Promise<Figures> {
  const name = `bench-${randomUUID().slice(0, 8)}`;
  const queue = new Queue(name, { connection }, factory as any);
  await queue.waitUntilReady();

  // Bulk add
  const t0 = performance.now();
  for (let i = 0; i < N; i += CHUNK) {
    await queue.addBulk(Array.from({ length: Math.min(CHUNK, N - i) }, (_, j) => ({ name: "j", data: { i: i + j }, opts: JOB_OPTS })));
  }
  const bulkAddPerS = N / ((performance.now() - t0) / 1000);

  let single: Figures["single"];
  if (SINGLE_ADDS > 0) {
    const q = new Queue(`${name}-single`, { connection }, factory as any);
    await q.waitUntilReady();
    for (let i = 0; i < 100; i++) await q.add("s", { i }); // warm-up
    const took: number[] = [];
    const cpu0 = process.cpuUsage();
    const s0 = performance.now();
    for (let i = 0; i < SINGLE_ADDS; i++) {
      const t = performance.now();
      await q.add("s", { i });
      took.push(performance.now() - t);
    }
    const wall = performance.now() - s0;
    const cpu = process.cpuUsage(cpu0);
    single = { perS: SINGLE_ADDS / (wall / 1000), p50Ms: pct(took, 50), cpuUs: (cpu.user + cpu.system) / SINGLE_ADDS };
    await q.obliterate({ force: true }).catch(() => undefined);
    await q.close();
  }

  // Drain: one worker, concurrency 50, a no-op processor
  let done = 0;
  let drainWorker: Worker | undefined;
  const events = QUEUE_EVENTS ? new QueueEvents(name, { connection }, factory as any) : undefined;
  let seen = 0;
  const allSeen = new Promise<void>((resolve) => {
    if (!events) return resolve();
    events.on("completed", () => {
      if (++seen === N) resolve();
    });
  });
  if (events) await events.waitUntilReady();
  const polls = DASHBOARD
    ? [setInterval(() => void queue.getJobCounts(), 100), setInterval(() => void queue.getJobs(["completed"], 0, 19), 250)]
    : [];
  const t1 = performance.now();
  const drained = new Promise<void>((resolve) => {
    const w = new Worker(name, processor, { connection, concurrency: 50, skipStalledCheck: SKIP_STALLED }, factory as any);
    w.on("completed", () => {
      if (++done === N) resolve();
    });
    drainWorker = w;
  });
  await Promise.all([drained, allSeen]);
  const drainPerS = N / ((performance.now() - t1) / 1000);
  polls.forEach(clearInterval);
  await events?.close();

  // Enqueue → start, the worker idle and waiting
  const lat: number[] = [];
  let resolveLat!: () => void;
  const latDone = new Promise<void>((r) => (resolveLat = r));
  await drainWorker!.close();
  const lw = new Worker(
    name,
    async (job) => {
      lat.push(performance.now() - job.data.t);
      if (lat.length === LAT_N) resolveLat();
    },
    { connection, concurrency: 50 },
    factory as any,
  );
  await lw.waitUntilReady();
  await new Promise((r) => setTimeout(r, 300));
  for (let i = 0; i < LAT_N; i++) {
    await queue.add("l", { t: performance.now() });
    await new Promise((r) => setTimeout(r, 2));
  }
  await latDone;
  await lw.close();
  await queue.obliterate({ force: true }).catch(() => undefined);
  await queue.close();
  return { backend: label, single, bulkAddPerS, drainPerS, p50Ms: pct(lat, 50), p99Ms: pct(lat, 99) };
}

async function freePort(): Promise<number> {
  return new Promise((res) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => res(p));
    });
  });
}

async function main() {
  const out: Figures[] = [];
  let dev: Awaited<ReturnType<typeof startLoamDev>> | undefined;
  let url = process.env.LOAM_URL || process.env.LOAM_JOBS_URL;
  if (!url) {
    dev = await startLoamDev();
    url = dev.url;
  }
  try {
    out.push(await run("loam", { url }, loamBackend({ url })));
  } finally {
    await dev?.stop();
  }

  if (process.env.BENCH_REDIS !== "0") {
    let redisUrl = process.env.REDIS_URL;
    let proc: ReturnType<typeof spawn> | undefined;
    const bin = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].find(existsSync);
    if (!redisUrl && bin) {
      const port = await freePort();
      proc = spawn(bin, ["--port", String(port), "--save", "", "--appendonly", "no"], { stdio: "ignore" });
      await new Promise((r) => setTimeout(r, 500));
      redisUrl = `redis://127.0.0.1:${port}`;
    }
    if (redisUrl) {
      const u = new URL(redisUrl);
      try {
        out.push(await run("redis", { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null }));
      } finally {
        proc?.kill();
      }
    } else {
      console.log("(no redis-server found: BullMQ on Redis skipped)");
    }
  }

  console.log(`\n${N} jobs; latency over ${LAT_N} single adds (one worker, concurrency 50)\n`);
  console.log("backend  bulk add (jobs/s)  drain (jobs/s)  enqueue→start p50 (ms)  p99 (ms)");
  for (const f of out) {
    console.log(
      `${f.backend.padEnd(8)} ${f.bulkAddPerS.toFixed(0).padStart(17)} ${f.drainPerS.toFixed(0).padStart(15)} ${f.p50Ms.toFixed(2).padStart(23)} ${f.p99Ms.toFixed(2).padStart(9)}`,
    );
  }
  for (const f of out) {
    if (!f.single) continue;
    const { perS, p50Ms, cpuUs } = f.single;
    console.log(`${f.backend}: ${SINGLE_ADDS} adds one at a time: ${perS.toFixed(0)} adds/s, p50 ${p50Ms.toFixed(3)} ms, ${cpuUs.toFixed(0)} µs of this process's CPU an add`);
  }
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
