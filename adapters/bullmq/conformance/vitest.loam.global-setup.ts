/** Copied into a BullMQ checkout by conformance/run.sh: one `loam dev` for the run,
 * unless LOAM_URL (or its alias LOAM_JOBS_URL) names a server already. */
// @ts-ignore - resolved from the @loam/bullmq checkout by run.sh
import { startLoamDev } from '__LOAM_DEV__';

let dev: { url: string; stop(): Promise<void> } | undefined;

export async function setup() {
  if (process.env.LOAM_URL || process.env.LOAM_JOBS_URL) return;
  dev = await startLoamDev();
  process.env.LOAM_URL = dev.url;
}

export async function teardown() {
  await dev?.stop();
}
