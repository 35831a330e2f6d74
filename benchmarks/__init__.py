"""Benchmarks of adjoint against hand-written numba, Warp (CPU) and JAX (CPU).

Run ``python benchmarks/run.py`` (``--help`` for options); see docs/benchmarks.md.
"""
