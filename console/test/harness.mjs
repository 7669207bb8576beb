// One `loam dev` (auth on, a scratch data directory, a free port) with real jobs made by
// seed.py through the Python SDK, and one Debian Chromium driven by playwright-core:
// started once for every console test.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "..", "..");
export const python = process.env.LOAM_PYTHON || join(repo, ".venv", "bin", "python");
const run = promisify(execFile);
const require = createRequire(import.meta.url);
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const SHOTS = process.env.CONSOLE_SCREENSHOTS; // a directory: save the main pages there
export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 390, height: 844 };

async function freePort() {
  return new Promise((res, rej) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
    s.on("error", rej);
  });
}

export async function startServer({ auth = true, args = [] } = {}) {
  const port = await freePort();
  const data = mkdtempSync(join(tmpdir(), "loam-console-"));
  const proc = spawn(python, ["-m", "loam_gateway.dev", "--host", "127.0.0.1", "--port", String(port), "--data", data, ...(auth ? ["--auth"] : []), ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("LOAM_"))),
  });
  let log = "";
  await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`loam dev did not start:\n${log}`)), 30_000);
    proc.stdout.on("data", (b) => {
      log += b;
      if (log.includes("ready")) {
        clearTimeout(timer);
        res();
      }
    });
    proc.stderr.on("data", (b) => (log += b));
    proc.on("exit", (code) => {
      clearTimeout(timer);
      rej(new Error(`loam dev exited (${code}):\n${log}`));
    });
  });
  proc.removeAllListeners("exit");
  const url = `http://127.0.0.1:${port}`;
  const seed = async (...args) => JSON.parse((await run(python, [join(here, "seed.py"), ...args])).stdout);
  const tokens = auth ? await seed("tokens", data) : {};
  return {
    url,
    data,
    tokens,
    seedJobs: (token, prefix) => seed("jobs", url, token, prefix),
    /** `ok` jobs completed and `failed` failed in `queue`, by a worker through the SDK. */
    work: (token, queue, ok, failed) => seed("work", url, token, queue, String(ok), String(failed)),
    /** `n` jobs in `queue` through the SDK's bulk enqueue (Connect), 1,000 a call. */
    bulk: (token, queue, n) => seed("bulk", url, token, queue, String(n)),
    async stop() {
      await new Promise((res) => {
        proc.once("exit", res);
        proc.kill("SIGTERM");
        setTimeout(() => proc.kill("SIGKILL"), 10_000).unref();
      });
      rmSync(data, { recursive: true, force: true });
    },
  };
}

export async function startBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
}

/** A REST call as a client other than the page (the test's own hands). */
export async function rest(server, token, method, path, body) {
  const resp = await fetch(server.url + path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await resp.text();
  return { status: resp.status, body: text ? JSON.parse(text) : null };
}

/**
 * A new browser context at `viewport`, opened on `path` and signed in with `token`: the
 * one sign-in every console test starts from. Dialogs are accepted (a prompt with its
 * default value); the page's uncaught errors are kept in `page.errors`.
 */
export async function signedIn(browser, server, token, { path = "/console/", viewport = DESKTOP } = {}) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  page.on("dialog", (d) => (d.type() === "prompt" ? d.accept(d.defaultValue()) : d.accept()));
  const errors = [];
  page.on("pageerror", (e) => errors.push(e));
  page.errors = errors;
  await page.goto(server.url + path);
  await page.locator("#token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator("[data-testid=namespace]").waitFor();
  return page;
}

/** axe-core over the page: no serious or critical violation. */
export async function axe(page, label) {
  await page.addScriptTag({ content: AXE });
  const result = await page.evaluate(async () => await window.axe.run(document, { resultTypes: ["violations"] }));
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(bad.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`), [],
    `${label}: accessibility violations`);
}

/** Save the page as docs' screenshot `name` when CONSOLE_SCREENSHOTS names a directory. */
export async function shot(page, name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: false });
}
