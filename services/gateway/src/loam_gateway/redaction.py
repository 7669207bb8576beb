"""The redaction hook: payload fields an operator must not see through REST (a card
number, a password), hidden in every REST read of a job's payload, result and progress
(job lists, a job, search, export, children, redrive previews, schedules, the job
snapshots of the event streams), and left out of what a text search matches, so a
search cannot find a job by a value it would not show.

A rule set is configured on the gateway (`--redact` / `LOAM_REDACT`) as
`[namespace=]field,field;...`: a rule without a namespace applies to every namespace,
`team-a=card.number` to team-a only. A field is either a key name (`password`: that key
at any depth, in any object, also inside lists) or a dotted path from the payload's
root (`card.number`; `*` matches any one key or list index). A matched value is
replaced by the string REDACTED, whatever it was. Payloads that are not JSON
(`data_base64`) have no fields and are shown as they are.

The hook changes only what the REST facade shows: the stored job, the Connect API and
the workers see the payload unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loam_common import validate
from loam_common.errors import InvalidArgument

REDACTED = "[redacted]"
REDACT_ENV = "LOAM_REDACT"
ALL = "*"

#: applied to a decoded JSON value, returns the value as REST shows it
Redactor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Rules:
    names: frozenset[str]  # a key, at any depth
    paths: tuple[tuple[str, ...], ...]  # a path from the root

    def apply(self, value: Any) -> Any:
        value = _by_name(value, self.names) if self.names else value
        for path in self.paths:
            value = _by_path(value, path)
        return value


def _by_name(value: Any, names: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if k in names else _by_name(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_by_name(v, names) for v in value]
    return value


def _by_path(value: Any, path: tuple[str, ...]) -> Any:
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        keys = list(value) if head == ALL else [head] if head in value else []
        if not keys:
            return value
        out = dict(value)
        for k in keys:
            out[k] = REDACTED if not rest else _by_path(value[k], rest)
        return out
    if isinstance(value, list):
        if head == ALL:
            return [REDACTED if not rest else _by_path(v, rest) for v in value]
        if head.isdigit() and int(head) < len(value):
            out_list = list(value)
            i = int(head)
            out_list[i] = REDACTED if not rest else _by_path(value[i], rest)
            return out_list
    return value


@dataclass(frozen=True)
class Redaction:
    """The configured rules: for every namespace (`*`) and per namespace."""

    fields: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str | None) -> Redaction:
        """`[namespace=]field,field;...` (see the module docstring). Bad input is refused
        with the part that is wrong."""
        out: dict[str, list[str]] = {}
        for part in (spec or "").split(";"):
            part = part.strip()
            if not part:
                continue
            ns, sep, names = part.partition("=")
            if not sep:
                ns, names = ALL, part
            ns = ns.strip()
            if ns != ALL:
                validate.name("redact namespace", ns)
            for f in names.split(","):
                f = f.strip()
                if not f:
                    continue
                if any(not seg for seg in f.split(".")):
                    raise InvalidArgument("redact", f"{f!r} is not a field name or a dotted path")
                out.setdefault(ns, []).append(f)
            if ns not in out:
                raise InvalidArgument("redact", f"{part!r} names no field")
        return cls({ns: tuple(dict.fromkeys(fs)) for ns, fs in out.items()})

    def for_namespace(self, ns: str) -> Redactor | None:
        """The redactor of `ns`'s payloads; None when no rule applies (nothing to do)."""
        chosen = [*self.fields.get(ALL, ()), *self.fields.get(ns, ())]
        if not chosen:
            return None
        names = frozenset(f for f in chosen if "." not in f)
        paths = tuple(tuple(f.split(".")) for f in chosen if "." in f)
        return _Rules(names, paths).apply

    def describe(self) -> str:
        return "; ".join(f"{ns}={','.join(fs)}" for ns, fs in self.fields.items())
