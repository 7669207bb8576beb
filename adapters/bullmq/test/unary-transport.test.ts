import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { connect } from "../src/connection.js";
import { EnqueueResponseSchema } from "../src/gen/loam/jobs/v1/jobs_pb.js";
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
});
