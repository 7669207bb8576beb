"""docs/states.md's table of moves must be the one states.py enforces."""

import re
from pathlib import Path

from loam_common.jobs import states as S

DOC = Path(__file__).resolve().parents[2] / "docs" / "states.md"


def test_states_doc_matches_allowed_moves():
    rows = {}
    for line in DOC.read_text().splitlines():
        m = re.fullmatch(r"\| ([a-z-]+) \| ([a-z-, ]+) \|", line.strip())
        if m and m.group(1) != "from":
            rows[S.BY_NAME[m.group(1)]] = frozenset(S.BY_NAME[t.strip()] for t in m.group(2).split(","))
    assert rows == S.ALLOWED
