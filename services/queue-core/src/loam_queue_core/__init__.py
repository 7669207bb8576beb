"""The queue-core service: the JobsService operations of spec §5.1 as async methods
over the shared state machine, plus the long-poll waiters of the queues it serves.
Transports (Connect, REST) call `QueueCore` and only map types."""

from loam_queue_core.core import QueueCore

__all__ = ["QueueCore"]
