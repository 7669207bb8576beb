"""`loam spark check`: run a PySpark script on the namespace's Sail and say whether it
needs Apache Spark instead.

The script runs in a Python that has PySpark (`--python`, $LOAM_SPARK_PYTHON, the
checkout's `.engines/spark`, else `python3`), under a small harness (this file run as a
script: it needs PySpark only) with `SPARK_REMOTE` naming the endpoint and the token.
What it reports:

| finding | meaning | verdict |
|---|---|---|
| a script line using `.rdd`, `sparkContext`, `SparkContext` (static scan) | RDD / SparkContext code: not in Spark Connect at all | `spark-submit` |
| `JVM_ATTRIBUTE_NOT_SUPPORTED` (PySparkAttributeError) | the same, met at run time | `spark-submit` |
| `UnsupportedOperationException`, `No data source found for:` | a feature Sail lacks | `spark-connect-jvm` |
| `unknown function: f` with `f` a Spark function | a function Sail lacks | `spark-connect-jvm` |
| any other exception | an error of the script itself | `script-error` |
| none | it ran on Sail | `sail` |

A script stops at its first failure, so a run finds at most one runtime gap; the static
scan lists every RDD / SparkContext line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

STATIC = re.compile(r"\.rdd\b|\bsparkContext\b|\bSparkContext\b")
VERDICT_ORDER = ("spark-submit", "spark-connect-jvm", "script-error", "sail")


def static_findings(source: str) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(source.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        m = STATIC.search(line)
        if m:
            out.append({"line": n, "call": m.group(0).lstrip("."), "kind": "rdd-or-sparkcontext",
                        "verdict": "spark-submit", "detail": line.strip()[:200]})  # fmt: skip
    return out


def classify(exc: BaseException) -> dict[str, Any]:
    """One runtime finding from the exception a script raised."""
    name = type(exc).__name__
    cond = ""
    try:
        cond = exc.getCondition() or ""  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not a PySpark error
        pass
    message = str(exc).strip()
    first = message.splitlines()[0][:300] if message else name
    if cond == "JVM_ATTRIBUTE_NOT_SUPPORTED" or "JVM_ATTRIBUTE_NOT_SUPPORTED" in message:
        m = re.search(r"Attribute `([^`]+)`", message)
        return {"call": m.group(1) if m else "", "kind": "rdd-or-sparkcontext", "verdict": "spark-submit",
                "error": name, "detail": first}  # fmt: skip
    unknown = re.search(r"unknown function: (\w+)", message)
    if unknown:
        fn = unknown.group(1)
        try:
            from pyspark.sql import functions as F  # noqa: N812

            known = hasattr(F, fn)
        except ImportError:
            known = False
        return {"call": fn, "kind": "unsupported-function" if known else "unknown-function",
                "verdict": "spark-connect-jvm" if known else "script-error", "error": name, "detail": first}  # fmt: skip
    if name == "UnsupportedOperationException" or "UnsupportedOperationException" in message[:200]:
        feature = re.sub(r"^\[[A-Z_.]+\]\s*", "", first)
        return {"call": feature, "kind": "unsupported-on-sail", "verdict": "spark-connect-jvm", "error": name,
                "detail": first}  # fmt: skip
    if "No data source found for:" in message:
        fmt = message.split("No data source found for:", 1)[1].split()[0].strip("`'\".")
        return {"call": f"format {fmt}", "kind": "unsupported-on-sail", "verdict": "spark-connect-jvm",
                "error": name, "detail": first}  # fmt: skip
    return {"call": "", "kind": "script-error", "verdict": "script-error", "error": name, "detail": first}


def verdict(findings: list[dict[str, Any]]) -> str:
    seen = {f["verdict"] for f in findings}
    return next((v for v in VERDICT_ORDER if v in seen), "sail")


def find_python() -> str:
    env = os.environ.get("LOAM_SPARK_PYTHON")
    if env:
        return env
    for d in [Path.cwd(), *Path.cwd().parents, *Path(__file__).resolve().parents]:
        p = d / ".engines" / "spark" / "bin" / "python"
        if p.exists():
            return str(p)
    return "python3"


def check(script: Path, *, url: str, token: str | None, python: str | None = None, args: list[str] | None = None,
          timeout: float = 600) -> dict[str, Any]:  # fmt: skip
    """Run `script` on Sail under the harness; the report as a dict."""
    source = script.read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.pop("LOAM_TOKEN", None)
    base = url.rstrip("/")
    env["SPARK_REMOTE"] = f"{base}/;token={token}" if token else base
    proc = subprocess.run([python or find_python(), __file__, str(script), *(args or [])], env=env, timeout=timeout,
                          capture_output=True, text=True, check=False)  # fmt: skip
    report = None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith('{"loam_check"'):
            report = json.loads(line)["loam_check"]
            break
    if report is None:
        raise RuntimeError(
            f"the check harness did not report (exit {proc.returncode}): {proc.stderr.strip()[-500:]}"
        )
    findings = static_findings(source) + report["findings"]
    return {"script": str(script), "verdict": verdict(findings), "findings": findings,
            "exit_code": report["exit_code"], "seconds": report["seconds"]}  # fmt: skip


def _harness(argv: list[str]) -> int:
    """Run in the PySpark python: execute the script, report one JSON line."""
    import runpy
    import time

    script, rest = argv[0], argv[1:]
    sys.argv = [script, *rest]
    findings: list[dict[str, Any]] = []
    code = 0
    t0 = time.monotonic()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:  # noqa: BLE001 - every failure is a finding
        findings.append(classify(e))
        code = 1
    sys.stdout.flush()
    report = {"findings": findings, "exit_code": code, "seconds": round(time.monotonic() - t0, 3)}
    print(json.dumps({"loam_check": report}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_harness(sys.argv[1:]))
