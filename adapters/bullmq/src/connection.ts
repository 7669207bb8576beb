/**
 * The connection to Loam: `{ url, token?, namespace? }` where BullMQ takes `connection`,
 * defaulting to LOAM_JOBS_URL, LOAM_TOKEN and LOAM_NAMESPACE. One Connect client per
 * distinct connection, shared by every backend that uses it: unary calls on one
 * keep-alive HTTP agent (unary-transport.ts), streams on another, so a held stream never
 * queues a unary call.
 */
import http from "node:http";
import https from "node:https";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { JobsService } from "./gen/loam/jobs/v1/jobs_pb.js";
import { unaryTransport } from "./unary-transport.js";

export interface LoamConnectionOptions {
  /** The Loam Jobs URL, e.g. http://127.0.0.1:7720. Default: LOAM_JOBS_URL. */
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

/** Loam options from what the caller passed as `connection` (anything not ours is ignored). */
export function resolveConnection(opts?: unknown): ResolvedConnection {
  const o = (opts && typeof opts === "object" ? opts : {}) as LoamConnectionOptions;
  const env = process.env;
  return {
    url: (typeof o.url === "string" && o.url) || env.LOAM_JOBS_URL || DEFAULT_URL,
    token: (typeof o.token === "string" && o.token) || env.LOAM_TOKEN || undefined,
    namespace: (typeof o.namespace === "string" && o.namespace) || env.LOAM_NAMESPACE || "default",
  };
}

export interface Connection {
  readonly key: string;
  readonly client: JobsClient;
  readonly options: ResolvedConnection;
}

const connections = new Map<string, Connection>();

function makeClient(o: ResolvedConnection, agent: http.Agent, streamAgent: http.Agent): JobsClient {
  const headers: Record<string, string> = o.token ? { authorization: `Bearer ${o.token}` } : { "x-loam-namespace": o.namespace };
  const auth: Interceptor = (next) => async (req) => {
    for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
    return next(req);
  };
  const streams = createConnectTransport({
    baseUrl: o.url,
    httpVersion: "1.1",
    useBinaryFormat: true,
    interceptors: [auth],
    nodeOptions: { agent: streamAgent },
  });
  return createClient(JobsService, unaryTransport({ url: o.url, headers, agent, streams }));
}

export function connect(opts?: unknown): Connection {
  const o = resolveConnection(opts);
  const key = `${o.url}\u0000${o.token ?? ""}\u0000${o.namespace}`;
  let c = connections.get(key);
  if (!c) {
    const Agent = o.url.startsWith("https:") ? https.Agent : http.Agent;
    const agent = new Agent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 10_000 });
    const streamAgent = new Agent({ keepAlive: true, maxSockets: Infinity });
    c = { key, options: o, client: makeClient(o, agent, streamAgent) };
    connections.set(key, c);
  }
  return c;
}
