"""The README's five-minute tour, as written: its shell block (enqueue, lease, complete,
counts) runs in bash against a real `loam dev`, with only the port changed, and the job
it leased ends completed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def tour_script() -> str:
    text = README.read_text()
    section = text[text.index("## A five-minute tour") :]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def json_documents(text: str) -> list:
    decoder, out, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) >= 0:
        doc, i = decoder.raw_decode(text, i)
        out.append(doc)
    return out


@pytest.mark.skipif(shutil.which("curl") is None, reason="the tour uses curl")
def test_the_tour_completes_the_job_it_leased(dev_server):
    script = tour_script()
    assert "JobsService/Complete" in script  # the tour ends its lease, not leaves it to stall
    local = script.replace("127.0.0.1:7720", f"127.0.0.1:{dev_server.port}")
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", local], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    answers = json_documents(ran.stdout)  # curl -s adds no newline: documents may share a line
    enqueued, leased, completed, queue = answers
    [lease] = leased["leases"]
    assert lease["token"]["job"] == enqueued["enqueued"]["job"]
    assert completed["completed"] == {"state": "JOB_STATE_COMPLETED", "moved": True}
    assert (queue["counts"]["completed"], queue["counts"]["active"]) == (1, 0), queue
