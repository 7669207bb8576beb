"""A run's history: every client operation with its invocation time, its result and the
time the result arrived (the shape of a Jepsen history). `ok` is a definite success,
`fail` a definite refusal, `info` an unknown outcome (a timeout or a dropped connection:
the server may or may not have done it).

Operations: `enqueue` (value: the job id), `lease` (value: the leases, each job id,
epoch, subject), `complete` (args: job id, epoch), `watch` (value: events received).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Op:
    kind: str
    process: str
    args: dict[str, Any]
    invoked: float
    status: str = "pending"  # ok | fail | info
    completed: float = 0.0
    value: Any = None
    error: str = ""


@dataclass
class History:
    ops: list[Op] = field(default_factory=list)
    #: faults injected by kind (kill9:queue-core, stop:sweeper, disk-full, ...)
    faults: Counter[str] = field(default_factory=Counter)
    #: malformed or hostile requests sent during the run, and those answered wrongly (a 500, or accepted)
    bad_inputs: int = 0
    bad_input_failures: list[str] = field(default_factory=list)

    def invoke(self, kind: str, process: str, **args: Any) -> Op:
        op = Op(kind, process, args, time.monotonic())
        self.ops.append(op)
        return op

    @staticmethod
    def ok(op: Op, value: Any = None) -> None:
        op.status, op.completed, op.value = "ok", time.monotonic(), value

    @staticmethod
    def fail(op: Op, error: str) -> None:
        op.status, op.completed, op.error = "fail", time.monotonic(), error

    @staticmethod
    def info(op: Op, error: str) -> None:
        op.status, op.completed, op.error = "info", time.monotonic(), error

    def of(self, kind: str, status: str | None = None) -> list[Op]:
        return [o for o in self.ops if o.kind == kind and (status is None or o.status == status)]

    def dump(self, path: Path) -> None:
        """The history as JSON lines, for a failure's post-mortem."""
        with path.open("w") as f:
            for op in self.ops:
                f.write(json.dumps(asdict(op), default=str) + "\n")
