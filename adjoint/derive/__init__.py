"""The core passes: with every optimization off, these alone define the derivative.

normalize, inline, types, ssa, grid and parallel (``parallel.py``), hazards, activity,
bounds, reverse and jvp, over the IR of ``ir.py``. ``prune`` and ``order`` are
optimizations (adjoint/build/passes.py) that pass reverse applies as it builds the
backward (its ``pruned`` and ``walk_forward`` switches), so they live beside it:
imports run one way, from ``adjoint/optimize/`` to here.
"""
