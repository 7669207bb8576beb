/**
 * Delayed jobs that are due by this process's clock before the server's. BullMQ promotes
 * delayed jobs by the clock of the client that fetches (its scripts take the caller's
 * timestamp); Loam holds a job for its delay on the server's clock, counted from the add.
 * The two agree unless this process's wall clock jumps ahead of real time (a host whose
 * clock is stepped, or tests that move it with fake timers). So each delayed job this
 * process adds is remembered with its due time on the wall clock and on the monotonic
 * clock; a fetch promotes the ones the wall clock says are due while the monotonic clock
 * says the server is still holding them. When the clocks agree, an entry simply expires
 * with no call.
 */
const SLACK_MS = 50; // closer than this to the server's own promotion: let the server do it
const MAX_PER_QUEUE = 10_000; // past this, the server's clock decides for the rest

interface Due {
  wall: number; // Date.now() at which it is due
  mono: number; // performance.now() at which the server promotes it
}

const pending = new Map<string, Map<string, Due>>(); // connection\0queue -> job id -> due

function bucket(conn: string, queue: string, create: boolean): Map<string, Due> | undefined {
  const k = `${conn}\0${queue}`;
  let m = pending.get(k);
  if (!m && create) pending.set(k, (m = new Map()));
  return m;
}

/** A job was added with `delayMs` (as the server counts it from now). */
export function rememberDelayed(conn: string, queue: string, jobId: string, delayMs: number): void {
  if (!(delayMs > SLACK_MS)) return;
  const m = bucket(conn, queue, true)!;
  const mono = performance.now();
  if (m.size >= MAX_PER_QUEUE) {
    for (const [id, d] of m) if (d.mono <= mono) m.delete(id);
    if (m.size >= MAX_PER_QUEUE) return;
  }
  m.set(jobId, { wall: Date.now() + delayMs, mono: mono + delayMs });
}

/** When a fetch found nothing ready: promote what this clock says is due and the server
 * does not yet; how many were. */
export async function promoteDue(conn: string, queue: string, promote: (jobId: string) => Promise<unknown>): Promise<number> {
  const m = bucket(conn, queue, false);
  if (!m || !m.size) return 0;
  const wall = Date.now();
  const mono = performance.now();
  const due: [string, number][] = [];
  for (const [id, d] of m) {
    if (d.mono - mono <= SLACK_MS) m.delete(id); // the server promotes it itself
    else if (d.wall <= wall) {
      m.delete(id);
      due.push([id, d.wall]);
    }
  }
  if (!m.size) pending.delete(`${conn}\0${queue}`);
  due.sort((a, b) => a[1] - b[1]); // in the order they fell due, as a promotion sweep would
  let promoted = 0;
  for (const [id] of due) {
    if (await promote(id).then(() => true, () => false)) promoted++; // else taken, removed or promoted meanwhile
  }
  return promoted;
}
