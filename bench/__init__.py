"""Benchmark scripts (see docs/benchmarks.md); run them as ``python bench/<name>.py [--quick]``."""
