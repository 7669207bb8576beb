"""Loam Jobs' shared library: the store seam and its backends, the key layout, the
job state machine, errors, ids and validation. Every service imports it."""
