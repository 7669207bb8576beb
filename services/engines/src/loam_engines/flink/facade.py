"""`FlinkEngine`: the async facade the gateway mounts (`loam_gateway.rest_flink`) and the
engine runner owns. It parses nothing and speaks no HTTP: it takes domain values with the
caller's namespace (already resolved from the credential), runs the lifecycle, and returns
plain views (dicts) of deployments, savepoints and logs.

`FlinkEngine.start(root, store, blobs)` brings up the whole local stack: the session cluster
under `root`, the REST client, the store recorder, the artifact store, the periodic
savepoint loop; it finishes actions a previous runner left in flight; `close()` stops it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loam_common.blobs import BlobStore, DirBlobStore
from loam_common.errors import InvalidArgument
from loam_common.store import Store
from loam_engines.flink.artifacts import Artifacts, kind_of
from loam_engines.flink.cluster import LocalFlinkCluster
from loam_engines.flink.distribution import FlinkDistribution
from loam_engines.flink.lifecycle import FlinkLifecycle, JobStatus
from loam_engines.flink.model import Deployment, JobSpec, Kind, LogLine, Savepoint
from loam_engines.flink.periodic import PeriodicSavepoints
from loam_engines.flink.recorder import RunRecorder, StoreRunRecorder
from loam_engines.flink.rest import FlinkRest

MAX_ARGS = 256
MAX_CONFIG = 128


class FlinkEngine:
    def __init__(self, lifecycle: FlinkLifecycle, cluster: LocalFlinkCluster | None = None,
                 periodic_interval_s: float = 5.0) -> None:  # fmt: skip
        self.lifecycle = lifecycle
        self.cluster = cluster
        self.periodic = PeriodicSavepoints(lifecycle, periodic_interval_s)

    @classmethod
    async def start(
        cls,
        root: str | Path,
        store: Store,
        blobs: BlobStore | None = None,
        *,
        recorder: RunRecorder | None = None,
        cluster: LocalFlinkCluster | None = None,
        **lifecycle_options: Any,
    ) -> FlinkEngine:
        """Start (or adopt, when `cluster` is given and started) the local cluster, then
        finish any action a previous runner left in flight."""
        root = Path(root)
        cluster = cluster or LocalFlinkCluster(root / "cluster")
        await cluster.start()
        lifecycle = FlinkLifecycle(
            recorder or StoreRunRecorder(store), FlinkRest(cluster.rest_url),
            Artifacts(blobs or DirBlobStore(root / "blobs"), root / "artifacts"), cluster.dist,
            savepoint_dir=cluster.savepoint_dir, checkpoint_dir=cluster.checkpoint_dir, **lifecycle_options,
        )  # fmt: skip
        engine = cls(lifecycle, cluster)
        await lifecycle.reconcile()
        engine.periodic.start()
        return engine

    async def close(self, *, stop_cluster: bool = True) -> None:
        await self.periodic.stop()
        await self.lifecycle.rest.aclose()
        if stop_cluster and self.cluster is not None:
            await self.cluster.stop()

    # -- artifacts ----------------------------------------------------------------------------------
    async def artifact_put(self, ns: str, filename: str, data: bytes) -> dict:
        ref = await self.lifecycle.artifacts.put(ns, filename, data)
        return {"artifact": ref, "kind": kind_of(ref).value, "size": len(data)}

    # -- deployments --------------------------------------------------------------------------------
    async def deployment_create(self, ns: str, name: str, spec: dict, savepoint: str | None = None,
                                savepoint_interval_s: int = 0) -> dict:  # fmt: skip
        d = await self.lifecycle.deploy(ns, name, await self._spec(ns, spec), savepoint=savepoint,
                                        savepoint_interval_s=savepoint_interval_s)  # fmt: skip
        return deployment_view(d)

    async def deployment_list(self, ns: str) -> list[dict]:
        return [deployment_view(d) for d in await self.lifecycle.recorder.list(ns)]

    async def deployment_get(self, ns: str, name: str) -> dict:
        d, job = await self.lifecycle.status(ns, name)
        return deployment_view(d, job)

    async def deployment_savepoint(self, ns: str, name: str) -> dict:
        return savepoint_view(await self.lifecycle.savepoint(ns, name))

    async def deployment_suspend(self, ns: str, name: str) -> dict:
        return deployment_view(await self.lifecycle.suspend(ns, name))

    async def deployment_resume(self, ns: str, name: str, savepoint: str | None = None) -> dict:
        return deployment_view(await self.lifecycle.resume(ns, name, savepoint=savepoint))

    async def deployment_upgrade(self, ns: str, name: str, spec: dict) -> dict:
        return deployment_view(await self.lifecycle.upgrade(ns, name, await self._spec(ns, spec)))

    async def deployment_rollback(self, ns: str, name: str, version: int | None = None,
                                  savepoint: str | None = None) -> dict:  # fmt: skip
        return deployment_view(await self.lifecycle.rollback(ns, name, version=version, savepoint=savepoint))

    async def deployment_cancel(self, ns: str, name: str) -> dict:
        return deployment_view(await self.lifecycle.cancel(ns, name))

    async def deployment_logs(self, ns: str, name: str, limit: int = 100) -> list[dict]:
        await self.lifecycle.status(ns, name)  # NotFound for an unknown deployment
        return [log_view(line) for line in await self.lifecycle.recorder.logs(ns, name, limit)]

    async def _spec(self, ns: str, body: dict) -> JobSpec:
        """A JobSpec from request fields. `sql` (statements inline) is stored as an artifact."""
        sql = body.get("sql")
        artifact = body.get("artifact")
        if (sql is None) == (artifact is None):
            raise InvalidArgument(
                "artifact", "give exactly one of artifact (an uploaded .jar/.py/.sql) or sql"
            )
        if sql is not None:
            if not isinstance(sql, str) or not sql.strip():
                raise InvalidArgument("sql", "must be SQL statements")
            artifact = await self.lifecycle.artifacts.put(ns, "statements.sql", sql.encode())
        self.lifecycle.artifacts.check_ref(artifact)
        args = body.get("args") or []
        config = body.get("config") or {}
        if len(args) > MAX_ARGS or not all(isinstance(a, str) for a in args):
            raise InvalidArgument("args", f"must be at most {MAX_ARGS} strings")
        if len(config) > MAX_CONFIG or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in config.items()
        ):
            raise InvalidArgument("config", f"must map at most {MAX_CONFIG} Flink option names to strings")
        parallelism = body.get("parallelism") or 1
        if not isinstance(parallelism, int) or isinstance(parallelism, bool):
            raise InvalidArgument("parallelism", "must be an integer")
        return JobSpec(kind=kind_of(artifact), artifact=artifact, entry_class=body.get("entry_class") or None,
                       args=tuple(args), parallelism=parallelism, config=dict(config),
                       allow_non_restored_state=bool(body.get("allow_non_restored_state", False)),
                       upgrade_mode=str(body.get("upgrade_mode") or "savepoint"))  # fmt: skip


# -- views ---------------------------------------------------------------------------------------------
def spec_view(spec: JobSpec) -> dict:
    return spec.to_dict()


def savepoint_view(s: Savepoint) -> dict:
    return {
        "path": s.path,
        "version": s.version,
        "job_id": s.job_id,
        "taken_ns": s.taken_ns,
        "reason": s.reason,
    }


def log_view(line: LogLine) -> dict:
    return {"seq": line.seq, "at_ns": line.at_ns, "text": line.text}


def job_view(job: JobStatus) -> dict:
    return {"job_id": job.job_id, "state": job.state, "all_running": job.all_running, "restarts": job.restarts,
            "checkpoints": job.checkpoints, "latest_checkpoint": job.latest_checkpoint,
            "restored_from": job.restored_from, "checkpoints_failed": job.checkpoints_failed,
            "latest_checkpoint_ms": job.latest_checkpoint_ms, "savepoint_in_progress": job.savepoint_in_progress}  # fmt: skip


def deployment_view(d: Deployment, job: JobStatus | None = None) -> dict:
    out = {
        "name": d.name, "state": d.state.value, "version": d.version, "kind": d.spec().kind.value,
        "job_id": d.job_id, "versions": [{"number": v.number, "spec": spec_view(v.spec), "created_ns": v.created_ns}
                                         for v in d.versions],
        "savepoints": [savepoint_view(s) for s in d.savepoints],
        "pending": {"action": d.pending.action, "step": d.pending.step} if d.pending else None,
        "last_error": d.last_error, "created_ns": d.created_ns, "updated_ns": d.updated_ns,
        "timings_ms": dict(d.timings_ms), "savepoint_interval_s": d.savepoint_interval_s,
    }  # fmt: skip
    if job is not None:
        out["job"] = job_view(job)
    return out


__all__ = ["FlinkDistribution", "FlinkEngine", "Kind", "deployment_view"]
