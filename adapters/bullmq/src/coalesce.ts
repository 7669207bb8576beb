/**
 * Concurrent calls coalesced into batch calls: items that arrive while a batch is in
 * flight go in the next one, so at most one batch is in flight, each of at most `max`
 * items, sent on the next turn of the event loop after the first item, in call order.
 */
interface Pending<I, R> {
  item: I;
  resolve: (r: R) => void;
  reject: (e: unknown) => void;
}

export class Coalescer<I, R> {
  private pending: Pending<I, R>[] = [];
  private flushing = false;
  private scheduled = false;

  /** `send` answers one result or Error per item, in order. */
  constructor(
    private readonly max: number,
    private readonly what: string,
    private readonly send: (items: I[]) => Promise<(R | Error | undefined)[]>,
  ) {}

  add(item: I): Promise<R> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (!this.flushing && !this.scheduled) {
        this.scheduled = true;
        setImmediate(() => {
          this.scheduled = false;
          void this.flush();
        });
      }
    });
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (this.pending.length) {
        const batch = this.pending.splice(0, this.max);
        try {
          const out = await this.send(batch.map((p) => p.item));
          batch.forEach((p, i) => {
            const r = out[i];
            if (r instanceof Error) p.reject(r);
            else if (r === undefined) p.reject(new Error(`${this.what}: no result for an item`));
            else p.resolve(r);
          });
        } catch (e) {
          for (const p of batch) p.reject(e);
        }
      }
    } finally {
      this.flushing = false;
    }
  }
}
