"""API tokens: create, verify, list, revoke, expiry; every bad token is Unauthenticated
with one message and changes nothing; a token without an action is PermissionDenied;
the store never holds a secret."""

from __future__ import annotations

import pytest

from loam_common import auth, keys
from loam_common.auth import Principal, token_create, token_list, token_revoke, token_verify
from loam_common.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated
from loam_gateway.auth import DevAuthenticator, StoreAuthenticator, check_bind, require

SEC = 1_000_000_000


async def create(store, ns="acme", actions=("jobs:enqueue",), name="", expires_ns=None):
    return await store.transact(token_create, ns, list(actions), name, expires_ns)


async def verify(store, token):
    return await store.snapshot(token_verify, token)


# -- create / verify ---------------------------------------------------------------------
async def test_create_then_verify(store, clock):
    token, rec = await create(store, actions=["jobs:consume", "jobs:enqueue", "jobs:consume"], name="ci")
    assert token.startswith("loam_") and token.count("_") == 2
    _, token_id, secret = token.split("_")
    assert len(bytes.fromhex(secret)) >= 32
    assert rec.id == token_id and rec.namespace == "acme" and rec.name == "ci"
    assert list(rec.actions) == ["jobs:consume", "jobs:enqueue"]  # deduplicated, sorted
    assert rec.created_ns == clock.now_ns() and rec.expires_ns == 0 and not rec.revoked
    assert rec.secret_sha256 == b""  # the caller's copy carries no hash either

    p = await verify(store, token)
    assert p == Principal("acme", frozenset({"jobs:consume", "jobs:enqueue"}), token_id, 0)
    assert p.can("jobs:enqueue") and not p.can("jobs:admin")


async def test_tokens_are_distinct(store):
    a, ra = await create(store)
    b, rb = await create(store)
    assert a != b and ra.id != rb.id
    assert (await verify(store, a)).token_id == ra.id
    assert (await verify(store, b)).token_id == rb.id


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ns": "bad/ns"}, "namespace"),
        ({"ns": ""}, "namespace"),
        ({"actions": []}, "actions"),
        ({"actions": ["jobs:enqueue", "jobs:everything"]}, "actions"),
        ({"name": "x" * 200}, "name"),
        ({"expires_ns": -5}, "expires_ns"),
    ],
)
async def test_create_refuses_bad_input_and_writes_nothing(store, dump, kwargs, field):
    before = await dump()
    with pytest.raises(InvalidArgument) as e:
        await create(store, **kwargs)
    assert e.value.field == field
    assert await dump() == before


async def test_create_refuses_an_expiry_in_the_past(store, dump, clock):
    with pytest.raises(InvalidArgument) as e:
        await create(store, expires_ns=clock.now_ns())
    assert e.value.field == "expires_ns"
    assert await dump() == []


def test_actions_accept_a_comma_list():
    assert auth.check_actions("jobs:admin, jobs:enqueue") == ["jobs:admin", "jobs:enqueue"]


# -- list / revoke -----------------------------------------------------------------------
async def test_list_by_namespace(store, clock):
    _, a = await create(store, ns="acme", name="a")
    clock.advance(1)
    _, b = await create(store, ns="acme", name="b")
    clock.advance(1)
    _, c = await create(store, ns="other", name="c")
    every = await store.snapshot(token_list)
    assert [r.id for r in every] == [a.id, b.id, c.id]
    assert [r.id for r in await store.snapshot(token_list, "acme")] == [a.id, b.id]
    assert [r.id for r in await store.snapshot(token_list, "other")] == [c.id]
    assert await store.snapshot(token_list, "nobody") == []
    assert all(r.secret_sha256 == b"" for r in every)


async def test_revoke(store, clock):
    token, rec = await create(store)
    clock.advance(7)
    revoked = await store.transact(token_revoke, rec.id)
    assert revoked.revoked and revoked.revoked_ns == clock.now_ns()
    with pytest.raises(Unauthenticated):
        await verify(store, token)
    # idempotent: the first revocation time stays
    clock.advance(7)
    again = await store.transact(token_revoke, rec.id)
    assert again.revoked_ns == revoked.revoked_ns
    listed = await store.snapshot(token_list, "acme")
    assert [r.revoked for r in listed] == [True]
    assert await store.snapshot(token_list, "acme", False) == []


@pytest.mark.parametrize("token_id", ["0123456789abcdef", "nope", ""])
async def test_revoke_unknown_is_not_found(store, dump, token_id):
    await create(store)
    before = await dump()
    with pytest.raises(NotFound):
        await store.transact(token_revoke, token_id)
    assert await dump() == before


async def test_expiry(store, clock):
    token, _ = await create(store, expires_ns=clock.now_ns() + 10 * SEC)
    assert (await verify(store, token)).expires_ns == clock.now_ns() + 10 * SEC
    clock.advance(10 * SEC - 1)
    await verify(store, token)
    clock.advance(1)
    with pytest.raises(Unauthenticated):
        await verify(store, token)


# -- bad tokens --------------------------------------------------------------------------
async def test_every_bad_token_gets_one_message_and_changes_nothing(store, dump, clock):
    good, rec = await create(store)
    revoked, rrec = await create(store)
    await store.transact(token_revoke, rrec.id)
    expiring, _ = await create(store, expires_ns=clock.now_ns() + SEC)
    clock.advance(SEC)
    _, tid, secret = good.split("_")
    wrong_secret = f"loam_{tid}_{'0' * 64}"
    unknown_id = f"loam_{'f' * 16}_{secret}"
    malformed = [
        "",
        "loam",
        "loam__",
        f"loam_{tid}",
        f"loam_{tid}_{secret[:-1]}",
        f"loam_{tid}_{secret}x",
        f"LOAM_{tid}_{secret}",
        f"loam_{tid.upper()}_{secret}",
        f"xoam_{tid}_{secret}",
        f" {good}",
        "Bearer " + good,
    ]
    before = await dump()
    messages = set()
    for bad in [wrong_secret, unknown_id, revoked, expiring, *malformed]:
        with pytest.raises(Unauthenticated) as e:
            await verify(store, bad)
        messages.add(e.value.message)
    assert messages == {auth.INVALID_TOKEN}
    assert await dump() == before
    assert (await verify(store, good)).token_id == rec.id


# -- hashed storage ----------------------------------------------------------------------
def _every_row(tx):
    return tx.scan(b"", b"\xff" * 16)  # commit tokens included


async def test_the_store_never_holds_a_secret(store, dump):
    tokens = [(await create(store, ns=f"ns{i}", actions=sorted(auth.ACTIONS)))[0] for i in range(5)]
    assert all(k.startswith(keys.tokens_all()) for k, _ in await dump())
    rows = await store.snapshot(_every_row)
    assert len(rows) >= 5, "the records are in the store"
    for token in tokens:
        _, tid, secret = token.split("_")
        needles = [token.encode(), secret.encode(), bytes.fromhex(secret), secret[:32].encode()]
        for k, v in rows:
            for needle in needles:
                assert needle not in k and needle not in v
        # the record holds the id and the hash, which is what verification needs
        assert any(k == keys.token(tid) for k, _ in rows)


# -- the gateway's authenticator -----------------------------------------------------------
async def test_authenticator_reads_the_bearer_header(store):
    token, rec = await create(store, actions=["jobs:consume"])
    authn = StoreAuthenticator(store)
    for headers in (
        {"authorization": f"Bearer {token}"},
        {"Authorization": f"bearer   {token} "},
    ):
        p = await authn.authenticate(headers)
        assert p.namespace == "acme" and p.token_id == rec.id


@pytest.mark.parametrize(
    "headers",
    [{}, {"authorization": ""}, {"authorization": "Bearer"}, {"authorization": "Basic dXNlcjpwYXNz"}],
)
async def test_authenticator_missing_token(store, headers):
    with pytest.raises(Unauthenticated) as e:
        await StoreAuthenticator(store).authenticate(headers)
    assert "bearer" in e.value.message.lower()


async def test_authenticator_refuses_bad_tokens(store, dump):
    token, _ = await create(store)
    before = await dump()
    authn = StoreAuthenticator(store)
    for bad in (token[:-1] + ("0" if token[-1] != "0" else "1"), "loam_x_y", "whatever"):
        with pytest.raises(Unauthenticated) as e:
            await authn.authenticate({"authorization": f"Bearer {bad}"})
        assert e.value.message == auth.INVALID_TOKEN
    assert await dump() == before


async def test_authenticator_cache_window(store, clock):
    token, rec = await create(store)
    authn = StoreAuthenticator(store, cache_ttl_ns=5 * SEC)
    headers = {"authorization": f"Bearer {token}"}
    await authn.authenticate(headers)
    await store.transact(token_revoke, rec.id)
    # within the window the cached verification stands ...
    clock.advance(5 * SEC - 1)
    assert (await authn.authenticate(headers)).token_id == rec.id
    # ... and once it ends the revocation takes effect
    clock.advance(1)
    with pytest.raises(Unauthenticated):
        await authn.authenticate(headers)


async def test_authenticator_cache_never_outlives_the_token(store, clock):
    token, _ = await create(store, expires_ns=clock.now_ns() + SEC)
    authn = StoreAuthenticator(store, cache_ttl_ns=60 * SEC)
    headers = {"authorization": f"Bearer {token}"}
    await authn.authenticate(headers)
    clock.advance(SEC)
    with pytest.raises(Unauthenticated):
        await authn.authenticate(headers)


async def test_authenticator_cache_is_bounded(store):
    authn = StoreAuthenticator(store, cache_size=3)
    for _ in range(10):
        token, _ = await create(store)
        await authn.authenticate({"authorization": f"Bearer {token}"})
        assert len(authn._cache) <= 3


async def test_require(store):
    token, _ = await create(store, actions=["jobs:enqueue"])
    p = await StoreAuthenticator(store).authenticate({"authorization": f"Bearer {token}"})
    require(p, "jobs:enqueue")
    for action in ("jobs:consume", "jobs:admin", "jobs:schedule", "jobs:engine"):
        with pytest.raises(PermissionDenied) as e:
            require(p, action)
        assert action in e.value.message
    with pytest.raises(ValueError):
        require(p, "jobs:typo")


# -- no auth: loopback only ---------------------------------------------------------------
async def test_dev_authenticator():
    dev = DevAuthenticator()
    p = await dev.authenticate({})
    assert p.namespace == "default" and p.actions == auth.ACTIONS
    assert (await dev.authenticate({"X-Loam-Namespace": "team-a"})).namespace == "team-a"
    with pytest.raises(InvalidArgument) as e:
        await dev.authenticate({"x-loam-namespace": "a/b"})
    assert e.value.field == "x-loam-namespace"
    # Asked again (its principals are kept by header value), the same answers.
    assert (await dev.authenticate({})).namespace == "default"
    assert (await dev.authenticate({"x-loam-namespace": "team-a"})).namespace == "team-a"
    with pytest.raises(InvalidArgument):
        await dev.authenticate({"x-loam-namespace": "a/b"})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_binds_without_auth(host):
    check_bind(host, auth_enabled=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.com"])
def test_other_addresses_need_auth(host):
    with pytest.raises(ValueError, match="without auth"):
        check_bind(host, auth_enabled=False)
    check_bind(host, auth_enabled=True)
