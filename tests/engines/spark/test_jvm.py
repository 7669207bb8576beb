"""The JVM fallback: SparkSubmit runs RDD / SparkContext scripts with Apache Spark's
spark-submit, and a namespace's Apache Spark Connect server serves the calls Sail lacks
through the same proxy. The Connect server takes ~4 s to start and ~1 GB: that test runs
under `make test-engines` (LOAM_TEST_ENGINES=1) only."""

from __future__ import annotations

import asyncio
import os

import pytest

import loam
from loam_common.gen.loam.jobs.v1 import engines_pb2 as E

WORD_COUNT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
words = spark.sparkContext.parallelize(["b a", "a"]).flatMap(str.split)
print(sorted(words.map(lambda w: (w, 1)).reduceByKey(lambda x, y: x + y).collect()))
sys.exit(int(sys.argv[1]))
"""


async def test_spark_submit_runs_rdd_code_with_its_exit_status(spark_dev, spark_jvm):
    async with loam.Client(spark_dev.url, token=spark_dev.tokens["alpha"]) as c:
        ok = await c.submit_spark(WORD_COUNT.encode(), entrypoint="wc.py", args=["0"], jvm=True)
        assert ok.job.engine == E.ENGINE_KIND_SPARK_JVM
        ok = await asyncio.wait_for(c.wait_engine_run(ok.id), 180)
        lines, _ = await c.engine_run_logs(ok.id)
    assert ok.state == E.ENGINE_RUN_STATE_SUCCEEDED, [x.line for x in lines][-20:]
    assert ("stdout", "[('a', 2), ('b', 1)]") in [(x.stream, x.line) for x in lines]
    assert not [x for x in lines if " INFO " in x.line]  # Spark's own INFO lines are kept out


@pytest.mark.skipif(not os.environ.get("LOAM_TEST_ENGINES"), reason="slow (JVM): make test-engines")
def test_the_jvm_connect_server_serves_what_sail_lacks_through_the_proxy(spark_dev, spark_jvm, run_client):
    code = """
    out = {{"quantile": spark.range(101).approxQuantile("id", [0.5], 0.0)[0]}}
    out["sql"] = spark.sql("select 1 + 1 as two").collect()[0].two
    try:
        spark.sql("select no_such_column").collect()
    except Exception as e:
        out["error"] = [type(e).__name__, e.getCondition()]
    spark.stop()
    print(json.dumps(out))
    """
    url = spark_dev.spark_url + "/;x-loam-engine=jvm"
    out = run_client(code.replace("{{", "{").replace("}}", "}"), token=spark_dev.tokens["alpha"], url=url,
                     timeout=300)  # fmt: skip
    assert out["quantile"] == 50.0
    assert out["sql"] == 2
    assert out["error"][0] == "AnalysisException"
    assert out["error"][1].startswith("UNRESOLVED_COLUMN")
