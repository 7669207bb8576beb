"""Job artifacts (a jar, a PyFlink script, a SQL script) in the blob store, by content.

A reference is `<sha256 hex>/<filename>`, stored under the blob ref
`<ns>/flink/artifacts/<sha256>/<filename>`: the same bytes always get the same reference, a
version's spec names its artifact for good, and a rollback finds it again. Flink needs a
file: `local_path` writes the blob once under the runner's work dir and reuses it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path

from loam_common.blobs import BlobStore
from loam_common.errors import InvalidArgument, NotFound
from loam_engines.flink.model import Kind

_FILENAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
_REF = re.compile(r"([0-9a-f]{64})/([A-Za-z0-9._-]{1,128})")
SUFFIX = {Kind.JAR: ".jar", Kind.PYTHON: ".py", Kind.SQL: ".sql"}
MAX_ARTIFACT = 256 * 1024 * 1024


def kind_of(ref: str) -> Kind:
    """The job kind an artifact's filename says (`.jar`, `.py`, `.sql`)."""
    for kind, suffix in SUFFIX.items():
        if ref.endswith(suffix):
            return kind
    raise InvalidArgument("artifact", f"{ref!r} is not a .jar, .py or .sql file")


class Artifacts:
    def __init__(self, blobs: BlobStore, work_dir: str | Path) -> None:
        self.blobs = blobs
        self.work_dir = Path(work_dir)

    async def put(self, ns: str, filename: str, data: bytes) -> str:
        if not _FILENAME.fullmatch(filename or "") or filename.startswith("."):
            raise InvalidArgument(
                "filename", f"{filename!r} is not a file name: use 1-128 of A-Z a-z 0-9 . _ -"
            )
        kind_of(filename)
        if not data:
            raise InvalidArgument("artifact", "is empty")
        if len(data) > MAX_ARTIFACT:
            raise InvalidArgument("artifact", f"is larger than {MAX_ARTIFACT} bytes")
        ref = f"{hashlib.sha256(data).hexdigest()}/{filename}"
        await self.blobs.put(self._blob(ns, ref), data)
        return ref

    async def get(self, ns: str, ref: str) -> bytes:
        self.check_ref(ref)
        try:
            return await self.blobs.get(self._blob(ns, ref))
        except (FileNotFoundError, KeyError):
            raise NotFound(f"no artifact {ref!r} in this namespace: upload it first") from None

    async def exists(self, ns: str, ref: str) -> bool:
        try:
            await self.get(ns, ref)
        except NotFound:
            return False
        return True

    async def local_path(self, ns: str, ref: str) -> Path:
        """The artifact as a file Flink's JobManager can read."""
        self.check_ref(ref)
        path = self.work_dir / ns / ref
        if not path.exists():
            data = await self.get(ns, ref)
            await asyncio.to_thread(_write_atomically, path, data)
        return path

    @staticmethod
    def check_ref(ref: str) -> None:
        if not isinstance(ref, str) or not _REF.fullmatch(ref):
            raise InvalidArgument("artifact", f"{ref!r} is not an artifact reference (<sha256>/<filename>)")

    @staticmethod
    def _blob(ns: str, ref: str) -> str:
        return f"{ns}/flink/artifacts/{ref}"


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
