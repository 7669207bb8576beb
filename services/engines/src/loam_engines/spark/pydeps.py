"""Python dependencies per namespace: a SparkBatch run's `python_deps` are installed with
the Spark environment's pip into the namespace's own directory
(`<data>/pydeps/<ns>`, `pip install --target`), which is on the `PYTHONPATH` of the
namespace's Sail server (where its Python UDFs run) and of its runs' scripts. The Spark
environment itself never changes, and one namespace's packages are not another's.

A requirement is one pip requirement or a path to a wheel; options (anything starting
with `-`) are refused, so a run cannot point pip at another index or a config file.
Installs into one namespace run one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from loam_common.errors import InvalidArgument, Unavailable
from loam_engines import processes

INSTALL_TIMEOUT_S = 600


def check_requirements(deps: Sequence[str], field: str) -> None:
    if len(deps) > 100:
        raise InvalidArgument(field, "at most 100 requirements")
    for i, dep in enumerate(deps):
        if not dep.strip() or len(dep) > 512 or "\n" in dep or "\0" in dep:
            raise InvalidArgument(f"{field}[{i}]", "is not a requirement")
        if dep.lstrip().startswith("-"):
            raise InvalidArgument(f"{field}[{i}]", f"{dep!r} is a pip option, not a requirement")


class NamespaceDeps:
    def __init__(self, root: Path, python: Path | None) -> None:
        self.root = root
        self.python = python
        self._locks: dict[str, asyncio.Lock] = {}

    def path(self, ns: str) -> Path:
        """The namespace's directory (created: it must be on sys.path from the start)."""
        d = self.root / processes.path_part(ns)
        d.mkdir(parents=True, exist_ok=True)
        return d

    async def install(self, ns: str, deps: Sequence[str]) -> str:
        """Install `deps` for the namespace; pip's last lines, or Unavailable with them."""
        if not deps:
            return ""
        if self.python is None:
            raise Unavailable("no Spark environment on this runner: run `make engines-spark`")
        target = self.path(ns)
        async with self._locks.setdefault(ns, asyncio.Lock()):
            child = await processes.spawn(
                f"pip-{ns}",
                [str(self.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                 "--upgrade", "--target", str(target), "--", *deps],
                env=processes.child_env(),
            )  # fmt: skip
            try:
                out, err = await asyncio.wait_for(child.proc.communicate(), INSTALL_TIMEOUT_S)
            except TimeoutError:
                await child.stop(1.0)
                raise Unavailable(f"installing {', '.join(deps)} took over {INSTALL_TIMEOUT_S}s") from None
            if child.proc.returncode != 0:
                tail = " | ".join((err or out).decode(errors="replace").strip().splitlines()[-3:])
                raise Unavailable(f"installing {', '.join(deps)} failed: {tail}")
            return (out or b"").decode(errors="replace").strip()
