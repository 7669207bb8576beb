"""Loam Jobs relay service: outbox → per-queue event log, in order per shard, exactly
once, for the queue shards this process owns through fenced ownership leases."""

from loam_relay.service import RelayReport, RelayService

__all__ = ["RelayReport", "RelayService"]
