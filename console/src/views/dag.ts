/** A flow as a graph on the job page: the job, its parents above and its children below
 * (a BullMQ parent waits on its children; a Celery chord's callback on its header),
 * drawn in SVG with pan (drag), zoom (wheel, + and −) and "fit". A node's own parents and
 * children are read when it is expanded (its ⊕), so a flow of any size costs one call
 * per node looked at. Each node links to its job page. */
import { api, type Job } from "../api";
import { h, replace } from "../dom";
import { link } from "../main";

const NS = "http://www.w3.org/2000/svg";
const W = 190, H = 46, GAP_X = 24, GAP_Y = 70;
const MAX_CHILDREN = 200; // per expansion: a node with more says how many it left out

interface GraphNode { key: string; queue: string; id: string; label: string; state: string; level: number; expanded: boolean; more: number }

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>, ...kids: (globalThis.Node | SVGElement | string)[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of kids) el.append(c as any);
  return el;
}

export function flowGraph(queue: string, job: Job): HTMLElement {
  const nodes = new Map<string, GraphNode>();
  const edges = new Set<string>(); // "parentKey>childKey"
  const order: string[] = [];
  const keyOf = (q: string, id: string) => `${q}/${id}`;
  const add = (q: string, id: string, level: number, state = "", label = ""): GraphNode => {
    const key = keyOf(q, id);
    let n = nodes.get(key);
    if (!n) {
      n = { key, queue: q, id, label, state, level, expanded: false, more: 0 };
      nodes.set(key, n);
      order.push(key);
    } else {
      if (state) n.state = state;
      if (label) n.label = label;
    }
    return n;
  };
  const root = add(queue, job.id, 0, job.state, job.name);
  const status = h("p", { class: "muted", role: "status", "aria-live": "polite" });

  async function expand(n: GraphNode): Promise<void> {
    if (n.expanded) return;
    n.expanded = true;
    status.textContent = `Loading ${n.id}…`;
    try {
      const [detail, kids] = await Promise.all([
        n === root ? Promise.resolve({ job }) : api.job(n.queue, n.id),
        api.children(n.queue, n.id),
      ]);
      if (!n.label) n.label = detail.job.name;
      n.state = detail.job.state;
      for (const p of detail.job.parents ?? []) {
        const parent = add(p.queue, p.job_id, n.level - 1);
        edges.add(`${parent.key}>${n.key}`);
      }
      const shown = kids.children.slice(0, MAX_CHILDREN);
      n.more = kids.children.length - shown.length;
      for (const c of shown) {
        const child = add(c.queue, c.job_id, n.level + 1, c.state === "processed" ? "completed" : c.state === "pending" ? "" : c.state, c.node);
        edges.add(`${n.key}>${child.key}`);
      }
      status.textContent = `${nodes.size} jobs shown`;
    } catch (e) {
      n.expanded = false;
      status.textContent = `Could not load ${n.id}: ${(e as Error).message}`;
    }
    draw();
  }

  // -- drawing, with the view box as the camera ------------------------------------------
  const canvas = svg("svg", { class: "dag", role: "group", "aria-label": "Flow graph: drag to pan, wheel or + and − to zoom" });
  let view = { x: 0, y: 0, w: 800, h: 300 };
  const setView = () => canvas.setAttribute("viewBox", `${view.x} ${view.y} ${view.w} ${view.h}`);
  let bounds = { x: 0, y: 0, w: 1, h: 1 };

  function layout(): Map<string, { x: number; y: number }> {
    const byLevel = new Map<number, GraphNode[]>();
    for (const key of order) {
      const n = nodes.get(key)!;
      byLevel.set(n.level, [...(byLevel.get(n.level) ?? []), n]);
    }
    const at = new Map<string, { x: number; y: number }>();
    const widest = Math.max(...[...byLevel.values()].map((l) => l.length));
    for (const [level, row] of byLevel) {
      const offset = ((widest - row.length) * (W + GAP_X)) / 2;
      row.forEach((n, i) => at.set(n.key, { x: offset + i * (W + GAP_X), y: level * (H + GAP_Y) }));
    }
    const xs = [...at.values()].map((p) => p.x), ys = [...at.values()].map((p) => p.y);
    bounds = { x: Math.min(...xs) - 20, y: Math.min(...ys) - 20, w: Math.max(...xs) - Math.min(...xs) + W + 40,
      h: Math.max(...ys) - Math.min(...ys) + H + 40 };
    return at;
  }

  function draw(): void {
    const at = layout();
    const g = svg("g", {});
    for (const e of edges) {
      const [from, to] = e.split(">");
      const a = at.get(from), b = at.get(to);
      if (!a || !b) continue;
      const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y, my = (y1 + y2) / 2;
      g.append(svg("path", { d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`, class: "edge" }));
    }
    for (const key of order) {
      const n = nodes.get(key)!, p = at.get(key)!;
      const title = `job ${n.id} of ${n.queue}${n.state ? `, ${n.state}` : ""}`;
      // named by its visible text (task, state, the id's end); the title gives the whole id
      const a = svg("a", { href: link(`/queues/${encodeURIComponent(n.queue)}/jobs/${encodeURIComponent(n.id)}`) },
        svg("rect", { x: p.x, y: p.y, width: W, height: H, rx: 8, class: `node ${n.state}${n === root ? " root" : ""}` }),
        svg("text", { x: p.x + 10, y: p.y + 19, class: "label" }, (n.label || n.id).slice(0, 24)),
        svg("text", { x: p.x + 10, y: p.y + 36, class: "sub" }, `${n.state || "…"} · ${n.id.slice(-10)}`),
        svg("title", {}, title));
      const node = svg("g", { "data-node": n.id }, a);
      if (!n.expanded) {
        const plus = svg("g", { class: "expand", role: "button", tabindex: 0, "aria-label": `Show the parents and children of ${n.id}` },
          svg("circle", { cx: p.x + W - 14, cy: p.y + 14, r: 10 }), svg("text", { x: p.x + W - 14, y: p.y + 19, "text-anchor": "middle" }, "+"));
        const go = (e: Event) => { e.preventDefault(); e.stopPropagation(); void expand(n); };
        plus.addEventListener("click", go);
        plus.addEventListener("pointerdown", (e) => e.stopPropagation());
        plus.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") go(e); });
        node.append(plus);
      } else if (n.more) {
        node.append(svg("text", { x: p.x, y: p.y + H + 14, class: "sub" }, `and ${n.more} more children`));
      }
      g.append(node);
    }
    canvas.replaceChildren(g);
  }

  const fit = () => {
    view = { ...bounds };
    const ratio = (canvas.clientWidth || 800) / (canvas.clientHeight || 300);
    if (view.w / view.h < ratio) { const w = view.h * ratio; view.x -= (w - view.w) / 2; view.w = w; }
    else { const hh = view.w / ratio; view.y -= (hh - view.h) / 2; view.h = hh; }
    setView();
  };
  const zoom = (factor: number, cx = view.x + view.w / 2, cy = view.y + view.h / 2) => {
    const w = Math.min(Math.max(view.w * factor, 100), 50_000), s = w / view.w;
    view = { x: cx - (cx - view.x) * s, y: cy - (cy - view.y) * s, w, h: view.h * s };
    setView();
  };
  canvas.addEventListener("wheel", (e) => {
    e.preventDefault();
    const r = canvas.getBoundingClientRect();
    zoom(e.deltaY > 0 ? 1.15 : 1 / 1.15, view.x + ((e.clientX - r.left) / r.width) * view.w, view.y + ((e.clientY - r.top) / r.height) * view.h);
  }, { passive: false });
  let drag: { x: number; y: number; vx: number; vy: number } | null = null;
  canvas.addEventListener("pointerdown", (e) => {
    drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y };
  });
  canvas.addEventListener("pointermove", (e) => {
    if (!drag || (e.buttons & 1) === 0) return;
    const r = canvas.getBoundingClientRect();
    view.x = drag.vx - ((e.clientX - drag.x) / r.width) * view.w;
    view.y = drag.vy - ((e.clientY - drag.y) / r.height) * view.h;
    setView();
  });
  const stop = () => (drag = null);
  canvas.addEventListener("pointerup", stop);
  canvas.addEventListener("pointerleave", stop);

  const controls = h("div", { class: "row", role: "group", "aria-label": "Graph view" },
    h("button", { type: "button", "aria-label": "Zoom in", on: { click: () => zoom(1 / 1.25) } }, "+"),
    h("button", { type: "button", "aria-label": "Zoom out", on: { click: () => zoom(1.25) } }, "−"),
    h("button", { type: "button", on: { click: fit } }, "Fit"),
    h("button", { type: "button", on: { click: () => { for (const n of nodes.values()) if (!n.expanded) void expand(n); } } },
      "Expand all shown"));
  const box = h("div", { "data-testid": "flow-graph" }, controls, canvas, status);
  draw();
  void expand(root).then(() => requestAnimationFrame(fit));
  return box;
}

/** Only a job that is part of a graph gets one. */
export function hasGraph(j: Job): boolean {
  return (j.children ?? 0) > 0 || (j.parents ?? []).length > 0 || !!j.flow;
}

export function graphSection(queue: string, j: Job): HTMLElement {
  const box = h("div");
  if (!hasGraph(j)) replace(box, h("p", { class: "muted" }, "Not part of a flow."));
  else replace(box, flowGraph(queue, j));
  return box;
}
