/** Starts `loam dev` on a free port with a scratch data directory; used by the test
 * setup, the conformance run, the bench and @loam/durable's tests. */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export function loamBinary(): string {
  return process.env.LOAM_BIN || join(repo, ".venv", "bin", "loam");
}

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => res(port));
    });
    s.on("error", rej);
  });
}

export interface LoamDev {
  url: string;
  stop(): Promise<void>;
}

/** `extra`: more `loam dev` flags (the durable tests shorten its resend timer). */
export async function startLoamDev(...extra: string[]): Promise<LoamDev> {
  const port = await freePort();
  const data = mkdtempSync(join(tmpdir(), "loam-dev-"));
  const proc: ChildProcess = spawn(loamBinary(), ["dev", "--port", String(port), "--data", data, ...extra], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const url = `http://127.0.0.1:${port}`;
  let log = "";
  await new Promise<void>((res, rej) => {
    const t = setTimeout(() => rej(new Error(`loam dev did not start:\n${log}`)), 30_000);
    const on = (b: Buffer) => {
      log += b.toString();
      if (log.includes("ready")) {
        clearTimeout(t);
        res();
      }
    };
    proc.stdout!.on("data", on);
    proc.stderr!.on("data", (b: Buffer) => (log += b.toString()));
    proc.on("exit", (code) => {
      clearTimeout(t);
      rej(new Error(`loam dev exited (${code}):\n${log}`));
    });
  });
  proc.removeAllListeners("exit");
  return {
    url,
    async stop() {
      await new Promise<void>((res) => {
        proc.once("exit", () => res());
        proc.kill("SIGTERM");
        setTimeout(() => proc.kill("SIGKILL"), 5000).unref();
      });
      rmSync(data, { recursive: true, force: true });
    },
  };
}
