"""`promise.search`: the query (`PromiseQuery`: an id pattern, a state, tags, a page) and
the index it is answered from (`search_plan`), so a search never reads the whole
namespace.

The indexes, kept by transitions.py in the transaction that changes a promise:
- the promise rows themselves, in id order: an id pattern with a literal prefix
  (`wf-1*`, `wf-1:*`) scans just that prefix; so do `resonate:origin`, `resonate:branch`,
  `resonate:parent` and `resonate:prefix`, which the SDK sets to an id the promise's own
  id extends, so they are not indexed again;
- the tag index `dur/pg/<tag><value><id>`: every other tag (`resonate:target`,
  `resonate:scope`, `resonate:schedule`, the user's own);
- the state index `dur/ps/<group>\\0<id>`: pending, resolved, rejected (the three
  rejected states share one group; the exact state is checked on the record).

Preference: an id prefix, then an indexed tag, then an id-derived tag, then the state;
a query with none of them pages through all promises in id order. Every path is in id
order, so the cursor is the last id looked at and the next page starts after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loam_common import keys
from loam_durable.records import (
    PENDING,
    REJECTED,
    REJECTED_CANCELED,
    REJECTED_TIMEDOUT,
    RESOLVED,
    TAG_BRANCH,
    TAG_ORIGIN,
    TAG_PARENT,
    TAG_PREFIX,
    bad,
    check_tags,
)

SEARCH_LIMIT_MAX = 1000
#: records one page may read before it answers with what it found (and a cursor)
SEARCH_EXAMINE = 5000
STATES = (PENDING, RESOLVED, REJECTED, REJECTED_CANCELED, REJECTED_TIMEDOUT)
#: tags the SDK sets to an id the promise's own id extends: found by id prefix
ID_TAGS = (TAG_ORIGIN, TAG_BRANCH, TAG_PARENT, TAG_PREFIX)


def state_group(state: str) -> str:
    """The state index's group: `rejected` holds every rejected state."""
    return REJECTED if state.startswith(REJECTED) else state


def indexed_tags(tags: dict[str, str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in tags.items() if k not in ID_TAGS]


@dataclass(frozen=True, slots=True)
class PromiseQuery:
    """A checked `promise.search`. `state` `rejected` matches all three rejected states."""

    id_pattern: str | None
    state: str | None
    tags: dict[str, str]
    limit: int
    cursor: str
    id_re: re.Pattern[str] | None = None

    def matches(self, p: dict) -> bool:
        if self.state is not None and p["state"] != self.state and state_group(p["state"]) != self.state:
            return False
        if any(p["tags"].get(k) != v for k, v in self.tags.items()):
            return False
        return self.id_re is None or self.id_re.fullmatch(p["id"]) is not None

    @property
    def id_prefix(self) -> str:
        """The literal part of the id pattern before its first `*`."""
        if self.id_pattern is None:
            return ""
        return self.id_pattern.split("*", 1)[0]


def parse_promise_query(data: dict) -> PromiseQuery:
    pattern = data.get("id")
    if pattern is not None and (not isinstance(pattern, str) or not pattern or "\x00" in pattern):
        raise bad("id must be a non-empty pattern (a `*` matches any run of characters)")
    state = data.get("state")
    if state is not None and state not in STATES:
        raise bad("state must be pending, resolved, rejected, rejected_canceled or rejected_timedout")
    limit = data.get("limit", 10)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= SEARCH_LIMIT_MAX:
        raise bad(f"limit must be between 1 and {SEARCH_LIMIT_MAX}")
    cursor = data.get("cursor") or ""
    if not isinstance(cursor, str):
        raise bad("cursor must be a string")
    id_re = None
    if pattern is not None and pattern.strip("*"):
        id_re = re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)
    return PromiseQuery(pattern, state, check_tags(data.get("tags")), limit, cursor, id_re)


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """Scan [start, end); the promise id starts at byte `id_at` of each key; `by_index`
    rows are index entries whose records are read by id."""

    start: bytes
    end: bytes
    id_at: int
    by_index: bool


def _after(prefix: bytes, cursor: str) -> bytes:
    return prefix + cursor.encode() + b"\x00"


def search_plan(ns: str, q: PromiseQuery) -> SearchPlan:
    promises = keys.durable_promises(ns)
    if q.id_prefix:
        return id_range(promises, q.id_prefix, q.cursor)
    tags = indexed_tags(q.tags)
    if tags:
        tag, value = tags[0]
        prefix = keys.durable_promise_tags(ns, tag, value)
        return SearchPlan(
            _after(prefix, q.cursor) if q.cursor else prefix, keys.prefix_end(prefix), len(prefix), True
        )
    for tag in ID_TAGS:  # one workflow's promises: narrower than a whole state
        if tag in q.tags:
            return id_range(promises, q.tags[tag], q.cursor)
    if q.state is not None:
        prefix = keys.durable_promise_states(ns, state_group(q.state))
        return SearchPlan(
            _after(prefix, q.cursor) if q.cursor else prefix, keys.prefix_end(prefix), len(prefix), True
        )
    return SearchPlan(
        _after(promises, q.cursor) if q.cursor else promises, keys.prefix_end(promises), len(promises), False
    )


def id_range(promises: bytes, id_prefix: str, cursor: str) -> SearchPlan:
    """The promise rows whose id starts with `id_prefix`, after `cursor` (an id)."""
    prefix = promises + id_prefix.encode()
    start = prefix
    if cursor:
        start = max(start, _after(promises, cursor))
    return SearchPlan(start, keys.prefix_end(prefix), len(promises), False)


def index_rows(ns: str, p: dict) -> list[bytes]:
    """The index keys of promise record `p` (its state and its indexed tags)."""
    return [keys.durable_promise_state(ns, state_group(p["state"]), p["id"])] + [
        keys.durable_promise_tag(ns, k, v, p["id"]) for k, v in indexed_tags(p["tags"])
    ]
