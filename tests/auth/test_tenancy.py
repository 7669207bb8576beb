"""A lease token (queue, job id, epoch) is useless to another namespace's credential:
every call resolves it inside the namespace the credential names, so another tenant
cannot extend, report on or complete the job, and its attempts change nothing.

This runs at the function level — principal from `StoreAuthenticator`, namespace from
the principal only, then `QueueCore` — which is the path the gateway's transports take.
"""

from __future__ import annotations

import pytest

from loam_common import auth, keys
from loam_common.blobs import DirBlobStore
from loam_common.errors import JobsError
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.jobs import states as S
from loam_common.jobs.complete import Fail, Ok
from loam_gateway.auth import StoreAuthenticator, require
from loam_queue_core import QueueCore


async def principal(store, authn, ns, actions):
    token, _ = await store.transact(auth.token_create, ns, actions, "", None)
    return await authn.authenticate({"authorization": f"Bearer {token}"})


async def test_a_lease_token_is_useless_in_another_namespace(store, dump, tmp_path):
    core = QueueCore(store, DirBlobStore(tmp_path / "blobs"))
    authn = StoreAuthenticator(store)
    owner = await principal(store, authn, "acme", [auth.ENQUEUE, auth.CONSUME])
    other = await principal(store, authn, "rival", [auth.ENQUEUE, auth.CONSUME, auth.ADMIN])

    require(owner, auth.ENQUEUE)
    await core.jobs.enqueue(owner.namespace, "emails", pb.TaskSpec(name="send"))
    require(owner, auth.CONSUME)
    (job,) = await core.jobs.lease(owner.namespace, ["emails"], "w-acme")
    lease = ("emails", job.id, job.epoch)

    # The other tenant holds every action and the exact lease token.
    require(other, auth.CONSUME)
    before = await dump()
    attempts = [
        core.jobs.complete(other.namespace, *lease, Ok()),
        core.jobs.complete(other.namespace, *lease, Fail(pb.JobError(message="x"))),
        core.jobs.extend(other.namespace, *lease, 10**9),
        core.jobs.report(other.namespace, *lease, log_line="hi"),
        core.jobs.complete_many(other.namespace, [(*lease, Ok())]),
    ]
    for call in attempts:
        try:
            result = await call
        except JobsError:
            continue
        # a batched call answers per item: the item must be an error
        assert all(isinstance(r, JobsError) for r in result), result
    assert await dump() == before, "another namespace's calls changed nothing"
    # Its own queue of the same name is a different queue: nothing to lease there.
    assert await core.jobs.lease(other.namespace, ["emails"], "w-rival") == []

    # The owner's lease still holds and completes.
    await core.jobs.complete(owner.namespace, *lease, Ok())
    (stored,) = await store.snapshot(_jobs, "acme", "emails")
    assert stored.id == job.id and stored.state == S.COMPLETED


def _jobs(tx, ns, queue):
    k = keys.QueueKeys(ns, queue)
    return [pb.Job.FromString(v) for _k, v in tx.scan(k.jobs(), keys.prefix_end(k.jobs()))]


@pytest.mark.parametrize("action", sorted(auth.ACTIONS))
async def test_a_token_acts_only_with_its_actions(store, action):
    authn = StoreAuthenticator(store)
    p = await principal(store, authn, "acme", [action])
    require(p, action)
    for other in auth.ACTIONS - {action}:
        with pytest.raises(JobsError) as e:
            require(p, other)
        assert e.value.code == "permission_denied" and other in e.value.message
