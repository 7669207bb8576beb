"""Loam Jobs sweeper service: the core's sweeps (stalled, delayed, retention, expiry)
for the queue shards this process owns through fenced ownership leases."""

from loam_sweeper.service import SweeperService

__all__ = ["SweeperService"]
