"""The backends: ``numba.njit`` with on-disk caching, or plain Python.

``ADJOINT_JIT=0`` (read when adjoint is imported) makes ``jit`` the identity,
so generated modules run as ordinary Python that pdb can step through.
"""
import os

JIT_ENABLED = os.environ.get("ADJOINT_JIT", "1").strip().lower() not in ("0", "false", "no", "off")


def jit(fn):
    """Compile ``fn`` with ``numba.njit(cache=True)``, or return it as is."""
    if not JIT_ENABLED:
        return fn
    import numba
    return numba.njit(cache=True)(fn)
