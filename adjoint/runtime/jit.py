"""Backend selection: which module supplies ``jit`` and the helpers.

``ADJOINT_JIT=0`` (read at import) selects the plain-Python backend, so
generated modules run as ordinary Python that pdb can step through.
``use_backend(name)`` switches for the rest of the process, and ``backend_scope``
for a block; each kernel keeps one compiled module per backend.
"""
import contextlib
import importlib
import os

from .array import _default_device
from .backend_cuda import require_cuda

BACKENDS = {"python": "adjoint.runtime.backend_python", "numba": "adjoint.runtime.backend_numba",
            "cuda": "adjoint.runtime.backend_cuda"}
_current = ["python" if os.environ.get("ADJOINT_JIT", "1").strip().lower()
            in ("0", "false", "no", "off") else "numba"]


def backend(name=None):
    """The backend module generated code binds to ``rt``: ``backend("cuda")`` for CUDA
    modules; otherwise the active CPU backend (python or numba)."""
    if name is None:
        name = cpu_backend_name()
    return importlib.import_module(BACKENDS[name])


def backend_name():
    """The active backend: python, numba or cuda (cuda: arrays default to the GPU)."""
    return _current[0]


def cpu_backend_name():
    """The backend CPU launches use: python, or numba (also while cuda is active)."""
    return "python" if _current[0] == "python" else "numba"


def use_backend(name):
    """Switch backend: 'python', 'numba', or 'cuda' (new arrays default to device='cuda')."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "cuda":
        require_cuda()
    _current[0] = name
    _default_device[0] = "cuda" if name == "cuda" else "cpu"


@contextlib.contextmanager
def backend_scope(name):
    old = _current[0]
    use_backend(name)
    try:
        yield
    finally:
        use_backend(old)
