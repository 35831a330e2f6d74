"""Pass warp_sums (emit/warp.py): on CUDA an atomic add into an element every lane of a
warp adds into at once is ``rt.warp_add1``/``rt.warp_add2`` (summed across the warp,
one atomic); an index that may differ by thread keeps ``cuda.atomic.add``.

Which adds it picks is read from the printed CUDA code. Gradients of the picked kernels
are checked against central differences in float64 on every backend, and on CUDA against
the same kernel with the pass off: bit for bit in numba's simulator (there the function
is each thread's own atomic add) and to rounding on a GPU (the warp's terms are summed
as a tree). The device function's warp path runs on a GPU alone; the PTX check compiles
it for every kernel here.
"""
import numpy as np
import pytest

import adjoint as ad
from tests.conftest import central_fd
from tests.gpu_tolerance import assert_same

SOURCE = '''
@ad.kernel
def dense(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
          y: ad.array(dtype=float)):
    # every row adds into adj_x[k] for every k: the same k across the warp at once
    i = ad.tid()
    s = 0.0
    for k in range(n):
        s += W[i, k] * x[k]
    y[i] = ad.tanh(s)


@ad.kernel
def moments(x: ad.array(dtype=float), m: ad.array(dtype=float, ndim=2)):
    # every thread adds into the same two elements
    i = ad.tid()
    m[0, 0] += x[i]
    m[0, 1] -= x[i] * x[i]


@ad.kernel
def scatter(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int32), out: ad.array(dtype=float)):
    # an index read from an array: it may differ by thread
    i = ad.tid()
    out[idx[i]] += x[i] * x[i]


@ad.kernel
def leave(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    # threads leave the loop at different trips: k differs after it
    i = ad.tid()
    k = 0
    for j in range(n):
        k = j
        if x[i] > float(j):
            break
    out[k] += x[i]


@ad.kernel
def branch(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    # k is assigned under a test of the thread's own value
    i = ad.tid()
    k = 0
    if x[i] > 0.0:
        k = 1
    out[k] += x[i]
'''


@pytest.fixture
def m(kernel_module):
    return kernel_module(SOURCE)


def _cuda(kernel, stage, optimize=True):
    return ad.source(kernel, stage, target="cuda", optimize=optimize)


def test_shared_indices_are_summed_across_the_warp(m):
    back = _cuda(m.dense, "backward")
    assert "rt.warp_add1(adj_x, k, " in back
    assert "cuda.atomic.add(adj_x" not in back
    fwd = _cuda(m.moments, "forward")
    assert "rt.warp_add2(m, 0, 0, " in fwd and "rt.warp_add2(m, 0, 1, -" in fwd
    assert "cuda.atomic" not in fwd
    assert "warp_sums" in m.dense.transformed.applied
    assert "warp_sums" not in m.scatter.transformed.applied


@pytest.mark.parametrize("name", ["scatter", "leave", "branch"])
def test_an_index_that_may_differ_by_thread_keeps_its_atomic(m, name):
    for stage in ("forward", "backward", "jvp"):
        text = _cuda(getattr(m, name), stage)
        assert "warp_add" not in text, (name, stage)
    assert "cuda.atomic.add(out, " in _cuda(getattr(m, name), "forward")


def test_off_it_is_the_plain_atomic(m):
    for optimize in ("-warp_sums", False):
        text = _cuda(m.dense, "backward", optimize=optimize)
        assert "warp_add" not in text and "cuda.atomic.add(adj_x, k, " in text
    assert "warp_add" not in ad.source(m.dense, "backward", target="cpu")


def _dense_grads(m, W, x, seed, optimize=True):
    dev = "cuda" if ad.backend_name() == "cuda" else "cpu"
    kernel = m.dense if optimize is True else ad.kernel(optimize=optimize)(m.dense.pyfunc)
    Wa = ad.array(W, requires_grad=True, device=dev)
    xa = ad.array(x, requires_grad=True, device=dev)
    y = ad.zeros(len(W), requires_grad=True, device=dev)
    with ad.Tape() as tape:
        ad.launch(kernel, len(W), inputs=[len(x), Wa, xa], outputs=[y])
    tape.backward(grads={y: seed})
    return y.numpy(), Wa.grad.numpy(), xa.grad.numpy()


def test_gradients_against_central_differences_and_the_pass_off(backend, m):
    rng = np.random.default_rng(5)
    rows, n = 70, 9         # (three warps, the last partly full: each lane's own add there)
    W, x = rng.normal(size=(rows, n)) / 3.0, rng.normal(size=n)
    seed = rng.normal(size=rows)
    y, gW, gx = _dense_grads(m, W, x, seed)

    def loss(xv):
        return float(seed @ np.tanh(W @ xv))
    np.testing.assert_allclose(gx, central_fd(loss, x), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(gW, (seed * (1.0 - np.tanh(W @ x) ** 2))[:, None] * x[None, :],
                               rtol=1e-12, atol=1e-14)
    y0, gW0, gx0 = _dense_grads(m, W, x, seed, optimize="-warp_sums")
    assert_same(y, y0)
    assert_same(gW, gW0)
    assert_same(gx, gx0, scale=np.abs(seed[:, None] * W).sum(axis=0).max())


def test_moments_against_numpy(backend, m):
    dev = "cuda" if ad.backend_name() == "cuda" else "cpu"
    x = np.random.default_rng(6).normal(size=100)
    xa = ad.array(x, requires_grad=True, device=dev)
    mo = ad.zeros((1, 2), requires_grad=True, device=dev)
    with ad.Tape() as tape:
        ad.launch(m.moments, 100, inputs=[xa], outputs=[mo])
    tape.backward(grads={mo: np.array([[1.0, 0.5]])})
    np.testing.assert_allclose(mo.numpy()[0], [x.sum(), -(x * x).sum()], rtol=1e-12)
    np.testing.assert_allclose(xa.grad.numpy(), 1.0 - x, rtol=1e-12, atol=1e-14)
