/**
 * Concurrent calls coalesced into batch calls, at most `lanes` batches in flight, each of
 * at most `max` items, in call order. A batch leaves on the next turn of the event loop
 * after its first item when a lane is free; items that arrive while every lane is busy go
 * out as soon as one frees, shared evenly between the lanes free then.
 *
 * One lane keeps the calls' order on the server (adds). Two let the client work on one
 * batch's answer while the server works on the next batch (completions, whose order
 * between jobs does not matter): with one, client and server take turns.
 */
interface Pending<I, R> {
  item: I;
  resolve: (r: R) => void;
  reject: (e: unknown) => void;
}

export class Coalescer<I, R> {
  private pending: Pending<I, R>[] = [];
  private inFlight = 0;
  private scheduled = false;

  /** `send` answers one result or Error per item, in order. */
  constructor(
    private readonly max: number,
    private readonly what: string,
    private readonly send: (items: I[]) => Promise<(R | Error | undefined)[]>,
    private readonly lanes = 1,
  ) {}

  add(item: I): Promise<R> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (this.inFlight < this.lanes && !this.scheduled) {
        this.scheduled = true;
        setImmediate(() => {
          this.scheduled = false;
          this.launch();
        });
      }
    });
  }

  private launch(): void {
    while (this.inFlight < this.lanes && this.pending.length) {
      const share = Math.ceil(this.pending.length / (this.lanes - this.inFlight));
      const batch = this.pending.splice(0, Math.min(this.max, share));
      this.inFlight++;
      void this.deliver(batch).finally(() => {
        this.inFlight--;
        this.launch();
      });
    }
  }

  private async deliver(batch: Pending<I, R>[]): Promise<void> {
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
}
