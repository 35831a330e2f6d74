"""Parallel CPU plans give the serial backend's results (launches large enough to go parallel).

Each kernel is run on the pure-Python backend (serial, in thread order) and on the
numba backend (parallel: prange, per-chunk copies or even/odd row blocks) and the
forward values and gradients are compared. The plan chosen is checked in the
generated source, so a change of strategy cannot go unnoticed.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.build.pipeline import transform
from adjoint.runtime.backend_numba import PARALLEL_MIN_THREADS

KERNELS = '''
@ad.kernel
def elementwise(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = math.sin(x[i]) * x[i]

@ad.kernel
def scatter(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int64),
            hist: ad.array(dtype=float), total: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i] * x[i]
    hist[idx[i]] += v
    ad.atomic_add(total, 0, v * 0.5)

@ad.kernel
def gather(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int64), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[idx[i]] * x[i]

@ad.kernel
def stencil(u: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    nx = u.shape[0]
    ny = u.shape[1]
    c = u[i, j]
    if i > 1 and i < nx - 2 and j > 0 and j < ny - 1:
        out[i, j] = c * c + 0.1 * (u[i - 2, j] + u[i + 1, j] + u[i, j - 1] * u[i, j + 1])
    else:
        out[i, j] = c

@ad.kernel
def last_writer(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int64), out: ad.array(dtype=float)):
    i = ad.tid()
    out[idx[i]] = x[i] * 3.0
'''

N = 2 * PARALLEL_MIN_THREADS


def _run(kernel, dim, inputs, outputs, seeds, backend):
    with ad.backend_scope(backend):
        ins = [ad.array(a, requires_grad=a.dtype.kind == "f") for a in inputs]
        outs = [ad.zeros(s, requires_grad=True) for s in outputs]
        with ad.Tape() as tape:
            ad.launch(kernel, dim, inputs=ins, outputs=outs)
        tape.backward(grads=dict(zip(outs, seeds)))
        return [o.numpy().copy() for o in outs] + [a.grad.numpy().copy() for a in ins
                                                   if a.grad is not None]


def _same(kernel, dim, inputs, outputs, seeds):
    serial = _run(kernel, dim, inputs, outputs, seeds, "python")
    parallel = _run(kernel, dim, inputs, outputs, seeds, "numba")
    for s, p in zip(serial, parallel):
        np.testing.assert_allclose(p, s, rtol=1e-10, atol=1e-12)
    _directional_fd(kernel, dim, inputs, outputs, seeds, parallel[len(outputs):])


def _directional_fd(kernel, dim, inputs, outputs, seeds, grads, eps=1e-6):
    """<gradient, v> against the central difference of sum(seed * output) along a
    random direction v of the float inputs (independent of both backends' adjoints)."""
    floats = [k for k, a in enumerate(inputs) if a.dtype.kind == "f"]
    rng = np.random.default_rng(7)
    direction = {k: rng.normal(size=inputs[k].shape) for k in floats}

    def f(step):
        ins = [ad.array(a + step * direction[k]) if k in direction else ad.array(a)
               for k, a in enumerate(inputs)]
        outs = [ad.zeros(s) for s in outputs]
        ad.launch(kernel, dim, inputs=ins, outputs=outs)
        return sum(float((np.asarray(sd) * o.numpy()).sum()) for sd, o in zip(seeds, outs))

    with ad.backend_scope("numba"):
        fd = (f(eps) - f(-eps)) / (2 * eps)
    ad_dot = sum(float((g * direction[k]).sum()) for g, k in zip(grads, floats))
    assert abs(ad_dot - fd) <= 1e-6 * max(1.0, abs(fd)), (ad_dot, fd)


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    import importlib.util
    import sys
    path = tmp_path_factory.mktemp("par") / "adjoint_parallel_kernels.py"
    path.write_text("import math\nimport adjoint as ad\n" + KERNELS)
    spec = importlib.util.spec_from_file_location("adjoint_parallel_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_elementwise_runs_in_parallel(m):
    assert "rt.prange(dim0)" in ad.source(m.elementwise, "forward")
    rng = np.random.default_rng(0)
    _same(m.elementwise, N, [rng.normal(size=N)], [N], [rng.normal(size=N)])


def test_scatter_privatizes_colliding_accumulations(m):
    fwd = ad.source(m.scatter, "forward")
    assert "rt.private_copies(hist" in fwd and "rt.chunk_sums(total" in fwd   # total[0]: a local
    rng = np.random.default_rng(1)
    _same(m.scatter, N, [rng.normal(size=N), rng.integers(0, 37, N)], [37, 1],
          [rng.normal(size=37), np.array([2.0])])


def test_gather_backward_privatizes_the_adjoint(m):
    assert "rt.private_copies(adj_x" in ad.source(m.gather, "backward")
    rng = np.random.default_rng(2)
    _same(m.gather, N, [rng.normal(size=N), rng.integers(0, N, N)], [N], [rng.normal(size=N)])


def test_stencil_backward_runs_even_then_odd_row_blocks(m):
    """The plan is the even/odd one (radius 2); on the CPU its backward gathers instead
    (tests/optimize/test_gather.py): one parallel pass, no private copies."""
    plan = transform(m.stencil.pyfunc, "kernel").plans[1]
    assert (plan.mode, plan.radius) == ("color", 2)
    bwd = ad.source(m.stencil, "backward")
    assert "gathers the sum" in bwd and "private_copies" not in bwd
    rng = np.random.default_rng(3)
    shape = (96, 64)
    _same(m.stencil, shape, [rng.normal(size=shape)], [shape], [rng.normal(size=shape)])


def test_colliding_store_runs_serially_and_the_last_writer_gets_the_gradient(m):
    assert "range(dim0 - 1, -1, -1)" in ad.source(m.last_writer, "backward")
    rng = np.random.default_rng(4)
    idx = rng.integers(0, 50, N)
    x = rng.normal(size=N)
    res = _run(m.last_writer, N, [x, idx], [50], [np.ones(50)], "numba")
    expected_out = np.zeros(50)
    expected_grad = np.zeros(N)
    last = {}
    for i, k in enumerate(idx):
        last[k] = i
    for k, i in last.items():
        expected_out[k] = 3.0 * x[i]
        expected_grad[i] = 3.0
    np.testing.assert_allclose(res[0], expected_out)
    np.testing.assert_allclose(res[1], expected_grad)
