// The console end to end: a real `loam dev` with auth on, real jobs, Debian's Chromium.
// Every page and action, live updates without a reload, the roles (a viewer cannot
// retry; namespace A's token sees nothing of B), desktop and phone widths, dark mode,
// the keyboard, and axe-core with no serious violations.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { axe, DESKTOP, PHONE, rest, shot, signedIn as signIn, startBrowser, startServer } from "./harness.mjs";

let server, browser, admin, viewer, adminB, ids;

const signedIn = (token, viewport = DESKTOP, path = "/console/") => signIn(browser, server, token, { path, viewport });

/** Wait until `read()` returns `want` (the page settles after a navigation or a push). */
async function settles(read, want, label = "value", ms = 10_000) {
  const end = Date.now() + ms;
  let got;
  while (Date.now() < end) {
    got = await read();
    if (got === want) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(got, want, `${label} did not settle`);
}

const rows = (page) => () => page.locator("tbody tr").count();

const cell = (page, queue, count) => page.locator(`tr[data-queue="${queue}"] td[data-count="${count}"]`);

before(async () => {
  [server, browser] = await Promise.all([startServer(), startBrowser()]);
  ({ admin_a: admin, viewer_a: viewer, admin_b: adminB } = server.tokens);
  ids = await server.seedJobs(admin, "");
  await server.seedJobs(adminB, "b-"); // namespace team-b has its own queues
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

describe("sign-in", () => {
  test("a deep link asks for a token, refuses a bad one, then lands where it pointed", async () => {
    const context = await browser.newContext({ viewport: DESKTOP });
    const page = await context.newPage();
    await page.goto(`${server.url}/console/queues/emails?state=failed`);
    await page.locator("#token").fill("loam_0000000000000000_" + "0".repeat(64));
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("alert").filter({ hasText: "invalid" }).waitFor();
    await page.locator("#token").fill(admin);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.locator(`tr[data-job="${ids.failed}"]`).waitFor();
    assert.match(page.url(), /\/console\/queues\/emails\?state=failed$/);
    const stored = await page.evaluate(() => ({ session: sessionStorage.getItem("loam.token"), cookies: document.cookie }));
    assert.equal(stored.session, admin);
    assert.equal(stored.cookies, "");
    await context.close();
  });
});

describe("pages", () => {
  test("the queue list shows counts, paused, depth and the oldest waiting age; the filter is in the URL", async () => {
    const page = await signedIn(admin);
    await cell(page, "emails", "waiting").waitFor();
    assert.equal(await cell(page, "emails", "waiting").textContent(), "4"); // 3 waiting + 1 prioritized
    assert.equal(await cell(page, "emails", "failed").textContent(), "1");
    assert.equal(await cell(page, "emails", "depth").textContent(), "5");
    // The ages come from a second read after the counts: wait for them.
    await page.locator('tr[data-queue="emails"] td:last-child', { hasText: /\d+(\.\d)? (s|ms|min)/ }).waitFor();
    await shot(page, "queues");
    await axe(page, "queue list");
    await page.locator("#queue-filter").fill("orders");
    await page.waitForURL(/\?q=orders$/);
    await settles(rows(page), 2, "rows");
    await page.locator('tr[data-queue="orders-dlq"]').waitFor();
    await page.reload();
    assert.equal(await page.locator("#queue-filter").inputValue(), "orders");
    await page.context().close();
  });

  test("a queue's jobs by state, with cursor paging over deep links", async () => {
    const bulk = Array.from({ length: 120 }, (_, i) => i);
    for (const i of bulk) await rest(server, admin, "POST", "/v1/queues/paging/jobs", { name: "n", data: { i } });
    const page = await signedIn(admin, DESKTOP, "/console/queues/paging?state=waiting");
    await settles(rows(page), 50, "rows");
    assert.equal(await page.locator("[data-testid=count-waiting]").textContent(), "120");
    // worker health: a backlog and no worker ever
    assert.match(await page.locator("[data-testid=no-workers]").textContent(), /120 jobs are ready but no worker/);
    const first = await page.locator("tbody tr").first().getAttribute("data-job");
    await page.getByRole("link", { name: "Next page" }).click();
    await page.waitForURL(/cursor=/);
    await page.locator(`tr[data-job="${first}"]`).waitFor({ state: "detached" });
    await settles(rows(page), 50, "rows");
    const second = await page.locator("tbody tr").first().getAttribute("data-job");
    const deep = page.url();
    await page.getByRole("link", { name: "Next page" }).click();
    await page.locator(`tr[data-job="${second}"]`).waitFor({ state: "detached" });
    await settles(rows(page), 20, "rows");
    assert.equal(await page.getByRole("link", { name: "Next page" }).count(), 0);
    await page.goto(deep); // a deep link to page 2 shows page 2
    await page.locator(`tr[data-job="${second}"]`).waitFor();
    await page.context().close();
  });

  test("the failed tab and a job's detail: payload, errors with stack traces, timeline", async () => {
    const page = await signedIn(admin, DESKTOP, "/console/queues/emails?state=failed");
    await page.locator(`tr[data-job="${ids.failed}"]`).waitFor();
    assert.equal(await page.locator("[data-testid=no-workers]").count(), 0); // worker-1 and -2 just leased
    await shot(page, "queue");
    await axe(page, "queue page");
    await page.locator(`tr[data-job="${ids.failed}"] a`).first().click();
    await page.getByRole("heading", { name: `Job ${ids.failed}` }).waitFor();
    assert.equal(await page.locator("[data-testid=job-state]").textContent(), "failed");
    const errors = page.locator("section[aria-labelledby=h-errors] details");
    assert.equal(await errors.count(), 2);
    assert.match(await errors.nth(1).locator("pre").textContent(), /ValueError: card declined \(attempt 2\)/);
    assert.match(await errors.nth(1).locator("pre").textContent(), /Traceback/);
    assert.match(await page.locator("section[aria-labelledby=h-payload] pre").textContent(), /bob@example.com/);
    assert.match(await page.locator("ol[aria-label=Timeline]").textContent(), /attempt 1 failed/);
    await shot(page, "job");
    await axe(page, "job page");
    await page.context().close();
  });

  test("server-side search by error text, as chips in the URL, saved as a view", async () => {
    const page = await signedIn(admin, DESKTOP, "/console/queues/emails?state=failed");
    await page.locator("#text-filter").fill("declined (attempt 2");
    await page.locator("#text-field").selectOption("error");
    await page.getByRole("button", { name: "Search" }).click();
    await page.waitForURL(/text=declined/);
    await page.locator(`tr[data-job="${ids.failed}"]`).waitFor();
    const chip = page.getByRole("link", { name: /Remove filter error: declined/ });
    await chip.waitFor();
    await page.getByRole("button", { name: "Save view" }).click();
    await page.locator("#toast").filter({ hasText: "Saved view" }).waitFor();
    // nothing matches elsewhere: an empty state, not an error
    await page.goto(`${server.url}/console/queues/emails?state=waiting&text=declined&in=error`);
    await page.getByText(/No waiting jobs matching/).waitFor();
    await page.goto(`${server.url}/console/queues/emails?state=failed&text=declined&in=error`);
    await chip.click();
    await page.waitForURL((u) => !u.search.includes("text="));
    await page.getByRole("link", { name: "Queues" }).first().click();
    await page.getByRole("navigation", { name: "Saved views" }).getByRole("link").first().click();
    await page.locator(`tr[data-job="${ids.failed}"]`).waitFor();
    assert.match(page.url(), /state=failed.*text=declined/);
    await page.context().close();
  });

  test("a completed job shows its result, progress and logs", async () => {
    const page = await signedIn(admin, DESKTOP, `/console/queues/emails/jobs/${ids.completed}`);
    await page.getByRole("heading", { name: `Job ${ids.completed}` }).waitFor();
    assert.match(await page.locator("section[aria-labelledby=h-result] pre").textContent(), /m-1/);
    assert.match(await page.locator("pre[aria-label=Logs]").textContent(), /rendered the template[\s\S]*handed to the mail server/);
    assert.match(await page.locator("section", { hasText: "Progress" }).locator("pre").textContent(), /100/);
    await page.context().close();
  });

  test("a flow: the child links its parent, the parent lists its children", async () => {
    const { status, body } = await rest(server, admin, "POST", "/v1/flows", { id: "report-flow", nodes: [
      { id: "report", queue: "reports", name: "assemble", depends_on: ["part"] },
      { id: "part", queue: "parts", name: "render", data: { page: 1 }, depends_on: ["leaf"] },
      { id: "leaf", queue: "parts", name: "fetch" },
    ] });
    assert.equal(status, 200, JSON.stringify(body));
    const page = await signedIn(admin, DESKTOP, `/console/queues/parts/jobs/${body.jobs.part}`);
    await page.locator("[data-testid=parents]").getByRole("link").click();
    await page.getByRole("heading", { name: `Job ${body.jobs.report}` }).waitFor();
    assert.equal(await page.locator("[data-testid=job-state]").textContent(), "waiting-children");
    await page.getByRole("link", { name: `parts / ${body.jobs.part}` }).waitFor();
    assert.match(await page.locator("dl.kv").textContent(), /0 of 1 finished/);
    // the tree reads a level when it is opened
    assert.equal(await page.locator(`[data-child="${body.jobs.leaf}"]`).count(), 0);
    await page.locator(`[data-child="${body.jobs.part}"] > details > summary`).click();
    await page.locator(`[data-child="${body.jobs.leaf}"]`).waitFor();
    await page.context().close();
  });

  test("schedules with their next and last run; workers with the jobs they hold", async () => {
    const page = await signedIn(admin, DESKTOP, "/console/schedules");
    const row = page.locator('tr[data-schedule="nightly-report"]');
    await row.waitFor();
    assert.match(await row.textContent(), /every 1 h/);
    assert.match(await row.textContent(), /never/);
    await shot(page, "schedules");
    await axe(page, "schedules");
    await page.getByRole("link", { name: "Workers" }).click();
    const w2 = page.locator('tr[data-worker="worker-2"]');
    await w2.waitFor();
    assert.match(await w2.textContent(), new RegExp(ids.active));
    assert.equal(await page.locator('tr[data-worker="worker-1"]').count(), 1);
    await shot(page, "workers");
    await axe(page, "workers");
    await page.context().close();
  });

  test("an unknown address says so", async () => {
    const page = await signedIn(admin, DESKTOP, "/console/nowhere");
    await page.getByRole("heading", { name: "Not found" }).waitFor();
    await page.context().close();
  });
});

describe("actions", () => {
  test("retry, promote, cancel, change priority and remove a job", async () => {
    const page = await signedIn(admin, DESKTOP, `/console/queues/emails/jobs/${ids.failed}`);
    await page.getByRole("button", { name: `Retry job ${ids.failed}` }).click();
    await page.locator("[data-testid=job-state]").filter({ hasText: /waiting|active/ }).waitFor();

    await page.goto(`${server.url}/console/queues/emails/jobs/${ids.delayed}`);
    await page.getByRole("button", { name: `Promote job ${ids.delayed}` }).click();
    await page.locator("[data-testid=job-state]").filter({ hasText: "waiting" }).waitFor();

    await page.goto(`${server.url}/console/queues/emails/jobs/${ids.waiting0}`);
    await page.locator("#priority").fill("7");
    await page.getByRole("button", { name: "Change priority" }).click();
    await page.locator("[data-testid=job-state]").filter({ hasText: "prioritized" }).waitFor();
    assert.equal((await rest(server, admin, "GET", `/v1/queues/emails/jobs/${ids.waiting0}`)).body.job.priority, 7);

    await page.getByRole("button", { name: `Cancel job ${ids.waiting0}` }).click();
    await page.locator("[data-testid=job-state]").filter({ hasText: "canceled" }).waitFor();

    await page.getByRole("button", { name: `Remove job ${ids.waiting0}` }).click();
    await page.waitForURL(/\/console\/queues\/emails$/);
    assert.equal((await rest(server, admin, "GET", `/v1/queues/emails/jobs/${ids.waiting0}`)).status, 404);

    // edit the payload of a dead-lettered job, then retry it
    await page.goto(`${server.url}/console/queues/orders/jobs/${ids.dead}`);
    await page.getByText("Edit the payload, then retry").click();
    await page.locator("#new-payload").fill("{not json");
    await page.getByRole("button", { name: "Save and retry" }).click();
    await page.getByRole("alert").filter({ hasText: "Not JSON" }).waitFor();
    await page.locator("#new-payload").fill('{"order": 7, "card": "replaced"}');
    await page.getByRole("button", { name: "Save and retry" }).click();
    await page.locator("[data-testid=job-state]").filter({ hasText: /waiting|active/ }).waitFor();
    assert.deepEqual((await rest(server, admin, "GET", `/v1/queues/orders/jobs/${ids.dead}`)).body.job.payload.data,
      { order: 7, card: "replaced" });
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  test("pause and resume, drain, clean by state and age, redrive a dead-letter queue", async () => {
    const page = await signedIn(admin, DESKTOP, "/console/queues/emails");
    await page.getByRole("button", { name: "Pause" }).click();
    await page.getByRole("button", { name: "Resume" }).waitFor();
    assert.equal((await rest(server, admin, "GET", "/v1/queues/emails")).body.counts.paused, true);
    await page.getByRole("button", { name: "Resume" }).click();
    await page.getByRole("button", { name: "Pause" }).waitFor();

    await page.locator("#clean-state").selectOption("completed");
    await page.locator("#clean-age").fill("0");
    await page.getByRole("button", { name: "Clean", exact: true }).click();
    await page.locator("#toast").filter({ hasText: "Cleaned: 1 jobs" }).waitFor();
    assert.equal((await rest(server, admin, "GET", "/v1/queues/emails")).body.counts.completed, 0);

    await page.getByRole("button", { name: "Drain" }).click();
    await page.locator("#toast").filter({ hasText: /Drained: \d+ jobs/ }).waitFor();
    assert.equal((await rest(server, admin, "GET", "/v1/queues/emails")).body.counts.waiting, 0);

    const ordersWaiting = async () => (await rest(server, admin, "GET", "/v1/queues/orders")).body.counts.waiting;
    const waitingBefore = await ordersWaiting();
    await page.goto(`${server.url}/console/queues/orders-dlq`);
    assert.equal(await page.locator("[data-testid=count-waiting]").textContent(), "1");
    await page.getByRole("button", { name: "Redrive dead letters…" }).click();
    const preview = page.locator("[data-testid=redrive-preview]");
    await preview.filter({ hasText: "1 dead letters would move" }).waitFor();
    assert.match(await preview.textContent(), /1 to orders/);
    assert.equal(await ordersWaiting(), waitingBefore); // a preview moves nothing
    await page.getByRole("button", { name: "Redrive now" }).click();
    await page.locator("#toast").filter({ hasText: "Redriven: 1 jobs" }).waitFor();
    assert.equal(await ordersWaiting(), waitingBefore + 1);
    await page.context().close();
  });
});

describe("bulk", () => {
  test("ticked rows and every matching job, as tracked batches with their progress", async () => {
    // CONSOLE_BULK_JOBS=100000 runs it at the scale (minutes); 1,000 by default
    const total = Number(process.env.CONSOLE_BULK_JOBS || 1000);
    const item = { task: { name: "bulk", payload: { data: "e30=", contentType: "application/json" } } };
    for (let n = 0; n < total; n += 1000) {
      const r = await fetch(`${server.url}/loam.jobs.v1.JobsService/EnqueueBulk`, {
        method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${admin}` },
        body: JSON.stringify({ queue: "bulk", jobs: Array.from({ length: Math.min(1000, total - n) }, () => item) }),
      });
      assert.equal(r.status, 200);
    }
    const page = await signedIn(admin, DESKTOP, "/console/queues/bulk?state=waiting");
    await settles(rows(page), 50, "rows");
    const picked = await page.locator("tbody tr").evaluateAll((trs) => trs.slice(0, 2).map((tr) => tr.dataset.job));
    for (const id of picked) await page.getByRole("checkbox", { name: `Select job ${id}` }).check();
    await page.locator("#bulk-action").selectOption("cancel");
    await page.getByRole("button", { name: "Apply to 2 selected" }).click();
    await page.locator("[data-testid=batch]").filter({ hasText: "2 of 2 done, 2 succeeded, 0 failed — finished." }).waitFor();
    await page.locator("[data-testid=count-canceled]").filter({ hasText: "2" }).waitFor();

    await page.locator("#bulk-action").selectOption("remove");
    await page.getByRole("button", { name: "Apply to every matching job" }).click();
    const rest_ = (total - 2).toLocaleString("en-US");
    await page.locator("[data-testid=batch]").filter({ hasText: `${rest_} of ${rest_} done, ${rest_} succeeded, 0 failed — finished.` })
      .waitFor({ timeout: Math.max(60_000, total * 5) });
    await page.locator("[data-testid=count-waiting]").filter({ hasText: /^0$/ }).waitFor();
    await page.context().close();
  });
});

describe("enqueue, re-run, export", () => {
  test("a job enqueued by hand, run again, exported as CSV, and a job's diagnostic bundle", async () => {
    await rest(server, admin, "POST", "/v1/queues/forms/jobs", { name: "seed", data: {} });
    const page = await signedIn(admin, DESKTOP, "/console/queues/forms?state=waiting");
    await page.getByText("Enqueue a job").click();
    await page.locator("#enqueue-name").fill("by-hand");
    await page.locator("#enqueue-data").fill('{"to": "zed@example.com"}');
    await page.getByRole("button", { name: "Enqueue", exact: true }).click();
    await page.locator("#toast").filter({ hasText: /Enqueued job/ }).waitFor();
    const row = page.locator("tbody tr", { hasText: "by-hand" });
    await row.waitFor();
    const id = await row.getAttribute("data-job");

    const [csv] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: "CSV" }).click()]);
    const text = readFileSync(await csv.path(), "utf8");
    assert.match(text.split("\n")[0], /^id,queue,name,state/);
    assert.match(text, new RegExp(`${id},forms,by-hand,waiting`));

    await page.goto(`${server.url}/console/queues/forms/jobs/${id}`);
    const [bundle] = await Promise.all([page.waitForEvent("download"),
      page.getByRole("button", { name: "Download diagnostic bundle" }).click()]);
    const doc = JSON.parse(readFileSync(await bundle.path(), "utf8"));
    assert.equal(doc.detail.job.id, id);
    assert.deepEqual(doc.detail.job.payload.data, { to: "zed@example.com" });

    await page.getByRole("button", { name: "Run again as a new job" }).click();
    await page.waitForURL((u) => u.pathname.includes("/jobs/") && !u.pathname.endsWith(id));
    await page.getByRole("heading", { name: /^Job / }).waitFor();
    assert.match(await page.locator("section[aria-labelledby=h-payload] pre").textContent(), /zed@example.com/);
    await page.context().close();
  });
});

describe("failures by cause", () => {
  test("failed jobs grouped by error signature; a group retried as a batch", async () => {
    const connect = (method, body) => fetch(`${server.url}/loam.jobs.v1.JobsService/${method}`, {
      method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${admin}` }, body: JSON.stringify(body),
    }).then((r) => r.json());
    await connect("QueueAdmin", { queue: "pay", op: { create: { config: { name: "pay", attempts: 1 } } } });
    for (const message of ["card 4242 declined", "card 1881 declined", "card 7 declined", "timeout after 30 s"]) {
      await rest(server, admin, "POST", "/v1/queues/pay/jobs", { name: "charge", data: {} });
      const { leases: [lease] } = await connect("Lease", { queues: ["pay"], worker: "w" });
      await connect("Complete", { token: lease.token, outcome: { fail: { error: { message, code: "E" } } } });
    }
    const page = await signedIn(admin, DESKTOP, "/console/queues/pay");
    await page.getByRole("link", { name: "Failures grouped by cause" }).click();
    const group = page.locator('tr[data-signature="E: card # declined"]');
    await group.waitFor();
    assert.match(await group.textContent(), /E: card # declined\s*3/);
    await shot(page, "failures");
    await axe(page, "failures");
    await page.getByRole("button", { name: /Retry group: the 3 jobs failing with E: card # declined/ }).click();
    await page.locator("[data-testid=batch]").filter({ hasText: "3 of 3 done, 3 succeeded" }).waitFor();
    await group.waitFor({ state: "detached" });
    const counts = (await rest(server, admin, "GET", "/v1/queues/pay")).body.counts;
    assert.deepEqual([counts.failed, counts.waiting], [1, 3]);
    await page.context().close();
  });
});

describe("live", () => {
  test("counts and the list move by push, without a reload", async () => {
    await rest(server, admin, "POST", "/v1/queues/live/jobs", { name: "first", data: {} });
    const page = await signedIn(admin, DESKTOP, "/console/queues/live?state=waiting");
    await page.locator("[data-testid=live]").filter({ hasText: "live" }).waitFor();
    const marker = await page.evaluate(() => (window.__marker = Math.random()));
    const t0 = Date.now();
    const { body } = await rest(server, admin, "POST", "/v1/queues/live/jobs", { name: "pushed", data: {} });
    await page.locator(`tr[data-job="${body.job}"]`).waitFor();
    await page.locator("[data-testid=count-waiting]").filter({ hasText: "2" }).waitFor();
    const latency = Date.now() - t0;
    assert.equal(await page.evaluate(() => window.__marker), marker, "the page was not reloaded");
    console.log(`# SSE: enqueue to row on the page in ${latency} ms`);

    // the queue list moves too
    await page.getByRole("link", { name: "Queues" }).first().click();
    await cell(page, "live", "waiting").filter({ hasText: "2" }).waitFor();
    await page.locator("[data-testid=live]").filter({ hasText: "live" }).waitFor();
    await rest(server, admin, "POST", "/v1/queues/live/jobs", { name: "pushed", data: {} });
    await cell(page, "live", "waiting").filter({ hasText: "3" }).waitFor();
    await page.context().close();
  });

  test("a job page follows its job live", async () => {
    const { body } = await rest(server, admin, "POST", "/v1/queues/live2/jobs", { name: "follow", data: {} });
    const page = await signedIn(admin, DESKTOP, `/console/queues/live2/jobs/${body.job}`);
    await page.locator("[data-testid=live]").filter({ hasText: "live" }).waitFor();
    await rest(server, admin, "POST", `/v1/queues/live2/jobs/${body.job}:cancel`);
    await page.locator("[data-testid=job-state]").filter({ hasText: "canceled" }).waitFor();
    assert.match(await page.locator("[data-testid=live-events]").textContent(), /canceled/);
    await page.context().close();
  });

  test("a hidden tab closes its stream and resumes from its cursor", async () => {
    await rest(server, admin, "POST", "/v1/queues/live3/jobs", { name: "first", data: {} });
    const page = await signedIn(admin, DESKTOP, "/console/queues/live3?state=waiting");
    await page.locator("[data-testid=live]").filter({ hasText: "live" }).waitFor();
    const setHidden = (hidden) => page.evaluate((h) => {
      Object.defineProperty(document, "hidden", { configurable: true, get: () => h });
      document.dispatchEvent(new Event("visibilitychange"));
    }, hidden);
    await setHidden(true);
    await page.locator("[data-testid=live]").filter({ hasText: "paused" }).waitFor();
    const { body } = await rest(server, admin, "POST", "/v1/queues/live3/jobs", { name: "while-hidden", data: {} });
    await setHidden(false);
    await page.locator(`tr[data-job="${body.job}"]`).waitFor();
    await page.context().close();
  });
});

describe("roles", () => {
  test("a viewer reads everything but is offered no action, and the API refuses one", async () => {
    const { body: job } = await rest(server, admin, "POST", "/v1/queues/roles/jobs", { name: "look", data: {} });
    const page = await signedIn(viewer, DESKTOP, `/console/queues/roles/jobs/${job.job}`);
    await page.getByRole("heading", { name: `Job ${job.job}` }).waitFor();
    assert.equal(await page.getByRole("button", { name: /Retry|Cancel|Remove|Promote/ }).count(), 0);
    await page.goto(`${server.url}/console/queues/orders`);
    await page.getByText("Read only").waitFor();
    assert.equal(await page.getByRole("button", { name: /Retry|Pause|Drain|Clean/ }).count(), 0);
    const refused = await page.evaluate(async ([q, id]) => {
      const r = await fetch(`/v1/queues/${q}/jobs/${id}:retry`, { method: "POST",
        headers: { authorization: `Bearer ${sessionStorage.getItem("loam.token")}` } });
      return r.status;
    }, ["orders", ids.dead]);
    assert.equal(refused, 403);
    await page.context().close();
  });

  test("a token of namespace B sees nothing of A", async () => {
    const page = await signedIn(adminB);
    await page.locator('tr[data-queue="b-emails"]').waitFor();
    assert.equal(await page.locator('tr[data-queue="emails"]').count(), 0);
    await page.goto(`${server.url}/console/queues/emails/jobs/${ids.failed}`);
    await page.getByRole("alert").filter({ hasText: /not_found/ }).waitFor();
    assert.equal((await rest(server, adminB, "GET", `/v1/queues/emails/jobs/${ids.failed}`)).status, 404);
    await page.context().close();
  });
});

describe("layout and access", () => {
  let job;
  before(async () => {
    job = (await rest(server, admin, "POST", "/v1/queues/layout/jobs", { name: "render", data: { big: "x".repeat(300) } })).body.job;
  });

  test("a phone's width: no sideways scrolling, the main columns stay", async () => {
    const page = await signedIn(admin, PHONE);
    await cell(page, "emails", "depth").waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page is ${overflow}px wider than the phone`);
    await shot(page, "queues-phone");
    await page.goto(`${server.url}/console/queues/layout/jobs/${job}`);
    await page.getByRole("heading", { name: `Job ${job}` }).waitFor();
    const jobOverflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(jobOverflow <= 0, `the job page is ${jobOverflow}px wider than the phone`);
    await axe(page, "job page on a phone");
    await page.context().close();
  });

  test("dark mode is remembered and passes the contrast check", async () => {
    const page = await signedIn(admin);
    await cell(page, "emails", "depth").waitFor();
    await page.getByRole("button", { name: /Switch theme/ }).click(); // auto -> dark
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), "dark");
    await page.reload();
    await cell(page, "emails", "depth").waitFor();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), "dark");
    await shot(page, "queues-dark");
    await axe(page, "queue list, dark");
    await page.goto(`${server.url}/console/queues/layout/jobs/${job}`);
    await page.getByRole("heading", { name: `Job ${job}` }).waitFor();
    await axe(page, "job page, dark");
    await page.context().close();
  });

  test("the keyboard: g-keys between sections, j/k and Enter through rows, / to the filter", async () => {
    const page = await signedIn(admin);
    await cell(page, "emails", "depth").waitFor();
    await page.keyboard.press("g");
    await page.keyboard.press("s");
    await page.waitForURL(/\/console\/schedules$/);
    await page.keyboard.press("g");
    await page.keyboard.press("q");
    await cell(page, "emails", "depth").waitFor();
    await page.keyboard.press("/");
    assert.equal(await page.evaluate(() => document.activeElement?.id), "queue-filter");
    await page.keyboard.press("Escape");
    await page.locator("body").click({ position: { x: 5, y: 300 } });
    await page.keyboard.press("j");
    assert.equal(await page.locator("tbody tr.sel").getAttribute("data-queue"), (await page.locator("tbody tr").first().getAttribute("data-queue")));
    await page.keyboard.press("j");
    const second = await page.locator("tbody tr").nth(1).getAttribute("data-queue");
    assert.equal(await page.locator("tbody tr.sel").getAttribute("data-queue"), second);
    await page.keyboard.press("Enter");
    await page.waitForURL(new RegExp(`/console/queues/${second}$`));
    await page.context().close();
  });
});

describe("without auth (loam dev)", () => {
  test("no sign-in, and any namespace can be looked at", async () => {
    const dev = await startServer({ auth: false });
    try {
      await fetch(`${dev.url}/v1/queues/nsq/jobs`, { method: "POST",
        headers: { "content-type": "application/json", "x-loam-namespace": "celery-ns" }, body: JSON.stringify({ name: "t" }) });
      const page = await (await browser.newContext({ viewport: DESKTOP })).newPage();
      page.setDefaultTimeout(10_000);
      await page.goto(`${dev.url}/console/`);
      await page.getByText("No queues yet").waitFor();
      await page.locator("#dev-namespace").fill("celery-ns");
      await page.locator("#dev-namespace").press("Enter");
      await page.locator('tr[data-queue="nsq"]').waitFor();
      await page.locator("#dev-namespace").fill("not a name!");
      await page.locator("#dev-namespace").press("Enter");
      await page.getByText("No queues yet").waitFor(); // back to the default namespace
      assert.equal(await page.locator("#dev-namespace").inputValue(), "default");
      await page.context().close();
    } finally {
      await dev.stop();
    }
  });
});
