"""The targets a generated module can be printed for.

``cpu``: ``rt.jit`` (numba on the CPU, or plain Python under ``ADJOINT_JIT=0``).
``cuda``: ``numba.cuda.jit`` grid kernels, for launches with ``device="cuda"``.

This module imports nothing: ``adjoint.generate`` (which ``import adjoint``
loads, also where gast and astor are absent) and the CLI read ``TARGETS``
without loading the transformer.
"""
TARGETS = ("cpu", "cuda")
