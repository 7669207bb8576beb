import { randomUUID } from "node:crypto";

export const connection = {}; // LOAM_JOBS_URL from the global setup

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
