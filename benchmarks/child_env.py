"""The environment of a fresh child process timed for a cold or a warm start.

Imports nothing heavy: ``examples_start.py`` times its children from a parent that
has not imported numba or adjoint.
"""
import compileall
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(cache, **extra):
    """``os.environ`` with adjoint's and numba's caches in the folder ``cache``, the
    repository first on ``PYTHONPATH`` and ``extra`` set. Python's own bytecode cache
    works as on a user's machine: ``PYTHONDONTWRITEBYTECODE`` (set in some sandboxes
    and CI images) is dropped, and adjoint's modules are compiled to bytecode first,
    as ``pip install`` does; otherwise every child compiles adjoint's hundred modules
    from source again (0.15-0.3 s), a cost no user's second run pays."""
    compileall.compile_dir(os.path.join(ROOT, "adjoint"), quiet=1)
    env = dict(os.environ, ADJOINT_CACHE_DIR=os.path.join(cache, "adjoint"),
               NUMBA_CACHE_DIR=os.path.join(cache, "numba"), **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(
        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []) + [ROOT])
    return env
