"""Partition folders."""
