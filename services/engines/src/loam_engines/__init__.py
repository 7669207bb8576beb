"""Loam Jobs: the engine runner (spec §9, §10).

- `processes`: engine child processes that cannot outlive the runner (process groups,
  a parent-death signal, pid files reaped at start-up);
- `runs` / `service` / `rpc`: the engine-run record in the namespace (transitions, the
  facade, the JobsService methods);
- `runner`: leases engine jobs from the queue core and runs them as children;
- `engines`: everything above wired for one process (`loam dev`, `python -m loam_engines`);
- `spark/`: Sail per namespace, the Spark Connect proxy, SparkBatch runs;
- `flink/`: the local Flink session cluster and its job lifecycle.
"""
