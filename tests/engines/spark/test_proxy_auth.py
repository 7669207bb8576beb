"""The Spark Connect proxy's token check, with the gateway's authenticator over a real
store and a real Sail behind it: a token is read from the store once per cache window,
not on every call; a revoked token keeps working at most until its cached check runs
out, then is refused with a code PySpark does not retry, and no server starts for it."""

from __future__ import annotations

import grpc
import pytest

from loam_common.auth import ENGINE, token_create, token_revoke, token_verify
from loam_common.store import LmdbBackend, ManualClock, Store
from loam_engines.spark.proxy import SparkConnectProxy
from loam_engines.spark.sail import SailPool, SailSettings
from loam_gateway.auth import StoreAuthenticator

CONFIG = "/spark.connect.SparkConnectService/Config"
SEC = 1_000_000_000
TTL_NS = 5 * SEC
SESSION = "3f1c2b7a-0d4e-4a51-9c3e-6b2a1f0e9d87"


def config_request(session: str) -> bytes:
    """ConfigRequest{session_id, user_context{user_id}, operation{get{keys: [timeZone]}}},
    serialised by hand (field numbers of Spark Connect's base.proto)."""

    def ld(field: int, payload: bytes) -> bytes:
        assert len(payload) < 128
        return bytes([(field << 3) | 2, len(payload)]) + payload

    return (
        ld(1, session.encode()) + ld(2, ld(1, b"tester")) + ld(3, ld(2, ld(1, b"spark.sql.session.timeZone")))
    )


class CountingStore(Store):
    """The real store, counting the token checks that reach it."""

    verifies = 0

    async def snapshot(self, fn, *args, **kw):
        if fn is token_verify:
            self.verifies += 1
        return await super().snapshot(fn, *args, **kw)


@pytest.fixture
async def proxied(tmp_path, spark_python):
    clock = ManualClock()
    store = CountingStore(LmdbBackend(tmp_path / "store.lmdb", clock=clock))
    pool = SailPool(SailSettings(python=spark_python, work_dir=tmp_path / "sail", pid_dir=tmp_path / "pids"))
    proxy = SparkConnectProxy(StoreAuthenticator(store, cache_ttl_ns=TTL_NS), {"sail": pool}, port=0)
    port = await proxy.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield store, clock, pool, channel.unary_unary(CONFIG)
    finally:
        await channel.close()
        await proxy.stop()
        await pool.close()
        await store.close()


async def test_a_token_is_checked_once_per_window_and_a_revoked_one_stops_within_it(proxied):
    store, clock, pool, config = proxied
    token, rec = await store.transact(token_create, "alpha", [ENGINE], "proxy test")
    auth = [("authorization", f"Bearer {token}")]
    for _ in range(20):
        assert await config(config_request(SESSION), metadata=auth)
    assert store.verifies == 1  # one store read for twenty calls
    assert pool.starts == 1

    await store.transact(token_revoke, rec.id)
    clock.advance(TTL_NS - 1)  # inside the window the cached check still stands ...
    assert await config(config_request(SESSION), metadata=auth)
    clock.advance(1)  # ... and once it ends the revocation holds
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await config(config_request(SESSION), metadata=auth)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert store.verifies == 2
    # a refusal is not cached: every later call is checked again, and refused
    with pytest.raises(grpc.aio.AioRpcError):
        await config(config_request(SESSION), metadata=auth)
    assert store.verifies == 3


async def test_a_revoked_token_never_seen_is_refused_at_once_and_starts_nothing(proxied):
    store, _clock, pool, config = proxied
    token, rec = await store.transact(token_create, "beta", [ENGINE], "proxy test")
    await store.transact(token_revoke, rec.id)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await config(config_request(SESSION), metadata=[("authorization", f"Bearer {token}")])
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert pool.starts == 0
