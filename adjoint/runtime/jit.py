"""Backend selection: which module supplies ``jit`` and the helpers.

``ADJOINT_JIT=0`` (read at import) selects the plain-Python backend, so
generated modules run as ordinary Python that pdb can step through.
``use_backend(name)`` switches for the rest of the process, and ``backend_scope``
for a block; each kernel keeps one compiled module per backend.
"""
import contextlib
import importlib
import os

BACKENDS = {"python": "adjoint.runtime.backend_python", "numba": "adjoint.runtime.backend_numba"}
_current = ["python" if os.environ.get("ADJOINT_JIT", "1").strip().lower()
            in ("0", "false", "no", "off") else "numba"]


def backend():
    """The active backend module (``jit``, ``clamp``, ``stack_new``, ...)."""
    return importlib.import_module(BACKENDS[_current[0]])


def backend_name():
    return _current[0]


def use_backend(name):
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    _current[0] = name


@contextlib.contextmanager
def backend_scope(name):
    old = _current[0]
    use_backend(name)
    try:
        yield
    finally:
        _current[0] = old
