"""A cold start compiles each runtime helper once per argument types, never once per
literal argument, and none of numba's string formatting (backend_numba.jit_helper,
runtime/helpers.py's stacks).

``rt.fault(rt_status, 4, t4, 0, 0)``: numba compiled a dispatcher called from compiled
code again for every integer literal it was passed (one compilation per bounds-check
site, eight for the springs example); ``rt.stack_push`` grew a stack with a slice
assignment whose compiled error message took 2-5 s. The compile counts are read in a
fresh process with empty caches (numba's ``numba:compile`` events); the gradients of
the same kernel, whose stack grows, are checked on every backend.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import adjoint as ad
from tests.conftest import central_fd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KERNEL = '''
import math
import adjoint as ad


@ad.kernel
def grow(n: int, x: ad.array(dtype=float), w: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y = w[n % 2]
    k = 0
    while k < n:                   # a run-time trip count: the stack of y grows
        y = y * v + math.sin(y)
        k += 1
    out[i] = y + w[n % 3]
'''

CHILD = '''
import json, sys
sys.path.insert(0, {folder!r})
import numpy as np
from numba.core import event
import adjoint as ad
import cold_kernels as m

x = ad.array([0.3, -0.45, 0.8], requires_grad=True)
w = ad.array([0.2, 0.7, -0.1], requires_grad=True)
out = ad.zeros(3, requires_grad=True)
with event.install_recorder("numba:compile") as rec:
    with ad.Tape() as tape:
        ad.launch(m.grow, 3, inputs=[40, x, w], outputs=[out])
    tape.backward(grads={{out: np.ones(3)}})
compiled = [(ev.data["dispatcher"].py_func.__module__, ev.data["dispatcher"].py_func.__name__)
            for _, ev in rec.buffer if ev.is_start]
print("RESULT", json.dumps({{"compiled": compiled, "gx": x.grad.numpy().tolist(),
                            "backward": ad.source(m.grow, "backward")}}))
'''


def _loss(kernel, n):
    def f(x, w):
        out = ad.zeros(3)
        ad.launch(kernel, 3, inputs=[n, ad.array(x), ad.array(w)], outputs=[out])
        return out.numpy().sum()
    return f


def _gradients(kernel, n, x0, w0):
    x = ad.array(x0, requires_grad=True)
    w = ad.array(w0, requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, 3, inputs=[n, x, w], outputs=[out])
    tape.backward(grads={out: np.ones(3)})
    return x.grad.numpy(), w.grad.numpy()


def test_a_growing_stack_keeps_every_value(backend, kernel_module):
    """40 iterations recorded on a stack that starts smaller and grows (copied element by
    element now): the gradients against central differences."""
    m = kernel_module(KERNEL.split("import adjoint as ad", 1)[1])
    x0, w0 = np.array([0.3, -0.45, 0.8]), np.array([0.2, 0.7, -0.1])
    for n in (0, 1, 40):
        gx, gw = _gradients(m.grow, n, x0, w0)
        loss = _loss(m.grow, n)
        np.testing.assert_allclose(gx, central_fd(lambda x: loss(x, w0), x0), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(gw, central_fd(lambda w: loss(x0, w), w0), rtol=1e-6, atol=1e-9)


def test_a_cold_start_compiles_each_runtime_helper_once(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "cold_kernels.py").write_text(textwrap.dedent(KERNEL))
    env = dict(os.environ, PYTHONPATH=ROOT, ADJOINT_CACHE_DIR=str(tmp_path / "cache"),
               NUMBA_CACHE_DIR=str(tmp_path / "numba"), ADJOINT_JIT="1")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD.format(folder=str(folder)))],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.split("RESULT", 1)[1])
    # the test means something: two bounds-check sites, a stack that grows
    sites = {line.split(",")[1].strip() for line in res["backward"].splitlines()
             if "rt.fault(" in line}
    assert len(sites) >= 2, res["backward"]
    assert "rt.stack_push(" in res["backward"]
    names = [name for _module, name in res["compiled"]]
    assert names.count("fault") == 1, res["compiled"]
    assert names.count("stack_push") == 1, res["compiled"]
    assert names.count("trip_count") <= 1, res["compiled"]
    assert not [c for c in res["compiled"] if c[0].startswith("numba.cpython.unicode")], \
        res["compiled"]
    loss = _loss_fd_reference(40, np.array([0.2, 0.7, -0.1]))
    x0 = np.array([0.3, -0.45, 0.8])
    np.testing.assert_allclose(res["gx"], central_fd(loss, x0), rtol=1e-6, atol=1e-9)


def _loss_fd_reference(n, w):
    """sum(out) of ``grow`` in plain Python (float64), for central differences."""
    def f(x):
        total = 0.0
        for v in x:
            y = w[n % 2]
            for _ in range(n):
                y = y * v + np.sin(y)
            total += y + w[n % 3]
        return total
    return f


def test_examples_start_times_the_first_derivative(tmp_path):
    """benchmarks/examples_start.py (the cold/warm table of the examples) on the quickest
    example: the cold run compiles the JVP it launches first, the warm one nothing, and
    the breakdown adds up to the child's time."""
    out = tmp_path / "start.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "examples_start.py"),
                        "jacobian", "--json", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = json.loads(out.read_text())["examples"]["jacobian"]
    cold, warm = run["cold"], run["warm"]
    assert cold["first"] == warm["first"] == "launch(tangents=...)"
    assert cold["adjoint"] == os.path.join(ROOT, "adjoint")
    assert "mix_jvp_small" in cold["compile_outer"] and warm["compile_outer"] == {}
    assert cold["transform"] > 0.01 > warm["transform"]       # warm: no transformer
    for info in (cold, warm):
        parts = (info["import_numpy"] + info["import_numba"] + info["import_adjoint"]
                 + info["load"] + info["compile"] + info["other"])
        assert abs(parts - info["child_s"]) < 1e-6
        assert 0.0 < info["child_s"] < info["wall_s"] and info["cpu_s"] > 0.0
        assert "numba" in info["imports"]
        assert not {"torch", "jax", "warp", "scipy.optimize"} & set(info["imports"])
