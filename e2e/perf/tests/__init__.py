"""Tests of the pure parts of the performance benchmarks (no cluster)."""
