"""The job states and the moves allowed between them (spec §6.4). `QueueTx.move`
checks every move against ALLOWED, so an illegal transition cannot happen silently;
docs/states.md draws the same table and a test keeps the two in step."""

from __future__ import annotations

from loam_common.gen.loam.jobs.v1 import types_pb2 as pb

WAITING = pb.JOB_STATE_WAITING
PRIORITIZED = pb.JOB_STATE_PRIORITIZED
DELAYED = pb.JOB_STATE_DELAYED
ACTIVE = pb.JOB_STATE_ACTIVE
WAITING_CHILDREN = pb.JOB_STATE_WAITING_CHILDREN
COMPLETED = pb.JOB_STATE_COMPLETED
FAILED = pb.JOB_STATE_FAILED
DEAD_LETTERED = pb.JOB_STATE_DEAD_LETTERED
CANCELED = pb.JOB_STATE_CANCELED

READY = frozenset({WAITING, PRIORITIZED})
FINISHED = frozenset({COMPLETED, FAILED, DEAD_LETTERED, CANCELED})
# States kept in the `s/` index (by the time the job entered them).
STATE_INDEXED = frozenset({WAITING_CHILDREN, COMPLETED, FAILED, DEAD_LETTERED, CANCELED})

NAMES = {
    WAITING: "waiting",
    PRIORITIZED: "prioritized",
    DELAYED: "delayed",
    ACTIVE: "active",
    WAITING_CHILDREN: "waiting-children",
    COMPLETED: "completed",
    FAILED: "failed",
    DEAD_LETTERED: "dead-lettered",
    CANCELED: "canceled",
}
BY_NAME = {v: k for k, v in NAMES.items()}

# from-state -> the states a job may move to. Removal (deleting the record) is allowed
# from every state and is not a move.
ALLOWED: dict[int, frozenset[int]] = {
    WAITING: frozenset({WAITING, PRIORITIZED, ACTIVE, DELAYED, CANCELED, FAILED, WAITING_CHILDREN}),
    PRIORITIZED: frozenset({WAITING, PRIORITIZED, ACTIVE, DELAYED, CANCELED, FAILED, WAITING_CHILDREN}),
    DELAYED: frozenset({WAITING, PRIORITIZED, DELAYED, CANCELED, FAILED}),
    ACTIVE: frozenset(
        {WAITING, PRIORITIZED, DELAYED, COMPLETED, FAILED, DEAD_LETTERED, WAITING_CHILDREN, CANCELED}
    ),
    WAITING_CHILDREN: frozenset({WAITING, PRIORITIZED, DELAYED, FAILED, CANCELED}),
    COMPLETED: frozenset({WAITING, PRIORITIZED}),  # JobOp::Retry
    FAILED: frozenset({WAITING, PRIORITIZED, DEAD_LETTERED}),  # JobOp::Retry, late DLQ
    DEAD_LETTERED: frozenset({WAITING, PRIORITIZED}),
    CANCELED: frozenset({WAITING, PRIORITIZED}),
}


def name(state: int) -> str:
    return NAMES.get(state, "unknown")


def ready_state(priority: int) -> int:
    return PRIORITIZED if priority else WAITING
