"""Benchmarks: `make bench` and its parts. Run from the repository root (`python -m benchmarks.X` or
`python benchmarks/X.py`); none of this ships in the leakwatch package."""
