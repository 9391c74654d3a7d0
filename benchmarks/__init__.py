"""Reproducible benchmarks: `python -m benchmarks.<name>`; results in benchmarks/README.md."""
