/** An event stream (`GET /v1/queues/{queue}/events`, or `GET /v1/events?queue=..` for
 * several queues at once; Server-Sent Events) read with fetch, so the bearer token goes in a header (EventSource cannot send one). While the
 * tab is hidden the stream is closed; when it shows again it resumes from the last
 * cursor, so no event is missed or repeated. A dropped stream reconnects from its cursor
 * after a short back-off. */
import { headers } from "./api";

export interface StreamEvent {
  type: string; // "snapshot", "ready" or the CloudEvent type (io.loams.dev.jobs.<name>.v1)
  data: any;
}

export interface LiveStatus {
  (connected: boolean): void;
}

export class EventStream {
  private cursor: string | null = null;
  private abort: AbortController | null = null;
  private stopped = false;
  private retryMs = 500;
  private readonly onVisibility = () => (document.hidden ? this.close() : this.open());

  constructor(
    private readonly path: string,
    private readonly query: URLSearchParams,
    private readonly onEvent: (e: StreamEvent) => void,
    private readonly onStatus: LiveStatus = () => {},
  ) {
    document.addEventListener("visibilitychange", this.onVisibility);
    if (!document.hidden) this.open();
  }

  stop(): void {
    this.stopped = true;
    document.removeEventListener("visibilitychange", this.onVisibility);
    this.close();
  }

  private close(): void {
    this.abort?.abort();
    this.abort = null;
    this.onStatus(false);
  }

  private async open(): Promise<void> {
    if (this.stopped || this.abort) return;
    const abort = (this.abort = new AbortController());
    const params = new URLSearchParams(this.query);
    params.set("data", "json");
    if (this.cursor) params.set("cursor", this.cursor);
    try {
      const resp = await fetch(`${this.path}?${params}`, {
        headers: headers({ accept: "text/event-stream" }),
        signal: abort.signal,
      });
      if (!resp.ok || !resp.body) throw new Error(`HTTP ${resp.status}`);
      this.onStatus(true);
      this.retryMs = 500;
      await this.read(resp.body.getReader());
    } catch {
      /* aborted, or dropped: reconnect below unless stopped or hidden */
    }
    if (this.abort === abort) {
      this.abort = null;
      this.onStatus(false);
      if (!this.stopped && !document.hidden) {
        setTimeout(() => this.open(), this.retryMs);
        this.retryMs = Math.min(this.retryMs * 2, 10_000);
      }
    }
  }

  private async read(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        this.dispatch(buf.slice(0, end));
        buf = buf.slice(end + 2);
      }
    }
  }

  private dispatch(block: string): void {
    let type = "message", id: string | null = null;
    const data: string[] = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("id: ")) id = line.slice(4);
      else if (line.startsWith("event: ")) type = line.slice(7);
      else if (line.startsWith("data: ")) data.push(line.slice(6));
    }
    if (id) this.cursor = id;
    if (!data.length) return; // a heartbeat: only the cursor moves
    let parsed: any = null;
    try {
      parsed = JSON.parse(data.join("\n"));
    } catch {
      return;
    }
    this.onEvent({ type, data: parsed });
  }
}

/** One queue's events. */
export function queueStream(queue: string, onEvent: (e: StreamEvent) => void, onStatus?: LiveStatus): EventStream {
  return new EventStream(`/v1/queues/${encodeURIComponent(queue)}/events`, new URLSearchParams(), onEvent, onStatus);
}

/** The events of several queues in one stream (the server takes up to MAX_QUEUES). */
export const MAX_QUEUES = 50;
export function queuesStream(queues: string[], onEvent: (e: StreamEvent) => void, onStatus?: LiveStatus): EventStream {
  const query = new URLSearchParams();
  for (const q of queues.slice(0, MAX_QUEUES)) query.append("queue", q);
  return new EventStream("/v1/events", query, onEvent, onStatus);
}
