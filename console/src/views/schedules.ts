/** Schedules (cron, every, Celery beat entries, BullMQ job schedulers): rule, target,
 * next and last run, how many ticks, the last error. */
import { api, type Schedule } from "../api";
import { ago, duration, h, num, replace, time } from "../dom";
import { link, type Ctx } from "../main";
import { empty, rowKeys } from "./common";

function rule(s: Schedule): string {
  if (s.cron) return `cron ${s.cron}${s.tz ? ` (${s.tz})` : ""}`;
  if (s.every_ns) return `every ${duration(s.every_ns)}`;
  return "—";
}

export async function schedulesPage(ctx: Ctx): Promise<void> {
  const cursor = ctx.url.searchParams.get("cursor") ?? "";
  const page = await api.schedules(cursor);
  const tbody = h("tbody", null, page.schedules.map((s) => h("tr", { "data-schedule": s.id },
    h("td", null, s.id), h("td", null, h("a", { href: link(`/queues/${encodeURIComponent(s.queue)}`) }, s.queue)),
    h("td", null, s.name), h("td", null, rule(s)),
    h("td", null, h("time", null, time(s.next_ns))),
    h("td", null, s.last_tick_ns ? ago(s.last_tick_ns) : "never",
      s.last_job_id && [" — ", h("a", { href: link(`/queues/${encodeURIComponent(s.queue)}/jobs/${encodeURIComponent(s.last_job_id)}`) }, "last job")]),
    h("td", { class: "num" }, num(s.count)), h("td", { class: "hide-sm" }, s.last_error))));
  replace(ctx.main, h("h1", null, "Schedules"),
    page.schedules.length ? h("div", { class: "wrap" }, h("table", null,
      h("thead", null, h("tr", null, ["Id", "Queue", "Task", "Rule", "Next run", "Last run", "Ticks", "Last error"]
        .map((t, i) => h("th", { scope: "col", class: i === 6 ? "num" : i === 7 ? "hide-sm" : "" }, t)))), tbody))
      : empty(cursor ? "No more schedules." : "No schedules. Create one with PUT /v1/schedules/{id}, Celery beat or a BullMQ job scheduler."),
    page.next_page_token && h("p", null, h("a", { class: "btn", href: link(`/schedules?cursor=${encodeURIComponent(page.next_page_token)}`) }, "Next page")));
  rowKeys(ctx, tbody);
}
