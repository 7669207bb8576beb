/**
 * The spec's BullMQ example (§7.2.6) as a worker process for the tests: a BullMQ Worker
 * on `@loam/bullmq` whose processor runs the durable function `sendCampaign` through
 * `loamResonate`, with the promise id derived from the job id, so a stalled or
 * redelivered job resumes the same execution.
 *
 *   tsx test/campaign-worker.ts <queue> <counts file>
 *
 * Steps append their names to the counts file. While `<counts file>.hold` exists, the
 * second batch blocks after recording itself: the test kills the worker there.
 */
import { appendFileSync, existsSync } from "node:fs";
import type { Context } from "@resonatehq/sdk";
import { Worker } from "../../bullmq/src/index.js";
import { loamResonate } from "../src/index.js";

const [queueName, counts] = process.argv.slice(2);
const record = (name: string) => appendFileSync(counts, name + "\n");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function chunk<T>(list: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += size) out.push(list.slice(i, i + size));
  return out;
}

function loadRecipients(_ctx: Context, campaignId: string): string[] {
  record("loadRecipients");
  return Array.from({ length: 1200 }, (_, i) => `${campaignId}-r${i}@example.com`);
}

async function sendBatch(_ctx: Context, _campaignId: string, batch: string[], key: string): Promise<number> {
  const i = key.split(":").pop();
  record(`sendBatch:${i}`);
  while (i === "1" && existsSync(counts + ".hold")) await sleep(50);
  return batch.length;
}

const resonate = loamResonate({ group: "emails", ttl: 3000 });

function* sendCampaign(ctx: Context, campaignId: string) {
  const list = yield* ctx.run(loadRecipients, campaignId);
  for (const [i, batch] of chunk(list, 500).entries()) yield* ctx.run(sendBatch, campaignId, batch, `${ctx.id}:batch:${i}`);
  return list.length;
}
const campaign = resonate.register("sendCampaign", sendCampaign);

const worker = new Worker(
  queueName,
  async (job) => (await campaign.beginRun(`bullmq-${queueName}-${job.id}`, job.data.campaignId)).result(),
  { connection: {}, lockDuration: 2000 },
);
worker.on("ready", () => console.log("worker ready"));
setTimeout(() => console.log("worker ready"), 1000);
