import { Queue } from "bullmq";
import { loamBackend } from "../src/index.js";
import { readFileSync } from "node:fs";
const url = process.env.LOAM_URL!;
const pid = Number(process.env.SERVER_PID);
const ticks = () => { const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" "); return Number(f[11]) + Number(f[12]); };
const queue = new Queue(`single-${Date.now()}`, { connection: {} as any }, loamBackend({ url }) as any);
await queue.waitUntilReady();
for (let i = 0; i < 200; i++) await queue.add("j", { i });
const N = Number(process.env.N ?? 3000);
const lat: number[] = [];
const c0 = process.cpuUsage(); const s0 = ticks(); const t0 = performance.now();
for (let i = 0; i < N; i++) { const t = performance.now(); await queue.add("j", { i }); lat.push(performance.now() - t); }
const wall = performance.now() - t0; const c1 = process.cpuUsage(c0); const s1 = ticks();
lat.sort((a, b) => a - b);
console.log(JSON.stringify({ per_s: Math.round(N / (wall / 1000)), p50_ms: lat[N >> 1].toFixed(3), node_us: Math.round((c1.user + c1.system) / N), server_us: Math.round((s1 - s0) * 10000 / N) }));
await queue.close();
