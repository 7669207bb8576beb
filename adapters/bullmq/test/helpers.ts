import { randomUUID } from "node:crypto";
import { afterEach } from "vitest";

export const connection = {}; // LOAM_URL from the global setup

export function qname(): string {
  return `t-${randomUUID()}`;
}

export async function until(f: () => Promise<boolean> | boolean, ms = 5000, step = 20): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await f()) return;
    await new Promise((r) => setTimeout(r, step));
  }
  throw new Error("condition not met in time");
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Closable = { close(): Promise<unknown> };

/** Closes what a test opened, newest first, after each test of the file (or describe)
 * that calls it; returns `track(x)`, which registers `x` and hands it back. */
export function closeAfterEach(): <T extends Closable>(x: T) => T {
  const closers: Closable[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0).reverse()) await c.close();
  });
  return (x) => {
    closers.push(x);
    return x;
  };
}
