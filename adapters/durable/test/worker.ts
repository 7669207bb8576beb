/**
 * A worker process of the TypeScript SDK for the tests: `tsx test/worker.ts <group>
 * <counts file> [dieInStep]`. Each step body appends its name to the counts file
 * (synchronously), so the tests count how often a step really ran; `dieInStep` makes
 * that step end the process at once, holding its lease, as kill -9 would.
 */
import { appendFileSync } from "node:fs";
import type { Context } from "@resonatehq/sdk";
import { loamResonate } from "../src/index.js";

const [group, counts, dieIn] = process.argv.slice(2);

function record(name: string): void {
  appendFileSync(counts, name + "\n");
  if (dieIn === name) process.kill(process.pid, "SIGKILL");
}

function step(_ctx: Context, name: string, value: string): string {
  record(name);
  return `${value}+${name}`;
}

const resonate = loamResonate({ group, ttl: 3000 });

resonate.register("wf", function* (ctx: Context, x: string) {
  const a = yield* ctx.run(step, "step1", x);
  const b = yield* ctx.run(step, "step2", a);
  return yield* ctx.run(step, "step3", b);
});

resonate.register("parent", function* (ctx: Context, x: string) {
  record("parent-body");
  const child = yield* ctx.rpc<string>("child", x, ctx.options({ target: "ts-other" }));
  const mine = yield* ctx.run(step, "parent-step", x);
  return `${child}|${mine}`;
});

resonate.register("child", function* (_ctx: Context, x: string) {
  record(`child@${group}`);
  return `child(${x})`;
});

setTimeout(() => console.log("worker ready"), 500);
