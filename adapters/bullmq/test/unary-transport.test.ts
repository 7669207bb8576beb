import http from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { connect } from "../src/connection.js";
import { qname } from "./helpers.js";

// The Connect client every backend uses: unary calls on plain http.request (unary-transport.ts).
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
});
