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

import os as _os

# gRPC's C core installs fork handlers (pthread_atfork) unless told not to. Under uvloop,
# which `loam dev` serves on, libuv starts children with a plain fork(), so those handlers
# run in every child the runner spawns (Sail, the Flink JVMs, batch scripts) while the Spark
# Connect proxy's gRPC threads are busy, and now and then leave the child aborting before
# its exec ("epoll_wait error: Bad file descriptor", SIGABRT). Nothing here uses gRPC across
# a fork without an exec, so the handlers have nothing to do: off, before gRPC is imported
# (an explicit setting in the environment wins).
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
