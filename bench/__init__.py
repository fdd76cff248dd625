"""Benchmark harness: stream-osc against the server-side copy, ALTER, pt-osc and gh-ost (`python -m bench`)."""
