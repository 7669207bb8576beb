"""API tokens: bearer credentials that carry one namespace and a set of actions.

A token reads `loam_<id>_<secret>`: `id` is 16 hex digits (public: it names the token in
listings and revocation), `secret` is 64 hex digits from `secrets` (256 bits). The store
keeps a `TokenRecord` under `sys/tokens/<id>` (keys.py) with the namespace, actions,
times, an optional name, a revoked flag and sha256(secret) — never the secret itself.
A plain sha256 is enough because the secret is random and high-entropy: there is no
dictionary to run against the hash, so a slow password hash would add only cost.

Every function here is a transition `fn(tx, ...)` for `Store.transact` (create, revoke)
or `Store.snapshot` (list, verify). `token_verify` answers every kind of bad token —
malformed, unknown, wrong secret, revoked, expired — with one Unauthenticated message,
so a caller learns nothing about which tokens exist.

Actions are literal: `jobs:admin` does not imply `jobs:enqueue`. The gateway checks
them with `require` (loam_gateway.auth).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from loam_common import keys, validate
from loam_common.errors import InvalidArgument, NotFound, Unauthenticated
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store.base import Txn
from loam_common.validate import Namespace

ENQUEUE = "jobs:enqueue"
CONSUME = "jobs:consume"
ADMIN = "jobs:admin"
SCHEDULE = "jobs:schedule"
ENGINE = "jobs:engine"
# Read-only: list and look at queues, jobs, schedules, workers and watch their events
# (the console's viewer role). Every read such a token may make is also open to the
# action that method needs on its own (loam_gateway.connect.READABLE).
READ = "jobs:read"
# The deployment's operator: what spans namespaces (every namespace's series on
# /metrics). It grants nothing inside a namespace; a token still names one.
DEPLOYMENT_ADMIN = "deployment:admin"
ACTIONS: frozenset[str] = frozenset({ENQUEUE, CONSUME, ADMIN, SCHEDULE, ENGINE, READ, DEPLOYMENT_ADMIN})

TOKEN_PREFIX = "loam"
ID_BYTES = 8
SECRET_BYTES = 32
_TOKEN_RE = re.compile(r"loam_([0-9a-f]{16})_([0-9a-f]{64})")
_ID_RE = re.compile(r"[0-9a-f]{16}")
MAX_NAME_BYTES = 128

#: the one message for every bad token: no oracle for which part was wrong
INVALID_TOKEN = "invalid, revoked or expired token"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: the namespace every object it touches lives in, and what
    it may do there. `expires_ns` is 0 for a token that never expires."""

    namespace: Namespace
    actions: frozenset[str]
    token_id: str
    expires_ns: int = 0

    def can(self, action: str) -> bool:
        return action in self.actions


def check_actions(actions: Iterable[str], field: str = "actions") -> list[str]:
    """The actions, deduplicated and sorted; InvalidArgument for an unknown or empty set."""
    if isinstance(actions, str):
        actions = [a for a in re.split(r"[,\s]+", actions) if a]
    out = sorted(set(actions))
    if not out:
        raise InvalidArgument(field, f"name at least one of {', '.join(sorted(ACTIONS))}")
    unknown = [a for a in out if a not in ACTIONS]
    if unknown:
        raise InvalidArgument(field, f"unknown action {unknown[0]!r}: use {', '.join(sorted(ACTIONS))}")
    return out


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _public(rec: pb.TokenRecord) -> pb.TokenRecord:
    out = pb.TokenRecord()
    out.CopyFrom(rec)
    out.ClearField("secret_sha256")
    return out


def token_create(
    tx: Txn,
    ns: str,
    actions: Iterable[str],
    name: str = "",
    expires_ns: int | None = None,
) -> tuple[str, pb.TokenRecord]:
    """Make a token for namespace `ns` with `actions`. Returns the token string — the
    only time it exists outside the caller — and its record (without the hash).
    `expires_ns` is an absolute store-clock time; None or 0 means never."""
    validate.name("namespace", ns)
    action_list = check_actions(actions)
    validate.text("name", name or "", MAX_NAME_BYTES)
    now = tx.now_ns()
    if expires_ns:
        validate.time_ns("expires_ns", expires_ns)
        if expires_ns <= now:
            raise InvalidArgument("expires_ns", "is in the past")
    while True:
        token_id = secrets.token_hex(ID_BYTES)
        if tx.get(keys.token(token_id)) is None:
            break
    secret = secrets.token_hex(SECRET_BYTES)
    rec = pb.TokenRecord(
        id=token_id,
        namespace=ns,
        actions=action_list,
        created_ns=now,
        expires_ns=expires_ns or 0,
        name=name or "",
        secret_sha256=_hash(secret),
    )
    tx.put(keys.token(token_id), rec.SerializeToString())
    return f"{TOKEN_PREFIX}_{token_id}_{secret}", _public(rec)


def token_list(tx: Txn, ns: str | None = None, include_revoked: bool = True) -> list[pb.TokenRecord]:
    """Every token (of namespace `ns` if given), oldest first, without hashes."""
    if ns is not None:
        validate.name("namespace", ns)
    prefix = keys.tokens_all()
    out = []
    for _k, raw in tx.scan(prefix, keys.prefix_end(prefix)):
        rec = pb.TokenRecord.FromString(raw)
        if ns is not None and rec.namespace != ns:
            continue
        if rec.revoked and not include_revoked:
            continue
        out.append(_public(rec))
    out.sort(key=lambda r: (r.created_ns, r.id))
    return out


def token_revoke(tx: Txn, token_id: str) -> pb.TokenRecord:
    """Revoke a token by id; revoking a revoked token is a no-op. NotFound if unknown.
    The record stays (revoked) so listings show what existed."""
    if not isinstance(token_id, str) or not _ID_RE.fullmatch(token_id):
        raise NotFound(f"no token with id {token_id!r}")
    raw = tx.get(keys.token(token_id))
    if raw is None:
        raise NotFound(f"no token with id {token_id!r}")
    rec = pb.TokenRecord.FromString(raw)
    if not rec.revoked:
        rec.revoked = True
        rec.revoked_ns = tx.now_ns()
        tx.put(keys.token(token_id), rec.SerializeToString())
    return _public(rec)


def parse_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed token string, else None."""
    if not isinstance(token, str):
        return None
    m = _TOKEN_RE.fullmatch(token)
    return (m.group(1), m.group(2)) if m else None


def token_verify(tx: Txn, token: str) -> Principal:
    """The principal a token string stands for. Unauthenticated, with one message, for
    a malformed, unknown, wrong, revoked or expired token. Reads only."""
    parsed = parse_token(token)
    if parsed is None:
        raise Unauthenticated(INVALID_TOKEN)
    token_id, secret = parsed
    raw = tx.get(keys.token(token_id))
    rec = pb.TokenRecord.FromString(raw) if raw is not None else None
    # Hash and compare even for an unknown id, so the time taken says little either way.
    ok = hmac.compare_digest(_hash(secret), rec.secret_sha256 if rec is not None else b"\0" * 32)
    if rec is None or not ok or rec.revoked or (rec.expires_ns and rec.expires_ns <= tx.now_ns()):
        raise Unauthenticated(INVALID_TOKEN)
    return Principal(
        namespace=rec.namespace,
        actions=frozenset(rec.actions),
        token_id=rec.id,
        expires_ns=rec.expires_ns,
    )
