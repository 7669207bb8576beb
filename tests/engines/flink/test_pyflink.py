"""A PyFlink job (the keyed counter in jobs/py_counter.py) on the cluster through PythonDriver:
deployed, upgraded from a savepoint with its count continuing, cancelled."""

from __future__ import annotations

import pytest
from flinktest import JOBS, NS, Output, first_per_key, last_per_key

from loam_engines.flink.model import JobSpec, Kind, State


@pytest.mark.long
async def test_a_pyflink_counter_continues_its_count_across_an_upgrade(engine, flink_cluster):
    life = engine.lifecycle
    out = Output(flink_cluster, "py-")
    script = (await engine.artifact_put(NS, "py_counter.py", (JOBS / "py_counter.py").read_bytes()))[
        "artifact"
    ]
    mark = out.mark()
    d = await life.deploy(NS, "pycount", JobSpec(Kind.PYTHON, script, args=("--tag", "py-v1")))
    assert d.state == State.RUNNING
    await out.wait(mark, lambda ls: len({c.key for c in ls if c.count >= 3}) == 2, timeout_s=120)

    mark2 = out.mark()
    d = await life.upgrade(NS, "pycount", JobSpec(Kind.PYTHON, script, args=("--tag", "py-v2")))
    assert (d.state, d.version) == (State.RUNNING, 2)
    v1_last = last_per_key([c for c in out.read(mark) if c.tag == "py-v1"])
    v2 = await out.wait(mark2, lambda ls: len({c.key for c in ls if c.tag == "py-v2"}) == 2, timeout_s=120)
    v2_first = first_per_key([c for c in v2 if c.tag == "py-v2"])
    assert all(v2_first[k].count == v1_last[k].count + 1 for k in (0, 1)), (v1_last, v2_first)

    d = await life.cancel(NS, "pycount")
    assert d.state == State.CANCELLED
