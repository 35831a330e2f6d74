"""The targets a generated module can be printed for (the codes of runtime/targets.py).

``cpu``: ``rt.jit`` (numba on the CPU, or plain Python under ``ADJOINT_JIT=0``).
``cuda``: ``numba.cuda.jit`` grid kernels, for launches with ``device="cuda"``.

This module imports only the runtime's leaf registry: ``adjoint.generate`` (which
``import adjoint`` loads, also where gast and astor are absent) and the CLI read
``TARGETS`` without loading the transformer.
"""
from ..runtime.targets import CODES, code

TARGETS = tuple(CODES)
__all__ = ["CODES", "TARGETS", "code"]
