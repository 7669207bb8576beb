/**
 * Connect's unary calls as plain HTTP/1.1 on kept-alive sockets of our own: the
 * protocol's simple shape, a POST of the binary message to `<url>/<service>/<method>`,
 * answered by 200 and the binary message or by an error status and Connect's JSON error
 * body.
 *
 * Why not connect-node's transport for these: it runs every call through async
 * iterables, header objects and interceptors. Measured with V8's sampling heap profiler
 * while a BullMQ worker took 50 jobs a second, that was three quarters of what the
 * process allocated, about 60 KB a call; the young-generation collections it caused
 * took ~3.5 ms each and set the p99 of enqueue→start (decision 0021). Why not
 * `http.request` either: its request and response objects, header validation and
 * streams cost ~170–260 µs of CPU a call against ~80–95 µs here (decision 0054). A call
 * writes its head and body in one write and reads one response: a status line, headers,
 * and a body by `content-length`, chunked, or up to the end of the connection. Streams
 * (Watch) still go through connect-node's transport, passed in as `streams`.
 */
import net from "node:net";
import tls from "node:tls";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { DescMessage, DescMethodUnary, MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport, type UnaryResponse } from "@connectrpc/connect";
import { codeFromHttpStatus, errorFromJsonBytes } from "@connectrpc/connect/protocol-connect";

export interface UnaryTransportOptions {
  url: string;
  /** Headers every call carries (authorization or the dev namespace). */
  headers: Record<string, string>;
  streams: Transport;
}

/** Sockets open per transport, in use or idle (a worker's concurrent leases, extends and
 * completions use a few dozen). */
const MAX_SOCKETS = 256;

export function unaryTransport(o: UnaryTransportOptions): Transport {
  const base = new URL(o.url);
  if (base.protocol !== "http:" && base.protocol !== "https:") {
    throw new Error(`@loam/bullmq: the Loam URL must start with http:// or https:// (got ${JSON.stringify(o.url)})`);
  }
  const prefix = base.pathname.replace(/\/+$/, "");
  const fixed =
    `host: ${base.host}\r\ncontent-type: application/proto\r\nconnect-protocol-version: 1\r\n` +
    Object.entries(o.headers)
      .map(([k, v]) => headerLine(k, v))
      .join("");
  const pool = new Pool(base);
  return {
    async unary<I extends DescMessage, O extends DescMessage>(
      method: DescMethodUnary<I, O>,
      signal: AbortSignal | undefined,
      timeoutMs: number | undefined,
      header: HeadersInit | undefined,
      input: MessageInitShape<I>,
    ): Promise<UnaryResponse<I, O>> {
      const body = toBinary(method.input, create(method.input, input));
      let extra = "";
      if (header) new Headers(header).forEach((v, k) => (extra += headerLine(k, v)));
      if (timeoutMs !== undefined && timeoutMs > 0) extra += `connect-timeout-ms: ${Math.ceil(timeoutMs)}\r\n`;
      const head = `POST ${prefix}/${method.parent.typeName}/${method.name} HTTP/1.1\r\n${fixed}${extra}content-length: ${body.byteLength}\r\n\r\n`;
      const res = await pool.exchange(Buffer.concat([Buffer.from(head, "latin1"), body]), signal, timeoutMs);
      const metadata = res.headers;
      if (res.status !== 200) {
        const fallback = new ConnectError(`HTTP ${res.status}`, codeFromHttpStatus(res.status), metadata);
        throw errorFromJsonBytes(res.body, metadata, fallback);
      }
      const message = fromBinary(method.output, res.body);
      return {
        stream: false,
        service: method.parent,
        method,
        message,
        // Made only for a caller that asks (onHeader / onTrailer); the adapter never does.
        get header() {
          return new Headers(metadata);
        },
        get trailer() {
          return new Headers();
        },
      };
    },
    stream: (...args) => o.streams.stream(...args),
  };
}

function headerLine(name: string, value: string): string {
  if (/[\r\n]/.test(name) || /[\r\n]/.test(value) || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) {
    throw new ConnectError(`header ${JSON.stringify(name)} has a character HTTP does not allow`, Code.InvalidArgument);
  }
  return `${name}: ${value}\r\n`;
}

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Uint8Array;
}

/** A socket that went away before any byte of its answer came (a kept-alive one the
 * server closed as the request went out). */
class Stale extends Error {}

/**
 * Kept-alive sockets to one server: an idle one for each call, or a new one, at most
 * MAX_SOCKETS open at once; a call beyond them waits for one to be given back or to close
 * (as http.Agent's maxSockets queued them), within its deadline and abort signal.
 */
class Pool {
  private readonly idle: Conn[] = [];
  private open = 0;
  // Calls waiting for a socket: handed one given back, or undefined: the slot of one
  // that closed, to open a new one in.
  private readonly waiters: ((c: Conn | undefined) => void)[] = [];

  constructor(private readonly base: URL) {}

  async exchange(message: Buffer, signal: AbortSignal | undefined, timeoutMs: number | undefined): Promise<Answer> {
    if (signal?.aborted) throw canceled(signal.reason);
    const deadline = timeoutMs !== undefined && timeoutMs > 0 ? Date.now() + timeoutMs : undefined;
    for (let fresh = false; ; fresh = true) {
      const [conn, reused] = await this.take(fresh, signal, deadline);
      if (signal?.aborted) {
        this.giveBack(conn);
        throw canceled(signal.reason);
      }
      try {
        const left = deadline === undefined ? undefined : Math.max(1, deadline - Date.now());
        const { answer, keep } = await conn.call(message, signal, left);
        if (keep) this.giveBack(conn);
        else conn.close();
        return answer;
      } catch (e) {
        // The server closes only idle connections, so a request that met a closed one
        // was not read: go again once on a fresh socket (every write carries what makes
        // a repeat harmless anyway: a job key, a fencing token).
        if (e instanceof Stale && reused) continue;
        if (e instanceof Stale) throw new ConnectError(e.message, Code.Unavailable, undefined, undefined, e.cause);
        throw e;
      }
    }
  }

  /** A socket for one call, and whether it served calls before. */
  private async take(fresh: boolean, signal: AbortSignal | undefined, deadline: number | undefined): Promise<[Conn, boolean]> {
    if (!fresh) {
      const idle = this.idle.pop();
      if (idle) return [idle, true];
    }
    if (this.open < MAX_SOCKETS) {
      this.open++;
      return [this.dial(), false];
    }
    const given = await this.wait(signal, deadline);
    return given ? [given, true] : [this.dial(), false];
  }

  private dial(): Conn {
    return new Conn(this.base, (c) => this.gone(c));
  }

  /** A socket whose call is answered: to the first waiting call, else idle. */
  private giveBack(conn: Conn): void {
    if (!conn.alive) return; // closed meanwhile: gone() has passed its slot on
    const waiter = this.waiters.shift();
    if (waiter) return waiter(conn);
    conn.rest(); // kept: the sockets open are bounded already
    this.idle.push(conn);
  }

  /** A socket closed (once per socket): its slot passes to a waiting call, or frees. */
  private gone(c: Conn): void {
    const i = this.idle.indexOf(c);
    if (i >= 0) this.idle.splice(i, 1);
    const waiter = this.waiters.shift();
    if (waiter) waiter(undefined);
    else this.open--;
  }

  private wait(signal: AbortSignal | undefined, deadline: number | undefined): Promise<Conn | undefined> {
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        if (timer) clearTimeout(timer);
        if (signal) signal.removeEventListener("abort", onAbort);
      };
      const waiter = (c: Conn | undefined) => {
        done();
        resolve(c);
      };
      const leave = (e: ConnectError) => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        done();
        reject(e);
      };
      const onAbort = () => leave(canceled(signal?.reason));
      signal?.addEventListener("abort", onAbort, { once: true });
      if (deadline !== undefined) {
        timer = setTimeout(() => leave(timedOut()), Math.max(0, deadline - Date.now()));
      }
      this.waiters.push(waiter);
    });
  }
}

interface Pending {
  resolve: (r: { answer: Answer; keep: boolean }) => void;
  reject: (e: unknown) => void;
  timer?: NodeJS.Timeout;
  signal?: AbortSignal;
  onAbort?: () => void;
}

/** One socket: one call at a time, its answer parsed as it comes. */
class Conn {
  private readonly socket: net.Socket;
  private pending?: Pending;
  // The answer so far: its chunks (joined once it is whole, not at every chunk: a
  // large answer comes in many) and its head once that came whole.
  private chunks: Buffer[] = [];
  private received = 0;
  private head?: Head;
  /** Until its socket closes or fails. */
  alive = true;

  constructor(base: URL, onGone: (c: Conn) => void) {
    const port = Number(base.port) || (base.protocol === "https:" ? 443 : 80);
    const host = base.hostname.replace(/^\[|\]$/g, "");
    this.socket =
      base.protocol === "https:"
        ? tls.connect({ host, port, servername: net.isIP(host) ? undefined : host })
        : net.connect({ host, port });
    this.socket.setNoDelay(true);
    this.socket.setKeepAlive(true, 10_000);
    this.socket.on("data", (chunk: Buffer) => this.onData(chunk));
    const gone = (e?: Error) => {
      if (this.alive) {
        this.alive = false;
        onGone(this);
      }
      this.fail(e);
    };
    this.socket.on("error", gone);
    this.socket.on("close", () => gone());
  }

  call(message: Buffer, signal: AbortSignal | undefined, timeoutMs: number | undefined): Promise<{ answer: Answer; keep: boolean }> {
    return new Promise((resolve, reject) => {
      const p: Pending = { resolve, reject, signal };
      if (signal) {
        p.onAbort = () => this.abort(canceled(signal.reason));
        signal.addEventListener("abort", p.onAbort, { once: true });
      }
      if (timeoutMs !== undefined && timeoutMs > 0) {
        p.timer = setTimeout(() => this.abort(timedOut()), timeoutMs);
      }
      this.pending = p;
      this.chunks = [];
      this.received = 0;
      this.head = undefined;
      this.socket.ref();
      this.socket.write(message);
    });
  }

  /** Idle in the pool: it keeps no process alive. */
  rest(): void {
    this.socket.unref();
  }

  close(): void {
    this.socket.destroy();
  }

  private settle(): Pending | undefined {
    const p = this.pending;
    this.pending = undefined;
    if (p?.timer) clearTimeout(p.timer);
    if (p?.onAbort) p.signal?.removeEventListener("abort", p.onAbort);
    return p;
  }

  /** Aborted or timed out: the socket closes, so the server sees its client go. */
  private abort(e: ConnectError): void {
    const p = this.settle();
    this.socket.destroy();
    p?.reject(e);
  }

  private fail(e?: Error): void {
    const p = this.settle();
    if (!p) return;
    if (this.received === 0) {
      const s = new Stale(`the connection to Loam closed before its answer${e ? `: ${e.message}` : ""}`);
      s.cause = e;
      p.reject(s);
      return;
    }
    if (!e) {
      const answer = this.untilClose();
      if (answer) return p.resolve({ answer, keep: false });
    }
    p.reject(new ConnectError(`the connection to Loam broke mid-answer${e ? `: ${e.message}` : ""}`, Code.Unavailable, undefined, undefined, e));
  }

  private onData(chunk: Buffer): void {
    if (!this.pending) {
      this.socket.destroy(); // bytes nobody asked for: this connection is out of step
      return;
    }
    this.received += chunk.length;
    this.chunks.push(chunk);
    let parsed: { answer: Answer; keep: boolean; rest: Buffer } | undefined;
    try {
      this.head ??= parseHead(this.joined());
      const h = this.head;
      if (!h || (h.length !== undefined && this.received < h.end + h.length)) return;
      parsed = parseBody(this.joined(), h);
    } catch (e) {
      this.abort(new ConnectError(`Loam's answer is not HTTP/1.1: ${(e as Error).message}`, Code.Unavailable));
      return;
    }
    if (!parsed) return;
    this.chunks = [];
    const p = this.settle();
    const keep = parsed.keep && parsed.rest.length === 0;
    p?.resolve({ answer: parsed.answer, keep });
  }

  private joined(): Buffer {
    if (this.chunks.length !== 1) this.chunks = [Buffer.concat(this.chunks, this.received)];
    return this.chunks[0];
  }

  /** An answer whose body ran to the end of the connection, if its head came whole. */
  private untilClose(): Answer | undefined {
    const h = this.head;
    if (!h || h.length !== undefined || h.chunked) return undefined;
    return { status: h.status, headers: h.headers, body: this.joined().subarray(h.end) };
  }
}

interface Head {
  status: number;
  headers: Record<string, string>;
  end: number; // where the body starts
  length?: number;
  chunked: boolean;
  keep: boolean;
}

/** The answer's head, once it came whole (a 1xx interim answer is skipped). */
function parseHead(buf: Buffer): Head | undefined {
  let start = 0;
  for (;;) {
    const end = buf.indexOf("\r\n\r\n", start);
    if (end < 0) return undefined;
    const lines = buf.toString("latin1", start, end).split("\r\n");
    const m = /^HTTP\/1\.([01]) (\d{3})/.exec(lines[0]);
    if (!m) throw new Error(`status line ${JSON.stringify(lines[0].slice(0, 80))}`);
    const status = Number(m[2]);
    if (status >= 100 && status < 200) {
      start = end + 4;
      continue;
    }
    const headers: Record<string, string> = {};
    for (let i = 1; i < lines.length; i++) {
      const colon = lines[i].indexOf(":");
      if (colon > 0) headers[lines[i].slice(0, colon).trim().toLowerCase()] = lines[i].slice(colon + 1).trim();
    }
    const connection = (headers["connection"] ?? "").toLowerCase();
    const chunked = /chunked/i.test(headers["transfer-encoding"] ?? "");
    const length = !chunked && headers["content-length"] !== undefined ? Number(headers["content-length"]) : undefined;
    if (length !== undefined && !(length >= 0)) throw new Error(`content-length ${headers["content-length"]}`);
    const keep = m[1] === "1" ? !/\bclose\b/.test(connection) : /\bkeep-alive\b/.test(connection);
    return { status, headers, end: end + 4, length, chunked, keep: keep && (chunked || length !== undefined) };
  }
}

/** The whole answer, once it came, and what followed it; undefined while it is coming. */
function parseBody(buf: Buffer, h: Head): { answer: Answer; keep: boolean; rest: Buffer } | undefined {
  if (h.length !== undefined) {
    if (buf.length < h.end + h.length) return undefined;
    const body = buf.subarray(h.end, h.end + h.length);
    return { answer: { status: h.status, headers: h.headers, body }, keep: h.keep, rest: buf.subarray(h.end + h.length) };
  }
  if (!h.chunked) return undefined; // up to the end of the connection
  const parts: Buffer[] = [];
  let at = h.end;
  for (;;) {
    const eol = buf.indexOf("\r\n", at);
    if (eol < 0) return undefined;
    const size = parseInt(buf.toString("latin1", at, eol).split(";", 1)[0], 16);
    if (!(size >= 0)) throw new Error("chunk size");
    if (size === 0) {
      const end = buf.indexOf("\r\n\r\n", eol); // after the trailers, if any: an empty line
      if (end < 0) return undefined;
      return { answer: { status: h.status, headers: h.headers, body: Buffer.concat(parts) }, keep: h.keep, rest: buf.subarray(end + 4) };
    }
    if (buf.length < eol + 2 + size + 2) return undefined;
    parts.push(buf.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}

function timedOut(): ConnectError {
  return new ConnectError("the operation timed out", Code.DeadlineExceeded);
}

function canceled(reason: unknown): ConnectError {
  return new ConnectError("This operation was aborted", Code.Canceled, undefined, undefined, reason);
}
