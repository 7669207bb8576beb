"""`loam.spark_session()`: a PySpark (Spark Connect) session on the namespace's Spark
endpoint, with the Loam token as `authorization: Bearer <token>` gRPC metadata.

The URL carries connection settings only, never the token, so it cannot leak through
logs: the token comes from `token=` or `LOAM_TOKEN` and travels in a channel builder's
metadata. This module needs PySpark (`pyspark-client` 4.x) and nothing else of Loam's,
so it also runs inside a Spark environment that has only PySpark.

    spark = loam.spark_session()                    # LOAM_SPARK_URL or sc://localhost:15002
    spark = loam.spark_session("sc://localhost:15002", token="loam_...")

Inside a SparkBatch run, `SPARK_REMOTE` already names the endpoint with a run token,
and `LOAM_SPARK_CONF` (JSON) holds the run's Spark conf: both are used when present.
"""

from __future__ import annotations

import json
import os
from typing import Any

DEFAULT_URL = "sc://localhost:15002"


def _channel_builder(url: str, token: str) -> Any:
    from pyspark.sql.connect.client import DefaultChannelBuilder

    class LoamChannelBuilder(DefaultChannelBuilder):
        """A plaintext or TLS channel as the URL says, plus the bearer token as metadata
        (PySpark's own `;token=` would also switch a non-localhost channel to TLS)."""

        def metadata(self):  # noqa: ANN201 - PySpark's signature
            return [*super().metadata(), ("authorization", f"Bearer {token}")]

    return LoamChannelBuilder(url)


def spark_session(
    url: str | None = None,
    *,
    token: str | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession on Loam's Spark endpoint (see the module docstring)."""
    from pyspark.sql.connect.session import SparkSession

    token = token or os.environ.get("LOAM_TOKEN") or None
    url = url or os.environ.get("LOAM_SPARK_URL") or os.environ.get("SPARK_REMOTE") or DEFAULT_URL
    if not url.startswith("sc://"):
        raise ValueError(f"a Spark Connect URL starts with sc://, not {url!r}")
    builder = SparkSession.builder
    if token and ";token=" not in url:
        builder = builder.channelBuilder(_channel_builder(url, token))
    else:
        builder = builder.remote(url)
    settings = json.loads(os.environ.get("LOAM_SPARK_CONF") or "{}")
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


__all__ = ["DEFAULT_URL", "spark_session"]
