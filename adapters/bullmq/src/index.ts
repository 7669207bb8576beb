/**
 * @loam/bullmq: BullMQ's own Queue, Worker, FlowProducer, QueueEvents and Job, bound to
 * Loam. Change `from "bullmq"` to `from "@loam/bullmq"` and set LOAM_URL in the
 * environment (a Redis `connection` is ignored), or keep the import and call
 * `setDefaultBackendFactory(loamBackend())` once at startup.
 */
import { withBackend, type BackendFactory } from "bullmq";
import { LoamQueueBackend, type FactoryOptions } from "./backend.js";
import { connect, type LoamConnectionOptions } from "./connection.js";

export * from "bullmq";
export { LoamQueueBackend } from "./backend.js";
export type { LoamConnectionOptions } from "./connection.js";

/**
 * A BullMQ BackendFactory on Loam. With `options` every queue uses that connection;
 * without, each class's own `connection` option (`{ url, token?, namespace? }`; a
 * Redis-shaped one is ignored) is used, and LOAM_URL (alias LOAM_JOBS_URL) / LOAM_TOKEN /
 * LOAM_NAMESPACE fill in what it leaves out.
 */
export function loamBackend(options?: LoamConnectionOptions): BackendFactory<any, any> {
  return ((name: string, opts: any, fo?: FactoryOptions) =>
    new LoamQueueBackend(connect(options ?? opts?.connection), name, opts ?? {}, fo ?? {})) as BackendFactory<any, any>;
}

const bound = withBackend<any, LoamConnectionOptions>(loamBackend() as any);

function withDefaults(opts: any): any {
  return { ...(opts ?? {}), connection: opts?.connection ?? {} };
}

export const Queue = class LoamQueue extends (bound.Queue as any) {
  constructor(name: string, opts?: any) {
    super(name, withDefaults(opts));
  }
} as unknown as typeof bound.Queue;

export const Worker = class LoamWorker extends (bound.Worker as any) {
  constructor(name: string, processor?: any, opts?: any) {
    super(name, processor, withDefaults(opts));
  }
} as unknown as typeof bound.Worker;

export const QueueEvents = class LoamQueueEvents extends (bound.QueueEvents as any) {
  constructor(name: string, opts?: any) {
    super(name, withDefaults(opts));
  }
} as unknown as typeof bound.QueueEvents;

export const QueueEventsProducer = class LoamQueueEventsProducer extends (bound.QueueEventsProducer as any) {
  constructor(name: string, opts?: any) {
    super(name, withDefaults(opts));
  }
} as unknown as typeof bound.QueueEventsProducer;

export const FlowProducer = class LoamFlowProducer extends (bound.FlowProducer as any) {
  constructor(opts?: any) {
    super(withDefaults(opts));
  }
} as unknown as typeof bound.FlowProducer;
