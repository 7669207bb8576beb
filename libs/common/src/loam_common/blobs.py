"""The blob store for payloads and results over the inline limit (spec §6.7): a
directory by default, S3 (through aioboto3) as an option. A blob is written before
the transaction that references it and deleted after the transaction that drops the
reference commits, so a committed job never points at a missing blob."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import uuid
from pathlib import Path

from loam_common.errors import Unavailable

INLINE_LIMIT = 16 * 1024
_SAFE = re.compile(r"^[A-Za-z0-9._:@/-]+$")


class BlobStore:
    async def put(self, ref: str, data: bytes) -> None:
        raise NotImplementedError

    async def get(self, ref: str) -> bytes:
        """The blob's bytes; FileNotFoundError if there is none."""
        raise NotImplementedError

    async def delete(self, ref: str) -> None:
        raise NotImplementedError


def blob_ref(ns: str, queue: str, job_id: str, what: str) -> str:
    return f"{ns}/{queue}/{job_id}/{what}"


class DirBlobStore(BlobStore):
    """One file per blob under a directory; written to a temporary name, fsynced and
    renamed, so a reader sees the whole blob or none."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, ref: str) -> Path:
        if not _SAFE.match(ref) or ".." in ref.split("/"):
            raise ValueError(f"bad blob reference {ref!r}")
        return self.root / ref

    def _put(self, ref: str, data: bytes) -> None:
        path = self._path(ref)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)  # a partial blob would only take the space back
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                # A full disk is the operator's to fix and the caller's to retry later:
                # unavailable, as when the store itself cannot write.
                raise Unavailable(
                    f"the blob store's disk is full ({self.root}); retry once space returns"
                ) from None
            raise

    async def put(self, ref: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, ref, data)

    async def get(self, ref: str) -> bytes:
        return await asyncio.to_thread(self._path(ref).read_bytes)

    async def delete(self, ref: str) -> None:
        await asyncio.to_thread(self._path(ref).unlink, True)


class S3BlobStore(BlobStore):
    """Blobs in an S3 bucket through aioboto3 (`pip install loam-common[s3]`).
    Credentials and endpoint come from the standard AWS environment."""

    def __init__(self, bucket: str, prefix: str = "", **client_kwargs) -> None:
        import aioboto3  # optional dependency, imported only when configured

        self._session = aioboto3.Session()
        self.bucket = bucket
        self.prefix = prefix
        self._kwargs = client_kwargs

    async def put(self, ref: str, data: bytes) -> None:
        async with self._session.client("s3", **self._kwargs) as s3:
            await s3.put_object(Bucket=self.bucket, Key=self.prefix + ref, Body=data)

    async def get(self, ref: str) -> bytes:
        async with self._session.client("s3", **self._kwargs) as s3:
            try:
                obj = await s3.get_object(Bucket=self.bucket, Key=self.prefix + ref)
            except s3.exceptions.NoSuchKey:  # one error for a missing blob, whatever the store
                raise FileNotFoundError(ref) from None
            return await obj["Body"].read()

    async def delete(self, ref: str) -> None:
        async with self._session.client("s3", **self._kwargs) as s3:
            await s3.delete_object(Bucket=self.bucket, Key=self.prefix + ref)


def open_blobs(url: str) -> BlobStore:
    """`file:///path` / a plain path, or `s3://bucket/prefix`."""
    if url.startswith("s3://"):
        bucket, _, prefix = url[5:].partition("/")
        return S3BlobStore(bucket, prefix + "/" if prefix else "")
    return DirBlobStore(url[7:] if url.startswith("file://") else url)
