/** A small DOM builder and the formatting every page shares. */

type Child = Node | string | number | null | undefined | false | Child[];
type Props = Record<string, unknown> & { on?: Record<string, (e: any) => void> };

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props | null = null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (k === "on") {
        for (const [ev, fn] of Object.entries(v as Record<string, (e: Event) => void>)) el.addEventListener(ev, fn);
      } else if (v === false || v === null || v === undefined) {
        continue;
      } else if (k === "class") {
        el.className = String(v);
      } else if (k in el && typeof v !== "string") {
        (el as any)[k] = v;
      } else {
        el.setAttribute(k, v === true ? "" : String(v));
      }
    }
  }
  append(el, children);
  return el;
}

function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
}

export function replace(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

export function time(ns: number): string {
  if (!ns) return "—";
  const d = new Date(ns / 1e6);
  return d.toLocaleString(undefined, { hour12: false });
}

export function duration(ns: number): string {
  if (ns <= 0) return "—";
  const s = ns / 1e9;
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.round((s % 86400) / 3600)} h`;
}

export function ago(ns: number): string {
  if (!ns) return "—";
  return `${duration(Date.now() * 1e6 - ns)} ago`;
}

const NUMBER = new Intl.NumberFormat("en-US"); // one formatter: toLocaleString makes one per call

export function num(n: number): string {
  return n < 1000 ? String(n) : NUMBER.format(n);
}

export function json(v: unknown): string {
  return JSON.stringify(v, null, 2);
}

export function toast(message: string): void {
  const box = document.getElementById("toast")!;
  const item = h("div", null, message);
  box.appendChild(item);
  setTimeout(() => item.remove(), 4000);
}
