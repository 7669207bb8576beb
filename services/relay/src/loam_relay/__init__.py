"""Loam Jobs relay service."""
