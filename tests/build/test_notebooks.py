"""Kernels and funcs defined in Jupyter/IPython cells: a real IPython shell runs the
cells (as a notebook does), once with IPython's cell names (``<ipython-input-…>``) and
once with ipykernel's (``/tmp/ipykernel_<pid>/<hash>.py``, a file that does not exist);
a later cell redefines the func the kernel calls (adjoint/build/bindings.py).
Only a function with no source anywhere (``exec`` of a string) is refused."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import adjoint as ad

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SESSION = '''
import hashlib, os, sys, tempfile
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
if {ipykernel!r}:
    # what ipykernel's compiler does: cells are named after a hash, in a temp folder
    folder = os.path.join(tempfile.gettempdir(), f"ipykernel_{{os.getpid()}}")
    shell.compile.get_code_name = lambda raw, code, number: os.path.join(
        folder, hashlib.sha1(raw.encode()).hexdigest()[:10] + ".py")
cells = [
"""
import linecache
import math
import os
import numpy as np
import adjoint as ad
if {backend!r} != "python":
    ad.use_backend({backend!r})
""",
"""
@ad.func
def cube(v: float) -> float:
    return v * v * v
""",
"""
@ad.kernel
def energy(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = cube(x[i]) + 2.0 * math.sin(x[i])
""",
"""
x = ad.array(np.linspace(-1.0, 1.0, 6), requires_grad=True)
y = ad.zeros(6, requires_grad=True)
tape = ad.Tape()
with tape:
    ad.launch(energy, 6, inputs=[x], outputs=[y])
tape.backward(grads={{y: np.ones(6)}})
module = energy.modules[{module!r}]
origin = energy.spec_for(x.device).origin
print("ORIGIN", origin)
print("LINE", linecache.getline(energy.pyfunc.__code__.co_filename, int(origin.split(":")[-1])))
print("MODULE", os.path.basename(module.__file__))
print("Y", repr(y.numpy().tolist()))
print("GRAD", repr(x.grad.numpy().tolist()))
""",
"""
@ad.func
def cube(v: float) -> float:
    return 2.0 * v * v * v
""",
"""
y2 = ad.zeros(6, requires_grad=True)
x.grad.zero_()
with ad.Tape() as tape:
    ad.launch(energy, 6, inputs=[x], outputs=[y2])     # cube redefined, energy not
tape.backward(grads={{y2: np.ones(6)}})
print("Y2", repr(y2.numpy().tolist()))
print("GRAD2", repr(x.grad.numpy().tolist()))
""",
]
for cell in cells:
    result = shell.run_cell(cell, store_history=True)
    if not result.success:
        sys.exit(1)
'''


def run_session(backend, ipykernel, cache):
    pytest.importorskip("IPython")
    code = SESSION.format(backend=backend, ipykernel=ipykernel, module=backend)
    env = dict(os.environ, PYTHONPATH=ROOT, ADJOINT_CACHE_DIR=str(cache),
               ADJOINT_JIT="0" if backend == "python" else "1")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1]
            for line in r.stdout.splitlines() if " " in line}


@pytest.mark.parametrize("ipykernel", [False, True], ids=["ipython", "ipykernel"])
def test_kernels_and_funcs_from_notebook_cells(backend, tmp_path, ipykernel):
    out = run_session(backend, ipykernel, tmp_path / "cache")
    xs = np.linspace(-1.0, 1.0, 6)
    np.testing.assert_allclose(eval(out["Y"]), xs ** 3 + 2.0 * np.sin(xs), rtol=1e-12)
    np.testing.assert_allclose(eval(out["GRAD"]), 3.0 * xs ** 2 + 2.0 * np.cos(xs),
                               rtol=1e-12)
    # a short, readable origin: the cell's name, no temp folder, no angle brackets
    origin = out["ORIGIN"]
    assert "/" not in origin and "<" not in origin, origin
    assert origin.startswith("ipython-input-") if not ipykernel else ".py:" in origin
    assert out["LINE"].startswith("def energy("), out    # the line it names, in the cell
    assert out["MODULE"].startswith("adjoint_gen_energy_")
    # a cell redefining the func: the kernel, not redefined, calls the new one
    np.testing.assert_allclose(eval(out["Y2"]), 2.0 * xs ** 3 + 2.0 * np.sin(xs), rtol=1e-12)
    np.testing.assert_allclose(eval(out["GRAD2"]), 6.0 * xs ** 2 + 2.0 * np.cos(xs),
                               rtol=1e-12)


def test_exec_without_source_is_a_clear_error(backend):
    ns = {"ad": ad}
    exec(compile("@ad.kernel\ndef nosource(x: ad.array(dtype=float)):\n"
                 "    i = ad.tid()\n    x[i] = 1.0\n", "<string>", "exec"), ns)
    with pytest.raises(ad.TransformError) as info:
        ad.launch(ns["nosource"], 2, inputs=[ad.zeros(2)])
    msg = str(info.value)
    assert "cannot read the source of 'nosource'" in msg
    assert "notebook cell" in msg and "exec()" in msg
