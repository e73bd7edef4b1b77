"""Support for benchmarks/nkilib_harness.py: the rows (one per nki-library kernel), the comparison rule,
and stand-ins for reference-only dependencies that are not on PyPI."""
