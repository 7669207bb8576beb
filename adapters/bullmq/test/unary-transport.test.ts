import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { connect } from "../src/connection.js";
import { EnqueueResponseSchema } from "../src/gen/loam/jobs/v1/jobs_pb.js";
import { qname } from "./helpers.js";

/** A server speaking HTTP/1.1 by hand: `answer(n, socket)` for the n-th request (from 1)
 * of each connection, in the order connections came; a request is its head and a body
 * of its content-length. */
async function rawServer(answer: (conn: number, n: number, socket: net.Socket) => void) {
  let conns = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    const conn = ++conns;
    sockets.add(socket);
    let n = 0;
    let buf = Buffer.alloc(0);
    socket.on("data", (c: Buffer) => {
      buf = Buffer.concat([buf, c]);
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const len = Number(/content-length: *(\d+)/i.exec(buf.toString("latin1", 0, end))?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        buf = buf.subarray(end + 4 + len);
        answer(conn, ++n, socket);
      }
    });
    socket.on("error", () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => conns,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(r));
    },
  };
}

const reply = (job: string) => Buffer.from(toBinary(EnqueueResponseSchema, create(EnqueueResponseSchema, { enqueued: { job, created: true } })));

// The Connect client every backend uses: unary calls on kept-alive sockets (unary-transport.ts).
describe("unary calls", () => {
  const client = () => connect({ namespace: "transport" }).client;

  it("answer the message, and the server's refusal as a ConnectError with its code and words", async () => {
    const queue = qname();
    const res = await client().enqueue({ queue, task: { name: "t" } });
    expect(res.enqueued?.job).toBeTruthy();
    const err = await client()
      .enqueue({ queue: "no/slash", task: { name: "t" } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
    expect((err as ConnectError).rawMessage).toMatch(/queue/);
  });

  it("refuse a URL that is not http or https when the connection is made", () => {
    expect(() => connect({ url: "localhost:7720", namespace: "transport" })).toThrow(/http:\/\/ or https:\/\//);
  });

  it("give an HTTP error without Connect's body the code of its status", async () => {
    const server = http.createServer((_req, res) => {
      res.writeHead(503, { "content-type": "text/html" });
      res.end("<html>down for maintenance</html>");
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const port = (server.address() as { port: number }).port;
      const c = connect({ url: `http://127.0.0.1:${port}`, namespace: "transport" }).client;
      const err = await c.enqueue({ queue: "q", task: { name: "t" } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.Unavailable); // 503
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("stop a long poll at once when aborted, and the connection serves the next call", async () => {
    const queue = qname();
    const ac = new AbortController();
    const started = Date.now();
    const poll = client()
      .lease({ queues: [queue], worker: "w", max: 1, waitNs: 20_000_000_000n }, { signal: ac.signal })
      .catch((e: unknown) => e);
    setTimeout(() => ac.abort(), 100);
    const err = await poll;
    expect(Date.now() - started).toBeLessThan(5000);
    expect((err as ConnectError).code).toBe(Code.Canceled);
    // The abandoned poll took nothing: a job added now is leased by the next call.
    await client().enqueue({ queue, task: { name: "t" } });
    const got = await client().lease({ queues: [queue], worker: "w", max: 1 });
    expect(got.leases).toHaveLength(1);
  });

  it("time out with DeadlineExceeded and tell the server the deadline", async () => {
    let seen: string | undefined;
    const server = http.createServer((req) => {
      seen = req.headers["connect-timeout-ms"] as string;
      // never answers
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const port = (server.address() as { port: number }).port;
      const c = connect({ url: `http://127.0.0.1:${port}`, namespace: "transport" }).client;
      const err = await c.enqueue({ queue: "q", task: { name: "t" } }, { timeoutMs: 200 }).catch((e: unknown) => e);
      expect((err as ConnectError).code).toBe(Code.DeadlineExceeded);
      expect(seen).toBe("200");
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("go over TLS to an https URL", async () => {
    const dir = mkdtempSync(join(tmpdir(), "loam-tls-"));
    execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
      "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1"], { stdio: "ignore" }); // prettier-ignore
    let path: string | undefined;
    const reply = toBinary(EnqueueResponseSchema, create(EnqueueResponseSchema, { enqueued: { job: "j1", created: true } }));
    const server = https.createServer(
      { key: readFileSync(join(dir, "key.pem")), cert: readFileSync(join(dir, "cert.pem")) },
      (req, res) => {
        path = req.url;
        req.resume().on("end", () => {
          res.writeHead(200, { "content-type": "application/proto" });
          res.end(reply);
        });
      },
    );
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const before = process.env.NODE_TLS_REJECT_UNAUTHORIZED;
    process.env.NODE_TLS_REJECT_UNAUTHORIZED = "0"; // the certificate is self-signed
    try {
      const port = (server.address() as { port: number }).port;
      const c = connect({ url: `https://127.0.0.1:${port}/prefix`, namespace: "transport" }).client;
      const res = await c.enqueue({ queue: "q", task: { name: "t" } });
      expect(res.enqueued?.job).toBe("j1");
      expect(path).toBe("/prefix/loam.jobs.v1.JobsService/Enqueue");
    } finally {
      if (before === undefined) delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
      else process.env.NODE_TLS_REJECT_UNAUTHORIZED = before;
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("read an answer in chunks, and one whose body runs to the end of the connection", async () => {
    const body = reply("chunked");
    const server = await rawServer((_conn, _n, socket) => {
      const half = body.length >> 1; // in three writes: the head, then a chunk and a half each
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: application/proto\r\ntransfer-encoding: chunked\r\n\r\n");
      socket.write(Buffer.concat([Buffer.from(`${half.toString(16)}\r\n`), body.subarray(0, half), Buffer.from(`\r\n${(body.length - half).toString(16)};x=1\r\n`)]));
      socket.write(Buffer.concat([body.subarray(half), Buffer.from("\r\n0\r\nx-trailer: 1\r\n\r\n")]));
    });
    try {
      const c = connect({ url: server.url, namespace: "raw-chunks" }).client;
      expect((await c.enqueue({ queue: "q", task: { name: "t" } })).enqueued?.job).toBe("chunked");
      // A chunked answer keeps its connection: the second call went on the same socket.
      expect((await c.enqueue({ queue: "q", task: { name: "t" } })).enqueued?.job).toBe("chunked");
      expect(server.connections()).toBe(1);
    } finally {
      await server.close();
    }
    const ended = await rawServer((_conn, _n, socket) => {
      socket.end(Buffer.concat([Buffer.from("HTTP/1.0 200 OK\r\ncontent-type: application/proto\r\n\r\n"), reply("to-the-end")]));
    });
    try {
      const c = connect({ url: ended.url, namespace: "raw-ended" }).client;
      for (let i = 0; i < 2; i++) expect((await c.enqueue({ queue: "q", task: { name: "t" } })).enqueued?.job).toBe("to-the-end");
      expect(ended.connections()).toBe(2); // such a connection is not used again
    } finally {
      await ended.close();
    }
  });

  it("read a large answer that comes in many pieces", async () => {
    const big = reply("j".repeat(1 << 20));
    const server = await rawServer((_conn, _n, socket) => {
      socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${big.length}\r\n\r\n`);
      for (let at = 0; at < big.length; at += 4096) socket.write(big.subarray(at, at + 4096));
    });
    try {
      const c = connect({ url: server.url, namespace: "raw-big" }).client;
      for (let i = 0; i < 2; i++) expect((await c.enqueue({ queue: "q", task: { name: "t" } })).enqueued?.job).toHaveLength(1 << 20);
      expect(server.connections()).toBe(1);
    } finally {
      await server.close();
    }
  });

  it("go again once on a fresh socket when a kept-alive one closes before its answer", async () => {
    const seen: string[] = [];
    const server = await rawServer((conn, n, socket) => {
      seen.push(`${conn}.${n}`);
      if (conn === 1 && n === 2) return socket.destroy(); // as a server closing an idle connection
      const body = reply(`c${conn}`);
      socket.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`), body]));
    });
    try {
      const c = connect({ url: server.url, namespace: "raw-stale" }).client;
      expect((await c.enqueue({ queue: "q", task: { name: "t" } })).enqueued?.job).toBe("c1");
      expect((await c.enqueue({ queue: "q", task: { name: "t" } })).enqueued?.job).toBe("c2");
      expect(seen).toEqual(["1.1", "1.2", "2.1"]);
      // A fresh socket that closes before its answer is not tried again: Unavailable.
      const dead = await rawServer((_conn, _n, socket) => socket.destroy());
      try {
        const d = connect({ url: dead.url, namespace: "raw-dead" }).client;
        const err = await d.enqueue({ queue: "q", task: { name: "t" } }).catch((e: unknown) => e);
        expect((err as ConnectError).code).toBe(Code.Unavailable);
        expect(dead.connections()).toBe(1);
      } finally {
        await dead.close();
      }
    } finally {
      await server.close();
    }
  });

  it("open at most 256 sockets at once, the calls beyond waiting for one within their deadline", async () => {
    const held: net.Socket[] = [];
    let hold = true;
    const answer = (socket: net.Socket) => {
      const body = reply("ok");
      socket.write(Buffer.concat([Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`), body]));
    };
    const server = await rawServer((_conn, _n, socket) => (hold ? held.push(socket) : answer(socket)));
    try {
      const c = connect({ url: server.url, namespace: "raw-many" }).client;
      const first = Array.from({ length: 300 }, () => c.enqueue({ queue: "q", task: { name: "t" } }));
      for (let i = 0; i < 100 && held.length < 256; i++) await new Promise((r) => setTimeout(r, 20));
      expect(held).toHaveLength(256); // the other 44 wait for a socket
      const late = await c.enqueue({ queue: "q", task: { name: "t" } }, { timeoutMs: 200 }).catch((e: unknown) => e);
      expect((late as ConnectError).code).toBe(Code.DeadlineExceeded);
      hold = false;
      for (const s of held) answer(s);
      const done = await Promise.all(first);
      expect(done.every((r) => r.enqueued?.job === "ok")).toBe(true);
      expect(server.connections()).toBe(256);
    } finally {
      await server.close();
    }
  });

  it("refuse a token that would break the request when the connection is made", async () => {
    const server = await rawServer(() => undefined);
    try {
      expect(() => connect({ url: server.url, token: "loam_x_y\r\nx-evil: 1" })).toThrow(/authorization/);
      expect(server.connections()).toBe(0);
    } finally {
      await server.close();
    }
  });
});
