/**
 * BullMQ's QueueEvents stream from Loam's Watch: one server stream per reader, its events
 * turned into BullMQ's event names and fields and handed to `readEvents` in XREAD's shape.
 * The event id BullMQ passes back is the Watch cursor (base64url), so a QueueEvents that
 * starts from a `lastEventId` resumes exactly after it.
 */
import type { JobsClient } from "./connection.js";
import type { JobEvent } from "./gen/loam/jobs/v1/events_pb.js";
import { JobState } from "./gen/loam/jobs/v1/types_pb.js";
import { isUnimplemented } from "./errors.js";
import { fromUtf8, ms, stateName } from "./jobs.js";
import { streamEntry, type StreamEntry } from "./redis-shape.js";

const RETRY_MS = 2000;

export function cursorToId(c: Uint8Array): string {
  return Buffer.from(c).toString("base64url") || "0";
}

export function idToCursor(id: string): Uint8Array {
  if (!id || id === "$" || id === "0") return new Uint8Array();
  try {
    return new Uint8Array(Buffer.from(id, "base64url"));
  } catch {
    return new Uint8Array();
  }
}

/** BullMQ's name and fields for a Loam event, or null for events BullMQ has no name for. */
export function bullEvent(ev: JobEvent): { event: string; fields: Record<string, string | number | undefined> } | null {
  const jobId = ev.jobKey || ev.jobId;
  const prev = ev.prevState ? stateName(ev.prevState) : undefined;
  switch (ev.event) {
    case "added":
      return { event: "added", fields: { jobId, name: ev.name } };
    case "waiting":
      return { event: "waiting", fields: { jobId, prev } };
    case "waiting-children":
      return { event: "waiting-children", fields: { jobId } };
    case "delayed":
      return { event: "delayed", fields: { jobId, delay: ev.detail && /^\d+$/.test(ev.detail) ? ev.detail : ms(ev.timeNs) } };
    case "active":
      return { event: "active", fields: { jobId, prev: prev ?? "waiting" } };
    case "progress":
      return { event: "progress", fields: { jobId, data: fromUtf8(ev.data) || "0" } };
    case "completed":
      return { event: "completed", fields: { jobId, returnvalue: fromUtf8(ev.data) || "null", prev: "active" } };
    case "failed":
      return { event: "failed", fields: { jobId, failedReason: ev.error?.message ?? "", prev: prev ?? "active" } };
    case "retries-exhausted":
      return { event: "retries-exhausted", fields: { jobId, attemptsMade: ev.attempt } };
    case "stalled":
      return { event: "stalled", fields: { jobId } };
    case "removed":
      return { event: "removed", fields: { jobId, prev: ev.state !== JobState.UNSPECIFIED ? stateName(ev.state) : prev } };
    case "cleaned":
      return { event: "cleaned", fields: { count: fromUtf8(ev.data) || "0" } };
    case "paused":
    case "resumed":
      return { event: ev.event, fields: {} };
    case "deduplicated":
      return { event: "deduplicated", fields: { jobId, deduplicationId: ev.detail } };
    case "drained": // the queue went idle after a finish (not the admin Drain op)
      return ev.detail === "idle" ? { event: "drained", fields: {} } : null;
    case "duplicated":
      return { event: "duplicated", fields: { jobId } };
    default:
      if (ev.event.startsWith("custom:")) {
        let extra: Record<string, string> = {};
        try {
          extra = JSON.parse(fromUtf8(ev.data) || "{}");
        } catch {
          /* not ours */
        }
        return { event: ev.event.slice(7), fields: extra };
      }
      return null;
  }
}

export class EventReader {
  private entries: StreamEntry[] = [];
  private waiters: (() => void)[] = [];
  private abort: AbortController | null = null;
  private running = false;
  private unavailableUntil = 0;
  private cursorId = "$";
  closed = false;

  constructor(private readonly client: JobsClient, private readonly queue: string) {}

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private readyWaiters: (() => void)[] = [];

  private settleReady(): void {
    const w = this.readyWaiters;
    this.readyWaiters = [];
    for (const f of w) f();
  }

  /** Open the stream from now and wait (up to `ms`) until the server says it is live, so
   * no event committed after this returns is missed (QueueEvents.waitUntilReady). */
  async startAndWait(ms = 3000): Promise<void> {
    if (this.live || this.closed) return;
    const live = new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      this.readyWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
    this.start("$"); // no-op if a read started it already: then wait for its `ready`
    await live;
  }

  private live = false;

  private start(fromId: string): void {
    if (this.running || this.closed || Date.now() < this.unavailableUntil) return;
    this.running = true;
    this.cursorId = fromId;
    const ac = new AbortController();
    this.abort = ac;
    void (async () => {
      try {
        const stream = this.client.watch(
          // QueueEvents reads the events themselves, not their CloudEvents attributes
          { selector: { what: { case: "queue", value: this.queue } }, cursor: idToCursor(this.cursorId), withoutCloudevent: true },
          { signal: ac.signal },
        );
        for await (const msg of stream) {
          if (msg.ready) {
            this.live = true;
            this.settleReady();
          }
          if (msg.item.case !== "event") {
            if (msg.cursor.length) this.cursorId = cursorToId(msg.cursor);
            continue;
          }
          const id = cursorToId(msg.cursor);
          this.cursorId = id;
          const b = bullEvent(msg.item.value);
          if (b) {
            this.entries.push(streamEntry(id, b.event, b.fields));
            this.wake();
          }
        }
      } catch (e) {
        if (isUnimplemented(e)) this.unavailableUntil = Date.now() + RETRY_MS;
        else if (!this.closed && !ac.signal.aborted) this.unavailableUntil = Date.now() + 200;
      } finally {
        this.running = false;
        this.live = false;
        this.settleReady();
        this.wake();
      }
    })();
  }

  /** XREAD-like: the events after `id`, waiting up to `blockMs` for one. */
  async read(id: string, blockMs: number): Promise<StreamEntry[]> {
    if (!this.running) this.start(this.entries.length ? this.cursorId : id === "$" && this.cursorId !== "$" ? this.cursorId : id);
    if (!this.entries.length && !this.closed) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.max(blockMs || 5000, 1));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    const out = this.entries;
    this.entries = [];
    return out;
  }

  close(): void {
    this.closed = true;
    this.abort?.abort();
    this.wake();
  }
}
