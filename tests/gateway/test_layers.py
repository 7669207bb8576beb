"""The gateway as its own process (`loam gateway`, the split deployment) loads no queue
core: only `loam_gateway.dev`, the composition root of `loam dev`, builds one in
process. `make lint` checks the same statically (.importlinter); this checks what a
fresh interpreter actually loads."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import loam_gateway.__main__, loam_gateway.app, loam_gateway.rest, loam_gateway.rest_events
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("loam_queue_core", "loam_sweeper", "loam_relay"))
print(",".join(loaded))
"""


def test_the_split_gateway_loads_no_other_service():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == ""
