"""A PySpark 4.2 client through Loam's Spark Connect proxy to a namespace's Sail:
queries, UDFs, errors, interrupts and large results behave as on Sail directly; tokens
gate it; namespaces never share a server; an idle server stops and comes back."""

from __future__ import annotations

import os
import time

import pytest

PIPELINE = """
from pyspark.sql import functions as F
from pyspark.errors import AnalysisException
out = {}
out["sql"] = spark.sql("select 1 + 1 as two").collect()[0].two
df = (spark.range(100).withColumn("bucket", F.col("id") % 3).filter(F.col("id") >= 10)
      .groupBy("bucket").agg(F.count("*").alias("n"), F.sum("id").alias("total")).orderBy("bucket"))
out["pipeline"] = [[r.bucket, r.n, r.total] for r in df.collect()]
triple = F.udf(lambda x: x * 3, "long")
out["udf"] = [r.t for r in spark.range(4).select(triple("id").alias("t")).collect()]
pid = F.udf(lambda _: os.getpid(), "long")
out["server_pid"] = spark.range(1).select(pid("id").alias("p")).collect()[0].p
try:
    spark.sql("select no_such_column").collect()
except AnalysisException as e:
    out["error"] = [type(e).__module__, type(e).__name__, str(e)[:200]]
table = spark.range(2_000_000).selectExpr("id", "id * 2 as twice", "cast(id as string) as text").toArrow()
import pyarrow.compute as pc  # the batches may come in any order: check the whole column
out["arrow"] = [table.num_rows, table.nbytes > 40_000_000, pc.sum(table.column("twice")).as_py()]
spark.stop()
print(json.dumps(out))
"""


def test_sql_dataframes_udfs_errors_and_a_large_arrow_result(spark_dev, run_client):
    out = run_client(PIPELINE, token=spark_dev.tokens["alpha"])
    assert out["sql"] == 2
    expected = {b: [i for i in range(10, 100) if i % 3 == b] for b in range(3)}
    assert out["pipeline"] == [[b, len(v), sum(v)] for b, v in expected.items()]
    assert out["udf"] == [0, 3, 6, 9]
    module, name, message = out["error"]
    assert (module, name) == ("pyspark.errors.exceptions.connect", "AnalysisException")
    assert "no_such_column" in message
    assert out["arrow"] == [2_000_000, True, 2 * sum(range(2_000_000))]
    # The UDF ran inside the namespace's Sail server: a child of the runner, not the client.
    assert out["server_pid"] != os.getpid()


def test_interrupt_all_stops_a_running_query(spark_dev, run_client):
    out = run_client(
        """
        import threading
        from pyspark.sql import functions as F
        slow = F.udf(lambda x: time.sleep(0.05) or x, "long")
        result = {}
        def query():
            t0 = time.monotonic()
            try:
                spark.range(100_000).repartition(1).select(slow("id").alias("x")).agg(F.sum("x")).collect()
                result["outcome"] = "finished"
            except Exception as e:
                result["outcome"] = type(e).__name__
            result["seconds"] = time.monotonic() - t0
        t = threading.Thread(target=query)
        t.start()
        time.sleep(2.0)
        interrupted = spark.interruptAll()
        t.join(60)
        result["interrupted"] = len(interrupted)
        result["after"] = spark.sql("select 7 as x").collect()[0].x
        spark.stop()
        print(json.dumps(result))
        """,
        token=spark_dev.tokens["alpha"],
    )
    assert out["outcome"] != "finished"
    assert out["interrupted"] >= 1
    assert out["seconds"] < 20  # the query alone would take 5000 s
    assert out["after"] == 7  # the session goes on working


REFUSED = """
t0 = time.monotonic()
try:
    spark = loam_spark.spark_session()
    spark.sql("select 1").collect()
    out = {"outcome": "answered"}
except Exception as e:
    out = {"outcome": type(e).__name__, "message": str(e)[:500]}
out["seconds"] = time.monotonic() - t0
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    ("who", "status"),
    [
        ("missing", "UNAUTHENTICATED"),
        ("wrong", "UNAUTHENTICATED"),
        ("no-engine", "PERMISSION_DENIED"),
    ],
)
def test_a_missing_wrong_or_insufficient_token_is_refused_before_any_server_starts(spark_dev, run_client, who,
                                                                                   status):  # fmt: skip
    token = {"missing": None, "wrong": "loam_" + "0" * 16 + "_" + "1" * 64}.get(
        who, spark_dev.tokens.get(who)
    )
    starts_before = "".join(spark_dev.lines).count("started Sail for namespace")
    out = run_client(REFUSED, token=token, session=False)
    assert out["outcome"] != "answered"
    assert status in out["message"]
    assert out["seconds"] < 10  # refused at once, not retried for minutes
    assert "".join(spark_dev.lines).count("started Sail for namespace") == starts_before


def test_namespaces_never_share_a_server_or_views(spark_dev, run_client):
    make_view = """
    from pyspark.sql import functions as F
    spark.sql("select '{ns}' as owner").createOrReplaceGlobalTempView("shared_name")
    pid = F.udf(lambda _: os.getpid(), "long")
    out = {{"pid": spark.range(1).select(pid("id").alias("p")).collect()[0].p}}
    out["own"] = spark.sql("select owner from global_temp.shared_name").collect()[0].owner
    print(json.dumps(out))
    """
    alpha = run_client(make_view.format(ns="alpha"), token=spark_dev.tokens["alpha"])
    beta = run_client(
        """
        from pyspark.sql import functions as F
        pid = F.udf(lambda _: os.getpid(), "long")
        out = {"pid": spark.range(1).select(pid("id").alias("p")).collect()[0].p}
        try:
            out["seen"] = spark.sql("select owner from global_temp.shared_name").collect()[0].owner
        except Exception as e:
            out["seen"] = type(e).__name__
        print(json.dumps(out))
        """,
        token=spark_dev.tokens["beta"],
    )
    assert alpha["own"] == "alpha"
    assert alpha["pid"] != beta["pid"]
    assert beta["seen"] == "AnalysisException"  # alpha's view does not exist for beta


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/status") as f:
        return "State:\tZ" not in f.read()


def test_an_idle_server_stops_and_the_next_session_starts_it_again(spark_dev, run_client):
    code = """
    from pyspark.sql import functions as F
    pid = F.udf(lambda _: os.getpid(), "long")
    out = {"pid": spark.range(1).select(pid("id").alias("p")).collect()[0].p}
    spark.stop()
    print(json.dumps(out))
    """
    # A namespace of its own: a session left open (a client that never called
    # spark.stop()) keeps its server up until Sail's session timeout, by design.
    first = run_client(code, token=spark_dev.tokens["gamma"])
    deadline = time.monotonic() + 20  # --sail-idle 2
    while _alive(first["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(first["pid"])
    second = run_client(code, token=spark_dev.tokens["gamma"])
    assert second["pid"] != first["pid"]


def test_a_server_that_cannot_start_is_an_error_pyspark_does_not_retry(tmp_path, spark_python, run_client):
    import asyncio

    from sparkdev import make_tokens, start_spark_dev

    data = tmp_path / "data"
    broken = start_spark_dev(data, env={"LOAM_SPARK_VENV": str(tmp_path / "no-such-env")})
    try:
        tokens = asyncio.run(make_tokens(data, ["alpha"]))
        out = run_client(REFUSED, token=tokens["alpha"], url=broken.spark_url, session=False)
    finally:
        broken.stop()
    assert "FAILED_PRECONDITION" in out["message"]
    assert "make engines-spark" in out["message"]
    assert out["seconds"] < 10  # not ten minutes of retries


def test_a_second_loam_dev_on_a_taken_spark_port_stops_with_one_clear_line(spark_dev, tmp_path):
    from sparkdev import start_spark_dev

    with pytest.raises(RuntimeError) as err:
        start_spark_dev(tmp_path / "second", spark_port=spark_dev.spark_port)
    assert "exited with 1" in str(err.value)
    assert f"cannot bind the Spark Connect proxy to 127.0.0.1:{spark_dev.spark_port}" in str(err.value)
