"""The queue core's facades, one per entity: the only code that runs transactions.

Each method checks its input before any transaction (bad input changes nothing), runs
one transition of `loam_common.jobs` through the store runner, and returns domain
values. No transport types here: `loam_queue_core.rpc` maps Connect's messages onto
these methods, the gateway's REST routes go through the same RPCs. What a commit makes
happen next (wake-ups, Watch, metrics, spans) is declared by the transition and run by
the core's effect sink (`loam_queue_core.effects`), never called from here.

- `jobs.Jobs`: enqueue (and the hand-off to a sleeping poll), lease (long-poll),
  extend, complete, report, update a payload
- `job_admin.JobAdmin`: one job's admin ops, and queries over jobs
- `queues.Queues`: queue settings, pause, counts, bulk ops, listing
- `results.Results`: the result store, with its long-poll
- `schedules.Schedules`, `flows.Flows`, `exchanges.Exchanges`
- `payloads.Payloads`: new jobs' ids and payloads over the inline limit in the blob store
"""
