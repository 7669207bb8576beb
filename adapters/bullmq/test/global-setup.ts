import { startLoamDev, type LoamDev } from "./loam-dev.js";

let dev: LoamDev | undefined;

export async function setup() {
  if (process.env.LOAM_URL || process.env.LOAM_JOBS_URL) return; // a server given by the caller
  dev = await startLoamDev();
  process.env.LOAM_URL = dev.url;
}

export async function teardown() {
  await dev?.stop();
}
