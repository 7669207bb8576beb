"""Loam Jobs: the Python SDK."""
