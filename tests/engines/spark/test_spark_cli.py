"""`loam spark`: submit and follow a run from the command line, and `loam spark check`
classifying a script's calls as fine on Sail, needing the JVM Spark Connect server, or
needing spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

RDD = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
counts = spark.sparkContext.parallelize(["a b", "b"]).flatMap(str.split).countByValue()
print(dict(counts))
"""
QUANTILE = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print(spark.range(100).approxQuantile("id", [0.5], 0.01))
"""
PLAIN = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print(spark.range(5).count())
"""
TYPO = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
spark.sql("select no_such_fn(1)").collect()
"""


def loam(server, *argv: str, ns: str = "alpha", timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOAM_", "SPARK_"))}
    cmd = [sys.executable, "-m", "loam.cli", "--url", server.url, "--token", server.tokens[ns], *argv]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)


def test_submit_and_restart_follow_print_the_output_and_exit_with_the_run_status(spark_dev, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import sys\nprint('hello', *sys.argv[1:])\nsys.exit(int(sys.argv[-1]))\n")
    ok = loam(spark_dev, "spark", "submit", "--follow", str(script), "a", "0")
    assert ok.returncode == 0, ok.stderr
    assert "hello a 0" in ok.stdout
    bad = loam(spark_dev, "spark", "submit", "--follow", str(script), "b", "5")
    assert bad.returncode == 5
    assert "failed" in bad.stderr
    listed = json.loads(loam(spark_dev, "--json", "spark", "runs").stdout)
    assert [r["state"] for r in listed[:2]] == ["failed", "succeeded"]
    # restart runs the failed run's script again, followed to the same exit status
    again = loam(spark_dev, "spark", "restart", "--follow", listed[0]["id"])
    assert again.returncode == 5, again.stderr
    assert "hello b 5" in again.stdout
    fresh = json.loads(loam(spark_dev, "--json", "spark", "restart", listed[1]["id"]).stdout)
    assert fresh["id"] not in (listed[0]["id"], listed[1]["id"])  # without --follow: the new run, at once


SLOW = pytest.mark.skipif(
    not os.environ.get("LOAM_TEST_ENGINES"), reason="kept short in make test: make test-engines"
)


@pytest.mark.parametrize(
    ("source", "verdict", "call"),
    [
        pytest.param(PLAIN, "sail", None, marks=SLOW),
        (QUANTILE, "spark-connect-jvm", "approx quantile"),
        (RDD, "spark-submit", "sparkContext"),
        pytest.param(TYPO, "script-error", "no_such_fn", marks=SLOW),
    ],
)
def test_check_classifies_what_a_script_needs(spark_dev, spark_python, tmp_path, source, verdict, call):
    script = tmp_path / "job.py"
    script.write_text(source)
    out = loam(spark_dev, "--json", "spark", "check", "--spark-url", spark_dev.spark_url,
               "--python", str(spark_python), str(script))  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["verdict"] == verdict, report
    if call is not None:
        assert any(call in f["call"] for f in report["findings"]), report


def test_check_prints_a_table_for_people(spark_dev, spark_python, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(RDD)
    table = loam(spark_dev, "spark", "check", "--spark-url", spark_dev.spark_url, "--python", str(spark_python),
                 str(script))  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert "spark-submit" in table.stdout
    assert "sparkContext" in table.stdout
