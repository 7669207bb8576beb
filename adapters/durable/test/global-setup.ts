import { startLoamDev, type LoamDev } from "../../bullmq/test/loam-dev.js";

let dev: LoamDev | undefined;

export async function setup() {
  if (process.env.LOAM_URL) return; // a server given by the caller
  dev = await startLoamDev("--durable-retry-ms", "3000");
  process.env.LOAM_URL = dev.url; // read by this package and by @loam/bullmq (the BullMQ example)
}

export async function teardown() {
  await dev?.stop();
}
