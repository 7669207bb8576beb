// The console's speed figures (issue bars: first load of the queue list under 1 s with
// 1,000 queues; a 50-row job page over 1,000,000 jobs under 50 ms p95; an SSE update on
// the page under 250 ms), measured against a real `loam dev` (no auth) on this machine,
// in Debian's Chromium for what the page sees.
//
//   node bench/console_bench.mjs [--queues 1000] [--jobs 1000000] [--out bench/results/console.json]
//
// Needs `make console` (the build and console/node_modules) and `make chromium`.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(repo, "console", "package.json"));
const { chromium } = require("playwright-core");

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const QUEUES = Number(arg("queues", 1000));
const JOBS = Number(arg("jobs", 1_000_000));
const OUT = arg("out", join(repo, "bench", "results", "console.json"));
const PYTHON = process.env.LOAM_PYTHON || join(repo, ".venv", "bin", "python");

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const ms = (x) => Math.round(x * 10) / 10;

async function freePort() {
  return new Promise((res) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

async function startDev() {
  const port = await freePort();
  const data = mkdtempSync(join(tmpdir(), "loam-console-bench-"));
  const proc = spawn(PYTHON, ["-m", "loam_gateway.dev", "--host", "127.0.0.1", "--port", String(port), "--data", data],
    { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise((res, rej) => {
    let log = "";
    proc.stdout.on("data", (b) => ((log += b), log.includes("ready") && res()));
    proc.on("exit", (c) => rej(new Error(`loam dev exited ${c}`)));
  });
  return { url: `http://127.0.0.1:${port}`, stop: () => { proc.kill("SIGTERM"); rmSync(data, { recursive: true, force: true }); } };
}

async function post(url, body) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}

async function timed(fn) {
  const t = performance.now();
  const out = await fn();
  return [performance.now() - t, out];
}

const server = await startDev();
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
const results = { machine: `${process.platform} ${process.arch}`, queues: QUEUES, jobs: JOBS, when: new Date().toISOString() };
const loadAverage = () => (existsSync("/proc/loadavg") ? Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]) : null);
results.load_average_at_start = loadAverage(); // other work on the machine moves every figure
try {
  // -- 1,000 queues, one job each; then the queue list as a user opens it ---------------
  const names = Array.from({ length: QUEUES }, (_, i) => `q${String(i).padStart(4, "0")}`);
  for (let i = 0; i < names.length; i += 50)
    await Promise.all(names.slice(i, i + 50).map((q) => post(`${server.url}/v1/queues/${q}/jobs`, { name: "t", data: {} })));
  const restList = [];
  for (let i = 0; i < 5; i++) restList.push((await timed(() => fetch(`${server.url}/v1/queues`).then((r) => r.json())))[0]);
  const loads = [], whole = [];
  for (let i = 0; i < 9; i++) {
    const page = await (await browser.newContext()).newPage();
    await page.goto(`${server.url}/console/`);
    await page.locator(`tr[data-queue="${names[names.length - 1]}"]`).waitFor({ timeout: 30_000 });
    // in the page's own clock: navigation start to the list drawn (the app's mark), and
    // to every row in the DOM
    const [drawn, all] = await page.evaluate(() => [performance.getEntriesByName("loam:queues-drawn")[0].startTime, performance.now()]);
    loads.push(Math.round(drawn));
    whole.push(Math.round(all));
    await page.context().close();
  }
  results.queue_list = { rest_ms_p50: ms(pct(restList, 50)), first_load_ms: loads, first_load_ms_p50: pct(loads, 50),
    every_row_ms_p50: pct(whole, 50) };
  console.log(`queue list, ${QUEUES} queues: GET /v1/queues p50 ${ms(pct(restList, 50))} ms; first load (navigation to list drawn) ${loads.join(", ")} ms; every row in the DOM p50 ${pct(whole, 50)} ms`);

  // -- 1,000,000 jobs in one queue; 50-row pages deep into it -------------------------
  if (JOBS > 0) {
  const BATCH = 1000;
  const t0 = performance.now();
  const item = { task: { name: "bulk", payload: { data: "e30=", contentType: "application/json" } } };
  const batch = { queue: "big", jobs: Array.from({ length: BATCH }, () => item) };
  for (let n = 0; n < JOBS; n += BATCH * 4)
    await Promise.all([0, 1, 2, 3].filter((k) => n + k * BATCH < JOBS).map(() =>
      post(`${server.url}/loam.jobs.v1.JobsService/EnqueueBulk`, batch)));
  const fill = (performance.now() - t0) / 1000;
  console.log(`enqueued ${JOBS} jobs in ${fill.toFixed(1)} s`);
  const pageTimes = { first: [], deep: [], all_states: [] };
  for (let i = 0; i < 50; i++)
    pageTimes.first.push((await timed(() => fetch(`${server.url}/v1/queues/big/jobs?state=waiting&page_size=50`).then((r) => r.json())))[0]);
  let token = "";
  for (let i = 0; i < 200; i++) { // walk 200 pages (10,000 jobs) in by cursor, timing each
    const [t, body] = await timed(() => fetch(`${server.url}/v1/queues/big/jobs?state=waiting&page_size=50&page_token=${encodeURIComponent(token)}`).then((r) => r.json()));
    pageTimes.deep.push(t);
    token = body.next_page_token;
  }
  for (let i = 0; i < 50; i++)
    pageTimes.all_states.push((await timed(() => fetch(`${server.url}/v1/queues/big/jobs?page_size=50`).then((r) => r.json())))[0]);
  results.job_page = Object.fromEntries(Object.entries(pageTimes).map(([k, v]) => [k, { p50_ms: ms(pct(v, 50)), p95_ms: ms(pct(v, 95)) }]));
  results.job_page.fill_s = ms(fill);
  console.log(`50-row page over ${JOBS} jobs:`, JSON.stringify(results.job_page));
  }

  // -- SSE: enqueue -> the row on the page --------------------------------------------
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${server.url}/console/queues/sse?state=waiting`).catch(() => {});
  await post(`${server.url}/v1/queues/sse/jobs`, { name: "first", data: {} });
  await page.goto(`${server.url}/console/queues/sse?state=waiting`);
  await page.locator("[data-testid=live]").filter({ hasText: "live" }).waitFor();
  const sse = [];
  for (let i = 0; i < 20; i++) {
    const t = Date.now();
    const { job } = await post(`${server.url}/v1/queues/sse/jobs`, { name: "pushed", data: { i } });
    await page.locator(`tr[data-job="${job}"]`).waitFor();
    sse.push(Date.now() - t);
    await page.waitForTimeout(300); // each push on its own, not folded into the last
  }
  results.sse_to_page_ms = { p50: pct(sse, 50), p95: pct(sse, 95), max: Math.max(...sse), samples: sse };
  console.log(`SSE, enqueue to the row on the page: ${JSON.stringify(results.sse_to_page_ms)} ms`);
} finally {
  await browser.close();
  server.stop();
}
results.load_average_at_end = loadAverage();
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, JSON.stringify(results, null, 1) + "\n");
console.log(`written to ${OUT}`);
