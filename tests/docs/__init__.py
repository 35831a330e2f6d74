"""Tests of docs/ and examples/: pages that cannot go stale, the examples and exercises run."""
