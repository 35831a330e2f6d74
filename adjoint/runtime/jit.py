"""Backend selection: which module supplies ``jit`` and the helpers, here and now.

The backend in force is context-local, as the tape recording is thread-local, so
two threads (or asyncio tasks) may launch on two backends at once:

- the *process default*: ``numba``, or ``python`` under ``ADJOINT_JIT=0`` (read at
  import); ``use_backend(name)`` replaces it, for every thread and task that is not
  inside a ``backend_scope`` (threads already running included);
- ``backend_scope(name)``: an override for a block, in the current context only (a
  ``contextvars`` variable). Other threads never see it; a thread started inside the
  block starts from the process default (a new thread starts with an empty context);
  an asyncio task created inside it inherits it (a task copies its creator's
  context); a ``concurrent.futures`` worker sees it only when the function is
  submitted as ``contextvars.copy_context().run``.

``use_backend`` inside a scope also replaces that scope's backend, so the caller sees
what it asked for at once; leaving the scope restores what the context had before
it. The default device follows the backend in force (its ``Target.device``:
runtime/targets.py, where each backend is declared). Each kernel keeps one compiled
module per backend.
"""
import contextlib
import contextvars
import importlib
import os

from .backend_cuda import require_cuda
from .targets import View, target

BACKENDS = View(lambda t: t.runtime)   # each backend's runtime module, as registered
_process_default = "python" if os.environ.get("ADJOINT_JIT", "1").strip().lower() in (
    "0", "false", "no", "off") else "numba"
_scoped = contextvars.ContextVar("adjoint_backend", default=None)   # backend_scope's, or None


def backend(name=None):
    """The backend module generated code binds to ``rt``: ``backend("cuda")`` for CUDA
    modules; otherwise the CPU backend in force (python or numba)."""
    if name is None:
        name = cpu_backend_name()
    return importlib.import_module(target(name).runtime)


def backend_name():
    """The backend in force here: python, numba or cuda (cuda: arrays default to the GPU)."""
    return _scoped.get() or _process_default


def cpu_backend_name():
    """The backend CPU launches use: python, or numba (also while cuda is in force)."""
    return target(backend_name()).cpu


def default_device():
    """Where new arrays and launches go unless told: the device of the backend in force."""
    return target(backend_name()).device


def _checked(name):
    if target(name).device == "cuda":
        require_cuda()
    return name


def use_backend(name):
    """Make 'python', 'numba' or 'cuda' the process default (with cuda, new arrays
    default to device='cuda'); inside a ``backend_scope``, that scope's backend too."""
    global _process_default
    _process_default = _checked(name)
    if _scoped.get() is not None:
        _scoped.set(name)


@contextlib.contextmanager
def backend_scope(name):
    """Run the block, in this thread or task only, on backend ``name``."""
    token = _scoped.set(_checked(name))
    try:
        yield
    finally:
        _scoped.reset(token)
