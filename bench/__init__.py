"""Benchmarks: scripts that measure and print a table. Not tests."""
