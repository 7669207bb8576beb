"""Loam Jobs gateway service."""
