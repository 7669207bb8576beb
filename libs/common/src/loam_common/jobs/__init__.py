"""The job state machine: every transition of spec §6 as a function over one store
transaction, named for its guard. The modules, lowest first (each imports only modules
above it in this list; `make lint` checks there is no cycle):

- `states`: the states and the allowed moves;
- `queue`: `QueueTx`, the one primitive that moves a job between indexes, counts and
  outbox;
- `new_job` (what a producer asks for), `promote` (delayed jobs coming due),
  `retention`, `dlq`, `dedup`: single concepts over QueueTx;
- `insert`: `job_insert`, the one way a job is stored (enqueue, flows, schedules,
  exchanges, a kept dedup duplicate);
- `failure`: record an error, retry or fail, requeue (completions, sweeps, flows);
- `dependencies`: the links of jobs that wait for other jobs;
- `linked`: `LinkedQueueTx`, the QueueTx every transition opens, which follows those
  links when a job leaves the live states;
- the transitions: `lease`, `complete` (with `Outcome`), `enqueue`, `flows`,
  `schedules`, `exchanges`, `admin`, `job_admin`, `sweeps`, and `query` (reads)."""
