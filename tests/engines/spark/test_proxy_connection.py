"""One client connection through the Spark Connect proxy to a real Sail: the connection is
bound to its first call's namespace and engine; a refused call on it (a wrong token,
another namespace, an unknown engine) leaves it usable; a server stream and many calls
with HPACK tables in use both ways come through; every call is released in the pool."""

from __future__ import annotations

import grpc
import pytest
from h2peer import RawClient, ld, request

from loam_common.auth import ENGINE, token_create
from loam_common.store import LmdbBackend, Store
from loam_engines.spark.proxy import SparkConnectProxy
from loam_engines.spark.sail import SailPool, SailSettings
from loam_gateway.auth import StoreAuthenticator

SERVICE = "/spark.connect.SparkConnectService/"
SESSION = "0d6f1f7e-3b2a-4c8d-9e0f-1a2b3c4d5e6f"


def config_request(session: str) -> bytes:
    """ConfigRequest{session_id, user_context, operation{get{keys: [timeZone]}}}."""
    return request(session, ld(3, ld(2, ld(1, b"spark.sql.session.timeZone"))))


def range_plan(session: str) -> bytes:
    """ExecutePlanRequest{session_id, user_context, plan{root{range{end: 10, step: 1}}}}."""
    return request(session, ld(3, ld(1, ld(15, b"\x10\x0a\x18\x01"))))


@pytest.fixture
async def proxied(tmp_path, spark_python):
    store = Store(LmdbBackend(tmp_path / "auth.lmdb"))
    tokens = {}
    for ns in ("alpha", "beta"):
        tokens[ns], _ = await store.transact(token_create, ns, [ENGINE], "connection test")
    pool = SailPool(SailSettings(python=spark_python, work_dir=tmp_path / "sail", pid_dir=tmp_path / "pids"))
    proxy = SparkConnectProxy(StoreAuthenticator(store), {"sail": pool}, port=0)
    port = await proxy.start()
    try:
        yield proxy, pool, port, tokens
    finally:
        await proxy.stop()
        await pool.close()
        await store.close()


async def test_refused_calls_leave_the_connection_bound_and_usable(proxied):
    proxy, pool, port, tokens = proxied
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        config = channel.unary_unary(SERVICE + "Config")
        execute = channel.unary_stream(SERVICE + "ExecutePlan")
        alpha = [("authorization", f"Bearer {tokens['alpha']}")]
        assert await config(config_request(SESSION), metadata=alpha)
        refusals = [
            (
                [("authorization", "Bearer loam_" + "0" * 16 + "_" + "1" * 64)],
                grpc.StatusCode.UNAUTHENTICATED,
            ),
            ([("authorization", f"Bearer {tokens['beta']}")], grpc.StatusCode.PERMISSION_DENIED),
            ([*alpha, ("x-loam-engine", "nope")], grpc.StatusCode.INVALID_ARGUMENT),
        ]
        for metadata, code in refusals:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await config(config_request(SESSION), metadata=metadata)
            assert refused.value.code() == code
            assert await config(config_request(SESSION), metadata=alpha)  # the same connection goes on
        answers = [r async for r in execute(range_plan(SESSION), metadata=alpha)]
        assert answers  # a server stream, relayed frame by frame
        assert len(proxy.connections) == 1
    backend = pool.backend("alpha")
    assert backend is not None and backend.inflight == 0  # every call released
    assert pool.backend("beta") is None  # beta's token on alpha's connection started nothing
    assert pool.starts == 1


async def test_many_calls_with_churning_headers_and_refusals_between_them_decode_right(proxied):
    # The raw client's encoder inserts every call's new `x-call` value in its table (evicting
    # older ones); Sail's answers come encoded against Sail's own table; the proxy's refusals
    # sit between them. Every answer must decode and be the right one.
    _, pool, port, tokens = proxied
    c = await RawClient().connect(port)
    try:
        calls = []
        for i in range(240):
            token = tokens["alpha"] if i % 4 else "loam_bad"
            calls.append((c.call("Config", token, config_request(SESSION), metadata=(("x-call", f"{i}-" + "v" * (i % 60)),)),
                          bool(i % 4)))  # fmt: skip
            if i % 20 == 0:
                await c.ended(calls[-1][0])
        for sid, admitted in calls:
            s = await c.ended(sid)
            if admitted:
                assert s.status == 0, s.trailers
                assert b"timeZone" in bytes(s.data)  # Sail's ConfigResponse for the key asked
            else:
                assert s.status == 16
    finally:
        await c.close()
    assert pool.backend("alpha").inflight == 0
