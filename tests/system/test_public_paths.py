"""The public module paths that issue 41's regroup kept: ``adjoint.checkpoint``,
``adjoint.torch``, ... are the modules of ``adjoint/tapes/``, ``adjoint/interop/``, ...
themselves (one module object: a test that patches an attribute patches the one the
code reads), ``ad.checkpoint``, ``ad.simulate`` and ``ad.generate`` stay the functions
after their modules are imported by name, and ``python -m adjoint.ptx`` still runs."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALIASES = {
    "checkpoint": "tapes", "simulate": "tapes", "optim": "tapes", "copies": "tapes",
    "autograd": "derivatives", "vector_mode": "derivatives", "traces": "derivatives",
    "transposes": "derivatives", "printed": "derivatives",
    "cli": "build", "generate": "build", "ptx": "build", "passes": "build",
    "torch": "interop", "jax": "interop", "distributed": "interop",
}
NEEDS = {"torch": "torch", "jax": "jax", "distributed": "dask"}   # the optional extras

CHILD = """
import importlib, sys
import adjoint as ad
assert "gast" not in sys.modules, "import adjoint loaded gast"
functions = (ad.checkpoint, ad.simulate, ad.generate)
for old, new in {pairs!r}:
    assert importlib.import_module(old) is importlib.import_module(new), old
    assert sys.modules[old] is sys.modules[new], old
assert (ad.checkpoint, ad.simulate, ad.generate) == functions
assert ad.derivatives.grad is ad.grad and ad.optim is sys.modules["adjoint.tapes.optim"]
print("ok")
"""


def _run(args, **kwargs):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300, **kwargs)


def test_old_paths_are_the_same_modules():
    pairs = [(f"adjoint.{name}", f"adjoint.{pkg}.{name}") for name, pkg in ALIASES.items()
             if name not in NEEDS or importlib.util.find_spec(NEEDS[name]) is not None]
    r = _run(["-c", CHILD.format(pairs=pairs)])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("module", ["adjoint", "adjoint.ptx", "adjoint.cli"])
def test_python_m_runs(module):
    r = _run(["-m", module, "--help"])
    assert r.returncode == 0 and r.stdout.startswith("usage:"), r.stderr
