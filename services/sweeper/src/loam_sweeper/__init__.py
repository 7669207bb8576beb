"""Loam Jobs sweeper service."""
