"""The `loam` command against the probe of issue 23: `--count` checked (at least 1, a
confirmation above a threshold, a hard limit), progress without a terminal, `queues
drain` of a queue larger than one step answering the true total, `queues ls` inside 80
columns with `paused` filled in, and one attempt numbering in `jobs ls`, `jobs get` and a
worker's lease."""

from __future__ import annotations

import os

from test_cli import run

from loam import SyncClient
from loam.cli import CONFIRM_COUNT, DRAIN_STEP, MAX_COUNT


def common(url: str, ns: str) -> list[str]:
    return ["--url", url, "--namespace", ns]


def waiting(url: str, ns: str, queue: str) -> int:
    with SyncClient(url, namespace=ns) as c:
        return c.queue_counts(queue)["waiting"] if queue in [q["name"] for q in c.list_queues()] else 0


def test_count_must_be_positive(url: str, ns: str) -> None:
    for bad in ("-3", "0", "many"):
        p = run("jobs", "add", "c", "t", "--count", bad, *common(url, ns), ok=False)
        assert p.returncode == 2 and "--count" in p.stderr, p.stderr
    assert waiting(url, ns, "c") == 0


def test_a_large_count_asks_first_and_a_huge_one_is_refused(url: str, ns: str) -> None:
    p = run("jobs", "add", "c", "t", "--count", str(CONFIRM_COUNT + 1), *common(url, ns), ok=False, stdin="")
    assert p.returncode == 2 and "--yes" in p.stderr
    p = run("jobs", "add", "c", "t", "--count", str(MAX_COUNT + 1), "--yes", *common(url, ns), ok=False)
    assert p.returncode == 2 and "over the limit" in p.stderr
    assert waiting(url, ns, "c") == 0


def test_a_large_count_with_yes_reports_progress_and_drain_counts_every_step(url: str, ns: str) -> None:
    count = DRAIN_STEP + 7  # more than one drain step
    p = run("jobs", "add", "big", "t", "--count", str(count), "--yes", *common(url, ns))
    assert f"enqueued {count} of {count} job(s)" in p.stdout
    assert f"enqueued {count:,} of {count:,}" in p.stderr  # progress lines without a terminal
    assert waiting(url, ns, "big") == count
    p = run("queues", "drain", "big", *common(url, ns))
    assert p.stdout.strip() == f"big  removed {count} job(s)"
    assert waiting(url, ns, "big") == 0


def test_queues_ls_fits_80_columns_and_says_paused(url: str, ns: str) -> None:
    run("jobs", "add", "sixteen-chars-qq", "t", *common(url, ns))
    run("jobs", "add", "other", "t", *common(url, ns))
    run("queues", "pause", "other", *common(url, ns))
    out = run("queues", "ls", *common(url, ns), env={**os.environ, "COLUMNS": "80"}).stdout
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    header = next(line for line in lines if "queue" in line and "paused" in line)
    assert "wait" in header and "dlq" in header
    rows = {
        line.split()[0]: line.split()
        for line in lines
        if line.split() and line.split()[0] in ("other", "sixteen-chars-qq")
    }
    assert rows["other"][-1] == "yes" and rows["sixteen-chars-qq"][-1] == "no", out


def test_attempt_numbering_is_the_same_everywhere(url: str, ns: str) -> None:
    run("jobs", "add", "att", "t", "--attempts", "3", *common(url, ns))
    with SyncClient(url, namespace=ns) as c:
        (job,) = c.lease("att")
        assert job.attempt == 1
        listed = run("jobs", "ls", "att", *common(url, ns), env={**os.environ, "COLUMNS": "200"}).stdout
        assert "1 of 3" in listed, listed
        assert (
            "1 of 3"
            in run(
                "jobs", "get", "att", job.id, *common(url, ns), env={**os.environ, "COLUMNS": "200"}
            ).stdout
        )
