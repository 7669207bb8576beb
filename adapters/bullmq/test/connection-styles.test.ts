/**
 * The switch is the import alone: a `connection` written for Redis in any of the styles
 * BullMQ's own docs use (an options object, a `redis://` URL, an IORedis instance) is
 * ignored, with one log line naming LOAM_URL, and the queue runs on the Loam server the
 * environment names. LOAM_URL is the server's name for every Loam client; LOAM_JOBS_URL
 * is accepted as an alias.
 */
import IORedis from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { Queue, Worker } from "../src/index.js";
import { isRedisShaped, resolveConnection } from "../src/connection.js";
import { closeAfterEach, qname, until } from "./helpers.js";

describe("connection styles from BullMQ's docs", () => {
  const track = closeAfterEach();
  const warnings: string[] = [];
  let ioredis: IORedis | undefined;

  beforeAll(() => {
    vi.spyOn(console, "warn").mockImplementation((...args: unknown[]) => void warnings.push(args.join(" ")));
  });
  afterAll(() => {
    vi.restoreAllMocks();
    ioredis?.disconnect();
  });

  async function roundTrip(connection: unknown): Promise<void> {
    const name = qname();
    const queue = track(new Queue(name, { connection: connection as any }));
    const job = await queue.add("styled", { n: 2 });
    track(new Worker(name, async (j) => j.data.n * 21, { connection: connection as any }));
    await until(async () => (await queue.getJobState(job.id!)) === "completed", 10_000);
    expect((await queue.getJob(job.id!))!.returnvalue).toBe(42);
  }

  it("an options object ({ host, port })", async () => {
    await roundTrip({ host: "localhost", port: 6379 });
  });

  it("a redis:// URL, which no longer fails at connect", async () => {
    await roundTrip({ url: "redis://localhost:6379" });
  });

  it("an IORedis instance, left alone", async () => {
    ioredis = new IORedis({ maxRetriesPerRequest: null, lazyConnect: true });
    await roundTrip(ioredis);
    expect(ioredis.status).toBe("wait"); // never asked to connect
  });

  it("all three together made one log line, naming LOAM_URL", () => {
    const lines = warnings.filter((w) => w.includes("@loam/bullmq"));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^@loam\/bullmq: the Redis connection option is ignored; jobs go to Loam at http:\/\/127\.0\.0\.1:\d+ \(from LOAM_URL\)$/);
  });
});

describe("which connections are Redis-shaped", () => {
  it("tells BullMQ's Redis styles from Loam's own options", () => {
    expect(isRedisShaped({ host: "localhost", port: 6379 })).toBe(true);
    expect(isRedisShaped({ port: 6380 })).toBe(true);
    expect(isRedisShaped({ url: "redis://localhost:6379" })).toBe(true);
    expect(isRedisShaped({ url: "rediss://cache.example:6380/0" })).toBe(true);
    expect(isRedisShaped(new IORedis({ lazyConnect: true }))).toBe(true);
    expect(isRedisShaped({})).toBe(false);
    expect(isRedisShaped({ url: "http://127.0.0.1:7720", token: "t" })).toBe(false);
    expect(isRedisShaped({ namespace: "acme" })).toBe(false);
  });
});

describe("the server URL from the environment", () => {
  const saved = { LOAM_URL: process.env.LOAM_URL, LOAM_JOBS_URL: process.env.LOAM_JOBS_URL };
  afterEach(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });

  it("reads LOAM_URL first, then its alias LOAM_JOBS_URL, then the default", () => {
    process.env.LOAM_URL = "http://primary:7720";
    process.env.LOAM_JOBS_URL = "http://alias:7720";
    expect(resolveConnection({}).url).toBe("http://primary:7720");
    delete process.env.LOAM_URL;
    expect(resolveConnection({}).url).toBe("http://alias:7720");
    delete process.env.LOAM_JOBS_URL;
    expect(resolveConnection({}).url).toBe("http://127.0.0.1:7720");
  });

  it("lets Loam's own url option win, and never takes a Redis one", () => {
    process.env.LOAM_URL = "http://primary:7720";
    expect(resolveConnection({ url: "http://explicit:7720" }).url).toBe("http://explicit:7720");
    expect(resolveConnection({ url: "redis://localhost:6379" }).url).toBe("http://primary:7720");
    expect(resolveConnection({ host: "redis.internal", port: 6379, namespace: "n" }).namespace).toBe("default");
  });
});
