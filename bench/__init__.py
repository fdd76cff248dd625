"""Benchmark harness: stream-osc against the server-side copy, ALTER and pt-osc/gh-ost, interleaved (`python -m bench`)."""
