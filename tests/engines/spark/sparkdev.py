"""Helpers of the Spark engine tests: `loam dev --auth` as a subprocess on free ports
(`start_spark_dev`, ready when it prints its "ready" line, with its Spark endpoint read
from its output) and API tokens made in its store (`make_tokens`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from loam_common.auth import ADMIN, ENGINE, ENQUEUE, SCHEDULE, token_create
from loam_common.store.runner import open_store, store_url_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
from devserver import DevServer, free_port, start_dev_server  # noqa: E402  (the path above)

READY_TIMEOUT_S = 60


@dataclass
class SparkDev(DevServer):
    spark_url: str = ""  # the sc:// URL `loam dev` printed
    spark_port: int = 0
    tokens: dict[str, str] = field(default_factory=dict)


def start_spark_dev(
    data: Path, *extra: str, spark_port: int | None = None, port: int | None = None, env: dict | None = None
) -> SparkDev:
    """`loam dev --auth` with its Spark endpoint on `spark_port` (a free one by default)."""
    spark_port = spark_port or free_port()
    server = start_dev_server(
        data, "--auth", "--spark-port", str(spark_port), "--log-level", "info", *extra,
        port=port, env=env, drop_env=("LOAM_", "SPARK_"), timeout_s=READY_TIMEOUT_S, server_class=SparkDev,
    )  # fmt: skip
    server.spark_port = spark_port
    for line in server.lines:
        if "spark connect on " in line:
            server.spark_url = line.split("spark connect on ", 1)[1].strip()
    return server


async def make_tokens(data: Path, namespaces: list[str]) -> dict[str, str]:
    store = open_store(store_url_of(data))  # the store `loam dev` keeps in that data directory
    try:
        out = {}
        for ns in namespaces:
            out[ns], _ = await store.transact(token_create, ns, [ENGINE, ADMIN, ENQUEUE, SCHEDULE], "test")
        out["no-engine"], _ = await store.transact(token_create, namespaces[0], [ADMIN], "test")
        return out
    finally:
        await store.close()
