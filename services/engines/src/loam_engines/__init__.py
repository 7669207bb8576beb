"""Loam's engine runner: engines that run user jobs unmodified (Flink in `flink/`)."""
