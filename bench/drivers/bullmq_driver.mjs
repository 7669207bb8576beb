// One system's workloads for BullMQ 6.7 on Redis, on its built-in Postgres backend, or on
// Loam through @loam/bullmq, for bench/harness.py. Prints one JSON object on its last
// stdout line.
//
//   node bench/drivers/bullmq_driver.mjs run --backend redis --redis-url redis://127.0.0.1:6379 --jobs 20000
//   node bench/drivers/bullmq_driver.mjs growth --backend postgres --pg-url postgres://... --levels 1000,100000
//   tsx  bench/drivers/bullmq_driver.mjs run --backend loam --loam-url http://127.0.0.1:7720
//
// `run` (one round, fresh queues):
//   enqueue  N `await queue.add("noop", {})`, one at a time
//   bulk     N by `queue.addBulk`, 1,000 a call, one call at a time
//   drain    the N jobs of `enqueue` by one Worker (no-op processor, concurrency 50):
//            worker construction → N "completed" events
//   latency  the same worker, now idle: jobs added one at a time at a fixed rate (open
//            loop); add → processor start (performance.now() in the job data)
// `growth`: one queue filled by addBulk to each level in turn; then, with --settle-pids, a
// wait until the store's processes (and their children) are idle, reported as settle_s;
// then --repeats times: --samples single adds timed one by one, then --samples `worker.getNextJob`
// (manual processing) each followed by `job.moveToCompleted` (timed apart).
//
// --lib: where BullMQ comes from (the bench-local node dir for the anchors, the adapter's
// for @loam/bullmq); --adapter: @loam/bullmq's entry (src/index.ts, needs tsx).
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    backend: { type: "string", default: "redis" },
    lib: { type: "string" },
    adapter: { type: "string" },
    "redis-url": { type: "string" },
    "pg-url": { type: "string" },
    "loam-url": { type: "string" },
    namespace: { type: "string", default: "bench" },
    jobs: { type: "string", default: "20000" },
    "latency-jobs": { type: "string", default: "500" },
    "latency-rate": { type: "string", default: "50" },
    concurrency: { type: "string", default: "50" },
    levels: { type: "string", default: "1000,100000" },
    samples: { type: "string", default: "200" },
    repeats: { type: "string", default: "3" },
    timeout: { type: "string", default: "600" },
    "settle-pids": { type: "string", default: "" },
  },
});
const cmd = positionals[0] ?? "run";
const CHUNK = 1000;
const TIMEOUT_MS = Number(a.timeout) * 1000;

const bullmq = createRequire(a.lib)("bullmq");
const { Queue, Worker } = bullmq;

let connection;
let factory;
if (a.backend === "redis") {
  const u = new URL(a["redis-url"]);
  connection = { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
} else if (a.backend === "postgres") {
  connection = { connectionString: a["pg-url"], migrate: true };
  factory = bullmq.createPostgresBackend;
} else if (a.backend === "loam") {
  const adapter = await import(pathToFileURL(a.adapter).href);
  connection = { url: a["loam-url"], namespace: a.namespace };
  factory = adapter.loamBackend(connection);
} else {
  throw new Error(`unknown backend ${a.backend}`);
}

const pct = (xs, p) => {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const qname = (kind) => `bench-${kind}-${randomUUID().slice(0, 8)}`;
const newQueue = (name) => new Queue(name, { connection }, factory);
const newWorker = (name, proc, opts = {}) => new Worker(name, proc, { connection, ...opts }, factory);

function withTimeout(promise, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, rej) => (timer = setTimeout(() => rej(new Error(`${what}: timed out`)), TIMEOUT_MS))),
  ]).finally(() => clearTimeout(timer));
}

async function runRound() {
  const n = Number(a.jobs);
  const latN = Number(a["latency-jobs"]);
  const rate = Number(a["latency-rate"]);
  const out = {};
  const qSingle = newQueue(qname("single"));
  const qBulk = newQueue(qname("bulk"));
  await qSingle.waitUntilReady();
  await qBulk.waitUntilReady();
  await qSingle.add("warmup", {});
  await qBulk.addBulk([{ name: "warmup", data: {} }]);

  let t0 = performance.now();
  for (let i = 0; i < n; i++) await qSingle.add("noop", {});
  out.enqueue_per_s = n / ((performance.now() - t0) / 1000);

  const batches = [];
  for (let i = 0; i < n; i += CHUNK) {
    batches.push(Array.from({ length: Math.min(CHUNK, n - i) }, () => ({ name: "noop", data: {} })));
  }
  t0 = performance.now();
  for (const b of batches) await qBulk.addBulk(b);
  out.bulk_enqueue_per_s = n / ((performance.now() - t0) / 1000);

  // drain: n + 1 jobs wait (the warm-up one too)
  const lat = [];
  let done = 0;
  let drained, latDone;
  const drainedP = new Promise((r) => (drained = r));
  const latP = new Promise((r) => (latDone = r));
  t0 = performance.now();
  const worker = newWorker(
    qSingle.name,
    async (job) => {
      if (job.name === "lat") {
        lat.push(performance.now() - job.data.t);
        if (lat.length === latN) latDone();
      }
    },
    { concurrency: Number(a.concurrency) },
  );
  worker.on("completed", () => {
    if (++done === n + 1) drained();
  });
  worker.on("error", (e) => console.error("worker error:", e?.message ?? e));
  await withTimeout(drainedP, `drain (${done} of ${n + 1})`);
  out.drain_per_s = (n + 1) / ((performance.now() - t0) / 1000);

  // latency: the worker is idle now
  await sleep(500);
  if (latN) {
    const start = performance.now();
    for (let i = 0; i < latN; i++) {
      const delay = start + (i * 1000) / rate - performance.now();
      if (delay > 0) await sleep(delay);
      await qSingle.add("lat", { t: performance.now() });
    }
    await withTimeout(latP, `latency (${lat.length} of ${latN})`);
    out.latency_p50_ms = pct(lat, 50);
    out.latency_p99_ms = pct(lat, 99);
    out.latency_samples = lat.length;
  }
  await worker.close();
  await qSingle.close();
  await qBulk.close();
  return out;
}

// CPU seconds of each process in the trees under `roots` (Linux /proc; ticks of 1/100 s)
function treeCpu(roots) {
  const stats = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const f = readFileSync(`/proc/${name}/stat`, "utf8").split(")").pop().trim().split(/\s+/);
      stats.set(Number(name), { ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12])) / 100 });
    } catch {}
  }
  const children = new Map();
  for (const [pid, { ppid }] of stats) children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  const out = new Map();
  const todo = roots.filter((p) => stats.has(p));
  while (todo.length) {
    const pid = todo.pop();
    if (out.has(pid)) continue;
    out.set(pid, stats.get(pid).cpu);
    todo.push(...(children.get(pid) ?? []));
  }
  return out;
}

// Resident memory of the trees under `roots`, MB (as procstat.tree_memory): RSS and PSS
function treeMemory(roots) {
  const pids = [...treeCpu(roots).keys()];
  if (!pids.length) return null;
  let rss = 0, pss = 0;
  for (const pid of pids) {
    try {
      for (const line of readFileSync(`/proc/${pid}/smaps_rollup`, "utf8").split("\n")) {
        if (line.startsWith("Rss:")) rss += Number(line.split(/\s+/)[1]);
        else if (line.startsWith("Pss:")) pss += Number(line.split(/\s+/)[1]);
      }
    } catch {}
  }
  return { rss_mb: Math.round(rss / 102.4) / 10, pss_mb: Math.round(pss / 102.4) / 10, processes: pids.length };
}

// Until the trees under `roots` use under 5 % of a core over a second (as procstat.py)
async function settle(roots, maxWaitS = 300) {
  if (!roots.length) return 0;
  const t0 = performance.now();
  let prev = treeCpu(roots);
  while (performance.now() - t0 < maxWaitS * 1000) {
    await sleep(1000);
    const cur = treeCpu(roots);
    let busy = 0;
    for (const [pid, cpu] of cur) if (prev.has(pid)) busy += cpu - prev.get(pid);
    if (busy < 0.05) break;
    prev = cur;
  }
  return (performance.now() - t0) / 1000;
}

async function growth() {
  const levels = a.levels.split(",").filter(Boolean).map(Number);
  const samples = Number(a.samples);
  const repeats = Number(a.repeats);
  const name = qname("growth");
  const queue = newQueue(name);
  await queue.waitUntilReady();
  const worker = newWorker(name, null, { autorun: false });
  await worker.waitUntilReady();
  const out = { levels: {} };
  let have = 0;
  for (const level of levels) {
    const t0 = performance.now();
    const todo = [];
    for (let i = have; i < level; i += CHUNK) todo.push(Math.min(CHUNK, level - i));
    const inflight = 2;
    let next = 0;
    await Promise.all(
      Array.from({ length: inflight }, async () => {
        while (next < todo.length) {
          const k = todo[next++];
          await queue.addBulk(Array.from({ length: k }, () => ({ name: "noop", data: {} })));
        }
      }),
    );
    const fillPerS = (level - have) / ((performance.now() - t0) / 1000);
    const settleS = await settle(a["settle-pids"].split(",").filter(Boolean).map(Number));
    have = level;
    const runs = [];
    for (let r = 0; r < repeats; r++) {
      const enq = [], lease = [], comp = [];
      for (let i = 0; i < samples; i++) {
        const t = performance.now();
        await queue.add("noop", {});
        enq.push(performance.now() - t);
      }
      for (let i = 0; i < samples; i++) {
        const token = randomUUID();
        let t = performance.now();
        const job = await worker.getNextJob(token, { block: false });
        lease.push(performance.now() - t);
        if (!job) throw new Error(`getNextJob returned nothing at ${level} waiting`);
        t = performance.now();
        await job.moveToCompleted("ok", token, false);
        comp.push(performance.now() - t);
      }
      runs.push({
        enqueue_p50_ms: pct(enq, 50), enqueue_p99_ms: pct(enq, 99),
        lease_p50_ms: pct(lease, 50), lease_p99_ms: pct(lease, 99),
        complete_p50_ms: pct(comp, 50),
      });
    }
    const waiting = await queue.getWaitingCount();
    const memory = treeMemory(a["settle-pids"].split(",").filter(Boolean).map(Number));
    out.levels[String(level)] = { runs, fill_per_s: fillPerS, settle_s: settleS, waiting, memory };
    console.error(`  bullmq-${a.backend} growth ${level}: enqueue p50 ${runs.map((r) => r.enqueue_p50_ms.toFixed(3))} ms, lease p50 ${runs.map((r) => r.lease_p50_ms.toFixed(3))} ms`);
  }
  await worker.close();
  await queue.close();
  return out;
}

try {
  const out = cmd === "growth" ? await growth() : await runRound();
  console.log(JSON.stringify(out));
  process.exit(0);
} catch (e) {
  console.error(e?.stack ?? String(e));
  process.exit(1);
}
