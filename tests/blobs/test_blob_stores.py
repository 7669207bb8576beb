"""The blob stores behind payloads over the inline limit: the directory store, and the
S3 store against a real S3 API (moto's server on a free local port; no AWS here)."""

from __future__ import annotations

import socket

import pytest

from loam_common.blobs import DirBlobStore, S3BlobStore, open_blobs
from loam_common.gen.loam.jobs.v1 import types_pb2 as pb
from loam_common.store import MemoryBackend, Store
from loam_queue_core import QueueCore

BIG = b"x" * (64 * 1024)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    server_mod = pytest.importorskip("moto.server")
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_store(s3_endpoint, monkeypatch):
    pytest.importorskip("aioboto3")
    boto3 = pytest.importorskip("boto3")
    for k, v in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="loam-blobs")
    return S3BlobStore("loam-blobs", "payloads/", endpoint_url=s3_endpoint)


@pytest.fixture(params=["dir", "s3"])
def any_blobs(request, tmp_path):
    if request.param == "dir":
        return DirBlobStore(tmp_path / "blobs")
    return request.getfixturevalue("s3_store")


async def test_put_get_delete(any_blobs):
    await any_blobs.put("ns/q/job/payload", BIG)
    assert await any_blobs.get("ns/q/job/payload") == BIG
    await any_blobs.delete("ns/q/job/payload")
    with pytest.raises(FileNotFoundError):
        await any_blobs.get("ns/q/job/payload")
    await any_blobs.delete("ns/q/job/payload")  # deleting twice is harmless


async def test_a_large_payload_goes_through_the_blob_store_and_comes_back_on_lease(any_blobs):
    store = Store(MemoryBackend())
    core = QueueCore(store, any_blobs)
    try:
        done = await core.jobs.enqueue("acme", "q", pb.TaskSpec(name="t", payload=pb.Payload(data=BIG)))
        (job,) = await core.jobs.lease("acme", ["q"], "w")
        assert job.id == done.job_id
        assert job.task.payload.blob_ref and job.task.payload.data == BIG
        assert await any_blobs.get(job.task.payload.blob_ref) == BIG
    finally:
        await store.close()


def test_dir_store_refuses_references_that_escape_it(tmp_path):
    blobs = DirBlobStore(tmp_path)
    for bad in ("../etc/passwd", "a/../../b", "a b"):
        with pytest.raises(ValueError):
            blobs._path(bad)


def test_open_blobs_picks_the_store_by_url(tmp_path):
    assert isinstance(open_blobs(str(tmp_path)), DirBlobStore)
    assert isinstance(open_blobs(f"file://{tmp_path}"), DirBlobStore)
