"""A Flink runner in its own process, for the crash test: it upgrades one deployment over
the shared SQLite store and Flink cluster, and is killed with SIGKILL mid-way.

    python upgrade_runner.py <db> <blobs> <work> <rest url> <savepoint dir> <ns> <name> <artifact> <tag>
"""

import asyncio
import sys
from pathlib import Path

from loam_common.blobs import DirBlobStore
from loam_common.store import open_store
from loam_engines.flink.artifacts import Artifacts
from loam_engines.flink.distribution import FlinkDistribution
from loam_engines.flink.lifecycle import FlinkLifecycle
from loam_engines.flink.model import JobSpec, Kind
from loam_engines.flink.recorder import StoreRunRecorder
from loam_engines.flink.rest import FlinkRest


async def main(db, blobs, work, url, savepoints, ns, name, artifact, tag) -> None:
    store = open_store(f"sqlite:///{db}")
    life = FlinkLifecycle(StoreRunRecorder(store), FlinkRest(url), Artifacts(DirBlobStore(blobs), work),
                          FlinkDistribution.locate(), savepoint_dir=Path(savepoints))  # fmt: skip
    spec = JobSpec(Kind.JAR, artifact, entry_class="loam.KeyedCounter", args=("--tag", tag, "--rate", "20"))
    await life.upgrade(ns, name, spec)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
