/**
 * Flows on Loam: BullMQ's addFlow becomes one Loam flow (a graph of jobs and their
 * dependencies, added at once), and a parent's children are read back in BullMQ's
 * categories (processed, unprocessed, failed, ignored) for its dependency getters.
 */
import { randomUUID } from "node:crypto";
import { DependencyState, FailurePolicy, type Dependency } from "./gen/loam/jobs/v1/types_pb.js";
import { toLoam, utf8, type JobJsonIn } from "./jobs.js";
import * as R from "./redis-shape.js";
import { toBullQueue, toLoamQueue } from "./queue-names.js";
import type { QueueCalls } from "./queue-calls.js";
import type { LoamQueueBackend } from "./backend.js";

/** BullMQ's dependency categories from a Loam dependency: a child failed under
 * continueParentOnFailure is "ignored" in BullMQ, like ignoreDependencyOnFailure. */
function bucket(d: Dependency): "processed" | "unprocessed" | "failed" | "ignored" | "" {
  switch (d.state) {
    case DependencyState.PENDING:
      return "unprocessed";
    case DependencyState.PROCESSED:
      return "processed";
    case DependencyState.IGNORED:
      return "ignored";
    case DependencyState.FAILED:
      return d.policy === FailurePolicy.CONTINUE_PARENT ? "ignored" : "failed";
    default:
      return "";
  }
}

/** A child's key among its parent's dependencies, as BullMQ names it. */
function childKey(d: Dependency): string {
  return R.nodeKey(toBullQueue(d.queue), d.jobKey || d.jobId);
}

/** A processed child's return value, JSON text as BullMQ keeps it. */
function childValue(d: Dependency): string {
  return new TextDecoder().decode(d.value?.data ?? utf8("null")) || "null";
}

/** One job of a flow as BullMQ's FlowProducer hands it to addFlow. */
export interface FlowEntry {
  jobData: JobJsonIn;
  jobId: string;
  parentKeyOpts: { parentKey?: string };
  prefix: string;
  queueName: string;
}

export class Flows {
  constructor(
    private readonly calls: QueueCalls,
    private readonly forQueue: (queue: string) => LoamQueueBackend, // the backend of a node's queue
  ) {}

  async addFlow(entries: FlowEntry[]): Promise<[Error | null, string | number][]> {
    const nodeId = (q: string, id: string) => R.nodeKey(q, id);
    const results: [Error | null, string | number][] = entries.map((e) => [null, e.jobId]);
    const index = new Map(entries.map((e, i) => [nodeId(e.queueName, e.jobId), i]));
    const parentOf = entries.map((e) => {
      const pk = e.parentKeyOpts?.parentKey;
      if (!pk) return -1;
      const p = R.parseNodeKey(pk);
      return index.get(nodeId(p.queueName, p.id)) ?? -2; // -2: a job outside this flow
    });
    const skipped = new Set<number>();
    const skipTree = (i: number) => {
      skipped.add(i);
      parentOf.forEach((p, j) => p === i && skipTree(j));
    };
    for (const [i, e] of entries.entries()) {
      if (skipped.has(i)) continue;
      const hasChildren = parentOf.includes(i);
      if (parentOf[i] === -2) {
        // A subtree under an existing job: only a childless node can join it (addJob);
        // a missing parent is BullMQ's -5.
        const p = R.parseNodeKey(e.parentKeyOpts.parentKey!);
        if (!(await this.forQueue(p.queueName).getJob(p.id))) {
          results[i] = [null, R.ErrorCode.ParentJobNotExist];
          skipTree(i);
        } else if (!hasChildren) {
          results[i] = [null, await this.forQueue(e.queueName).addJob(e.jobData, e.jobId, e.parentKeyOpts)];
          skipped.add(i);
        }
        continue;
      }
      const dd = e.jobData.opts?.deduplication;
      if (parentOf[i] === -1 && (dd?.id || !hasChildren)) {
        // A root with deduplication, or a lone node: BullMQ's add path decides.
        const existing = dd?.id ? await this.forQueue(e.queueName).getDeduplicationJobId(String(dd.id)) : null;
        if (existing !== null) {
          results[i] = [null, existing];
          skipTree(i);
        } else if (!hasChildren) {
          results[i] = [null, await this.forQueue(e.queueName).addJob(e.jobData, e.jobId)];
          skipped.add(i);
        }
      }
    }
    const nodes = entries.flatMap((e, i) => {
      if (skipped.has(i)) return [];
      const o = e.jobData.opts ?? {};
      // A subtree under a job outside the flow (a step job's children) keeps its parent
      // link: the server attaches the node to that job.
      const outside = parentOf[i] === -2;
      const { task, opts } = toLoam({ ...e.jobData, opts: outside ? o : { ...o, __flowNode: true } }, e.jobId, e.parentKeyOpts?.parentKey);
      if (!outside) delete (opts as any).parent;
      delete (opts as any).dedup;
      // No flag: BullMQ's parent keeps waiting on a failed child (Loam's keep-waiting).
      let onFailure = o.failParentOnFailure ? FailurePolicy.FAIL_PARENT : FailurePolicy.KEEP_WAITING;
      if (o.continueParentOnFailure) onFailure = FailurePolicy.CONTINUE_PARENT;
      else if (o.ignoreDependencyOnFailure) onFailure = FailurePolicy.IGNORE_DEPENDENCY;
      else if (o.removeDependencyOnFailure) onFailure = FailurePolicy.REMOVE_DEPENDENCY;
      const dependsOn = entries.flatMap((c, j) => (parentOf[j] === i && !skipped.has(j) ? [nodeId(c.queueName, c.jobId)] : []));
      // A leaf whose id is taken joins the flow as that job (BullMQ re-adding a child).
      const joinExisting = !dependsOn.length && !outside;
      return [{ id: nodeId(e.queueName, e.jobId), queue: toLoamQueue(e.queueName), task, opts, dependsOn, onFailure, joinExisting }];
    });
    if (nodes.length) await this.calls.client.flow({ graph: { id: randomUUID(), nodes } });
    return results;
  }

  async getDependencyCounts(jobId: string, types: string[]): Promise<number[]> {
    const deps = await this.calls.children(jobId);
    return types.map((t) => deps.filter((d) => bucket(d) === t).length);
  }

  async getDependencies(jobId: string, opts: any): Promise<any> {
    const deps = await this.calls.children(jobId);
    const out: any = {};
    const page = (o: any, items: any[]) => {
      const cursor = Number(o?.cursor ?? 0);
      const count = Number(o?.count ?? 20);
      const slice = items.slice(cursor, cursor + count);
      const next = cursor + count >= items.length ? 0 : cursor + count;
      return { slice, next };
    };
    const none = !opts || (!opts.processed && !opts.unprocessed && !opts.failed && !opts.ignored);
    if (none || opts.processed) {
      const { slice, next } = page(opts?.processed, deps.filter((d) => bucket(d) === "processed"));
      out.processed = Object.fromEntries(slice.map((d) => [childKey(d), JSON.parse(childValue(d))]));
      out.nextProcessedCursor = next;
    }
    if (none || opts.unprocessed) {
      const { slice, next } = page(opts?.unprocessed, deps.filter((d) => bucket(d) === "unprocessed"));
      out.unprocessed = slice.map(childKey);
      out.nextUnprocessedCursor = next;
    }
    if (none || opts.failed) {
      const { slice, next } = page(opts?.failed, deps.filter((d) => bucket(d) === "failed"));
      out.failed = slice.map(childKey);
      out.nextFailedCursor = next;
    }
    if (none || opts.ignored) {
      const { slice, next } = page(opts?.ignored, deps.filter((d) => bucket(d) === "ignored"));
      out.ignored = Object.fromEntries(slice.map((d) => [childKey(d), d.error?.message ?? ""]));
      out.nextIgnoredCursor = next;
    }
    return out;
  }

  async getProcessedChildrenValues(jobId: string): Promise<Record<string, string>> {
    const deps = await this.calls.children(jobId);
    return Object.fromEntries(deps.filter((d) => bucket(d) === "processed").map((d) => [childKey(d), childValue(d)]));
  }

  async getIgnoredChildrenFailures(jobId: string): Promise<Record<string, string>> {
    const deps = await this.calls.children(jobId);
    return Object.fromEntries(deps.filter((d) => bucket(d) === "ignored").map((d) => [childKey(d), d.error?.message ?? ""]));
  }

  async paginate(key: string, opts: { start: number; end: number; fetchJobs?: boolean }) {
    const parts = key.split(":");
    const kind = parts[parts.length - 1];
    const jobId = parts[parts.length - 2];
    const deps = await this.calls.children(jobId);
    const picked = deps.filter((d) => bucket(d) === (kind === "processed" ? "processed" : "unprocessed"));
    const all = picked.map((d) => ({
      id: childKey(d),
      ...(kind === "processed" ? { v: JSON.parse(childValue(d)) } : {}),
    }));
    const total = all.length;
    const end = opts.end < 0 ? total - 1 : opts.end;
    const items = all.slice(opts.start, end + 1);
    let jobs: any[] | undefined;
    if (opts.fetchJobs) {
      jobs = [];
      for (const it of items) {
        const p = R.parseNodeKey(it.id);
        const j = await this.forQueue(p.queueName).getJobData(p.id);
        if (j) jobs.push(j);
      }
    }
    return { cursor: end + 1 >= total ? "0" : String(end + 1), items, total, ...(jobs ? { jobs } : {}) };
  }
}
