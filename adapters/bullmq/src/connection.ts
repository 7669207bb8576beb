/**
 * The connection to Loam: `{ url, token?, namespace? }` where BullMQ takes `connection`,
 * defaulting to LOAM_URL (LOAM_JOBS_URL is accepted as an alias), LOAM_TOKEN and
 * LOAM_NAMESPACE. A Redis-shaped `connection` (BullMQ's own examples: `{ host, port }`,
 * `{ url: "redis://…" }`, an IORedis instance) is left as it is and ignored, with one
 * log line naming LOAM_URL, so an app switches by its import alone. One Connect client
 * per distinct connection, shared by every backend that uses it: unary calls on its own
 * kept-alive sockets (unary-transport.ts), streams on a keep-alive HTTP agent, so a held
 * stream never queues a unary call.
 */
import http from "node:http";
import https from "node:https";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { JobsService } from "./gen/loam/jobs/v1/jobs_pb.js";
import { unaryTransport } from "./unary-transport.js";

export interface LoamConnectionOptions {
  /** The Loam Jobs URL, e.g. http://127.0.0.1:7720. Default: LOAM_URL, then LOAM_JOBS_URL. */
  url?: string;
  /** A bearer token (`loam_<id>_<secret>`). Default: LOAM_TOKEN. */
  token?: string;
  /** The dev tenant when the server runs without auth. Default: LOAM_NAMESPACE, else "default". */
  namespace?: string;
}

export interface ResolvedConnection {
  url: string;
  token?: string;
  namespace: string;
}

export type JobsClient = Client<typeof JobsService>;

const DEFAULT_URL = "http://127.0.0.1:7720";

/** The server URL from the environment: LOAM_URL, every Loam client's name for it, or
 * LOAM_JOBS_URL (this package's earlier name, still accepted); undefined if neither. */
export function envUrl(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env.LOAM_URL || env.LOAM_JOBS_URL || undefined;
}

const REDIS_URL = /^rediss?:\/\//i;
// ioredis' RedisOptions that say "this is meant for Redis" (BullMQ's ConnectionOptions).
const REDIS_KEYS = ["host", "port", "path", "password", "username", "db", "tls", "sentinels", "maxRetriesPerRequest", "enableReadyCheck"];

/** Whether `connection` was written for Redis: an ioredis client (or cluster), a
 * `redis://` URL, or ioredis options. Loam's own `{ url, token, namespace }` is not. */
export function isRedisShaped(connection: unknown): boolean {
  if (!connection || typeof connection !== "object") return false;
  const c = connection as Record<string, unknown>;
  if (typeof c.duplicate === "function" || typeof c.sendCommand === "function") return true; // IORedis, Cluster
  if (typeof c.url === "string" && REDIS_URL.test(c.url)) return true;
  return REDIS_KEYS.some((k) => k in c);
}

let redisNoticeGiven = false;

/** One line per process, the first time a Redis-shaped connection is ignored. */
function noteIgnoredRedis(url: string): void {
  if (redisNoticeGiven) return;
  redisNoticeGiven = true;
  const env = process.env;
  const source = env.LOAM_URL
    ? "from LOAM_URL"
    : env.LOAM_JOBS_URL
      ? "from LOAM_JOBS_URL, an alias of LOAM_URL"
      : "LOAM_URL is unset, so the default";
  console.warn(`@loam/bullmq: the Redis connection option is ignored; jobs go to Loam at ${url} (${source})`);
}

/** Loam options from what the caller passed as `connection`: Loam's own fields, or
 * nothing from a Redis-shaped one (noted once); the environment fills in the rest. */
export function resolveConnection(opts?: unknown): ResolvedConnection {
  const redis = isRedisShaped(opts);
  const o = (opts && typeof opts === "object" && !redis ? opts : {}) as LoamConnectionOptions;
  const env = process.env;
  const resolved = {
    url: (typeof o.url === "string" && o.url) || envUrl(env) || DEFAULT_URL,
    token: (typeof o.token === "string" && o.token) || env.LOAM_TOKEN || undefined,
    namespace: (typeof o.namespace === "string" && o.namespace) || env.LOAM_NAMESPACE || "default",
  };
  if (redis) noteIgnoredRedis(resolved.url);
  return resolved;
}

export interface Connection {
  readonly key: string;
  readonly client: JobsClient;
  readonly options: ResolvedConnection;
}

const connections = new Map<string, Connection>();

function makeClient(o: ResolvedConnection, streamAgent: http.Agent): JobsClient {
  const headers: Record<string, string> = o.token ? { authorization: `Bearer ${o.token}` } : { "x-loam-namespace": o.namespace };
  const auth: Interceptor = (next) => async (req) => {
    for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
    return next(req);
  };
  const streams = createConnectTransport({
    baseUrl: o.url,
    httpVersion: "1.1",
    useBinaryFormat: true,
    // No gzip: a Watch stream's messages are small events, each compressed on its own,
    // and compressing and inflating them cost both sides more CPU than the bytes saved
    // (a QueueEvents listener cut a drain from ~9,600 to ~3,700 jobs/s; bench/README.md).
    acceptCompression: [],
    interceptors: [auth],
    nodeOptions: { agent: streamAgent },
  });
  return createClient(JobsService, unaryTransport({ url: o.url, headers, streams }));
}

export function connect(opts?: unknown): Connection {
  const o = resolveConnection(opts);
  const key = `${o.url}\u0000${o.token ?? ""}\u0000${o.namespace}`;
  let c = connections.get(key);
  if (!c) {
    const Agent = o.url.startsWith("https:") ? https.Agent : http.Agent;
    const streamAgent = new Agent({ keepAlive: true, maxSockets: Infinity });
    c = { key, options: o, client: makeClient(o, streamAgent) };
    connections.set(key, c);
  }
  return c;
}
