import { describe, expect, it } from "vitest";
import { Coalescer } from "../src/coalesce.js";

// Batches in flight at once: one lane keeps calls in order, two let a batch leave while
// another is still being answered (the worker's completions, worker-path.ts).
describe("Coalescer", () => {
  /** A send whose calls are answered when the test says so, each recorded. */
  function gate() {
    const calls: { items: number[]; answer: (out: (number | Error)[]) => void; fail: (e: unknown) => void }[] = [];
    const send = (items: number[]) =>
      new Promise<(number | Error | undefined)[]>((answer, fail) => calls.push({ items, answer, fail }));
    return { calls, send };
  }
  const turn = () => new Promise((r) => setImmediate(r));
  /** What a call came to, with its rejection handled from the start. */
  const outcome = (p: Promise<number>) => p.then((v) => v, (e: Error) => e.message);

  it("with one lane, sends what came meanwhile only after the batch in flight is answered", async () => {
    const { calls, send } = gate();
    const c = new Coalescer<number, number>(100, "test", send);
    const first = [c.add(1), c.add(2)];
    await turn();
    const later = [c.add(3), c.add(4)];
    await turn();
    expect(calls.map((x) => x.items)).toEqual([[1, 2]]);
    calls[0].answer([10, 20]);
    expect(await Promise.all(first)).toEqual([10, 20]);
    await turn();
    expect(calls.map((x) => x.items)).toEqual([[1, 2], [3, 4]]);
    calls[1].answer([30, 40]);
    expect(await Promise.all(later)).toEqual([30, 40]);
  });

  it("with two lanes, shares a backlog between them and sends a third batch when one frees", async () => {
    const { calls, send } = gate();
    const c = new Coalescer<number, number>(100, "test", send, 2);
    const a = [1, 2, 3, 4, 5].map((i) => outcome(c.add(i)));
    await turn();
    // both lanes were free: the five items go out as two batches, in call order
    expect(calls.map((x) => x.items)).toEqual([[1, 2, 3], [4, 5]]);
    const b = [outcome(c.add(6)), outcome(c.add(7))];
    await turn();
    expect(calls).toHaveLength(2); // both lanes busy: 6 and 7 wait
    calls[1].answer([40, new Error("refused")]); // the second batch answers first
    await turn();
    expect(calls.map((x) => x.items)).toEqual([[1, 2, 3], [4, 5], [6, 7]]);
    expect(await a[3]).toBe(40);
    expect(await a[4]).toBe("refused");
    calls[0].answer([10, 20, 30]);
    calls[2].fail(new Error("connection reset"));
    expect(await Promise.all(a.slice(0, 3))).toEqual([10, 20, 30]);
    expect(await Promise.all(b)).toEqual(["connection reset", "connection reset"]);
  });

  it("keeps each batch within max and fails an item the answer leaves out", async () => {
    const { calls, send } = gate();
    const c = new Coalescer<number, number>(2, "test", send, 2);
    const all = [1, 2, 3, 4, 5].map((i) => outcome(c.add(i)));
    await turn();
    expect(calls.map((x) => x.items)).toEqual([[1, 2], [3, 4]]);
    calls[0].answer([10]);
    expect(await all[1]).toBe("test: no result for an item");
    await turn();
    expect(calls.map((x) => x.items)).toEqual([[1, 2], [3, 4], [5]]);
    calls[1].answer([30, 40]);
    calls[2].answer([50]);
    expect(await Promise.all([all[0], all[2], all[3], all[4]])).toEqual([10, 30, 40, 50]);
  });
});
