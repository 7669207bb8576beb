/**
 * `@loam/durable`: Resonate's own TypeScript SDK (`@resonatehq/sdk`) pointed at Loam.
 *
 *   import { loamResonate } from "@loam/durable";
 *   const resonate = loamResonate({ group: "emails" });   // = new Resonate({ url, token, group })
 *
 * It fills in the durable endpoint (`$LOAM_URL/resonate`, with `/ns/<ns>` first when
 * `$LOAM_NAMESPACE` or `namespace` names one), the token (`$LOAM_TOKEN`) and the group,
 * and adds nothing to Resonate's API: register, run, rpc, ctx and retry policies are
 * Resonate's own.
 */
import { randomUUID } from "node:crypto";
import { HttpNetwork, PollMessageSource, Resonate } from "@resonatehq/sdk";

// @resonatehq/sdk 0.11 declares Node >= 22 for one API, Promise.withResolvers; Loam's
// machines and its users' may run Node 20, so it is supplied here when missing (the
// same three lines as the standard's own definition), and nothing else is changed.
if (typeof (Promise as any).withResolvers !== "function") {
  (Promise as any).withResolvers = function withResolvers<T>() {
    let resolve!: (value: T | PromiseLike<T>) => void;
    let reject!: (reason?: unknown) => void;
    const promise = new Promise<T>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}

export const DEFAULT_LOAM_URL = "http://127.0.0.1:7720";
export const DURABLE_PATH = "/resonate";

type ResonateOptions = NonNullable<ConstructorParameters<typeof Resonate>[0]>;

export interface LoamResonateOptions extends Omit<ResonateOptions, "url" | "token" | "group"> {
  /** the Resonate group this process's workers join (targets reach it as `poll://any@<group>`) */
  group: string;
  /** Loam's URL (default `$LOAM_URL`, then its alias `$LOAM_JOBS_URL`, then http://127.0.0.1:7720) */
  url?: string;
  /** a Loam bearer token (default `$LOAM_TOKEN`); it names the namespace */
  token?: string;
  /** a namespace on a dev server without auth (default `$LOAM_NAMESPACE`) */
  namespace?: string;
}

/** The Resonate base URL of a Loam server. */
export function loamDurableUrl(url?: string, namespace?: string, env: NodeJS.ProcessEnv = process.env): string {
  // LOAM_URL is every Loam client's name for the server; LOAM_JOBS_URL (@loam/bullmq's
  // earlier name) is accepted as an alias, so one environment serves both packages.
  const base = (url || env.LOAM_URL || env.LOAM_JOBS_URL || DEFAULT_LOAM_URL).replace(/\/+$/, "");
  const ns = namespace ?? (env.LOAM_NAMESPACE || undefined);
  return base + (ns ? `/ns/${encodeURIComponent(ns)}` : "") + DURABLE_PATH;
}

/**
 * `new Resonate({ url: <loam>/resonate, token: $LOAM_TOKEN, group, ...options })`.
 *
 * One difference from passing `url` alone: the SDK reads its own group and pid back out
 * of the push channel's URL path (`/poll/<group>/<pid>` as the first segments), which
 * only holds for a server at the root of its host. Loam serves Resonate under
 * `/resonate` (and `/ns/<ns>/resonate`), so the push channel is built here with the
 * addresses set from the group and pid themselves.
 */
export function loamResonate(options: LoamResonateOptions): Resonate {
  const { group, url, token, namespace, pid: givenPid, timeout, logger, ...rest } = options;
  const resolvedToken = token ?? (process.env.LOAM_TOKEN || undefined);
  const base = loamDurableUrl(url, namespace);
  const pid = givenPid ?? randomUUID().replace(/-/g, "");
  const adapter = new PollMessageSource({
    url: `${base}/poll/${encodeURIComponent(group)}/${encodeURIComponent(pid)}`,
    token: resolvedToken,
    logger,
  });
  Object.assign(adapter, { unicast: `poll://uni@${group}/${pid}`, anycast: `poll://any@${group}/${pid}` });
  const network = new HttpNetwork({ url: base, token: resolvedToken, timeout, headers: {}, adapter, logger });
  return new Resonate({ ...rest, pid, group, timeout, logger, network });
}

export { Resonate };
