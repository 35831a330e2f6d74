"""A loss summed into one element by every thread is a parallel reduction (issue 14).

``ad.atomic_add(loss, 0, v)`` from every thread: the forward's plan gives each
chunk of threads a partial sum of ``loss[0]`` kept in a local (a register) and
adds the partial sums at the end; the backward reads ``adj_loss[0]`` in every thread
and writes only the thread's own elements, so it runs fully parallel with no
private copies. Checked in the generated source, against float64 central
differences on every backend at a size that runs numba's parallel plans, and
under the race checker.
"""
import math

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_numba
from adjoint.runtime.backend_numba import PARALLEL_MIN_THREADS
from adjoint.runtime.racecheck import racecheck
from conftest import central_fd

KERNELS = '''
@ad.kernel
def wave_loss(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    ad.atomic_add(loss, 0, math.sin(v) * v)

@ad.kernel
def field_loss(u: ad.array(dtype=float, ndim=2), w: float, loss: ad.array(dtype=float)):
    i, j = ad.tid()
    c = u[i, j]
    ad.atomic_add(loss, 0, w * c * c)
'''


def _loss_and_grad(kernel, x0, before=(), after=()):
    x = ad.array(x0, requires_grad=True)
    loss = ad.zeros(1, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, dim=x0.shape, inputs=[*before, x, *after], outputs=[loss])
    tape.backward(loss=loss)
    return float(loss.numpy()[0]), x.grad.numpy().copy()


def test_plans_are_a_partial_sum_per_chunk_and_a_parallel_backward(kernel_module):
    m = kernel_module(KERNELS)
    for k in (m.wave_loss, m.field_loss):
        fwd, bwd = ad.source(k, "forward"), ad.source(k, "backward")
        # a partial sum per chunk, in a local (emit/sums.py), added once per chunk
        assert "loss_at_0_chunks = rt.chunk_sums(loss, n_chunks)" in fwd
        assert "loss_at_0 = rt.accumulate(loss_at_0, " in fwd
        assert "loss[0] = rt.add_sums(loss[0], loss_at_0_chunks)" in fwd
        assert "private_copies" not in fwd and "loss[0] +=" not in fwd.split("_small")[0]
        assert "rt.prange(dim0)" in bwd and "private_copies" not in bwd


def test_one_element_loss_gradient(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = 3 * PARALLEL_MIN_THREADS if backend == "numba" else 300
    x0 = np.random.default_rng(0).uniform(-2.0, 2.0, n)
    value, grad = _loss_and_grad(m.wave_loss, x0)
    assert value == pytest.approx(float(np.sum(np.sin(x0) * x0)), rel=1e-12)

    def loss(x):
        out = ad.zeros(1)
        ad.launch(m.wave_loss, dim=n, inputs=[ad.array(x)], outputs=[out])
        return float(out.numpy()[0])
    rng = np.random.default_rng(1)
    for _ in range(3):
        d = rng.normal(size=n)
        fd = (loss(x0 + 1e-6 * d) - loss(x0 - 1e-6 * d)) / 2e-6
        assert float(np.dot(grad, d)) == pytest.approx(fd, rel=1e-6, abs=1e-6)
    small = x0[:7]
    np.testing.assert_allclose(_loss_and_grad(m.wave_loss, small)[1],
                               central_fd(lambda x: math.fsum(np.sin(x) * x), small),
                               rtol=1e-6, atol=1e-8)


def test_one_element_loss_of_a_2d_grid(backend, kernel_module):
    m = kernel_module(KERNELS)
    shape = (40, 2 * PARALLEL_MIN_THREADS // 40) if backend == "numba" else (6, 5)
    u0 = np.random.default_rng(2).normal(size=shape)
    value, grad = _loss_and_grad(m.field_loss, u0, after=[0.5])
    assert value == pytest.approx(0.5 * float(np.sum(u0 * u0)), rel=1e-12)
    np.testing.assert_allclose(grad, u0, rtol=1e-12)      # d/du 0.5 u^2 = u


def test_one_element_loss_passes_the_race_checker(kernel_module):
    m = kernel_module(KERNELS)
    x0 = np.random.default_rng(3).uniform(-2.0, 2.0, 200)
    with ad.backend_scope("python"), racecheck():
        value, grad = _loss_and_grad(m.wave_loss, x0)
    assert value == pytest.approx(float(np.sum(np.sin(x0) * x0)), rel=1e-12)
    np.testing.assert_allclose(grad, np.cos(x0) * x0 + np.sin(x0), rtol=1e-12)


@pytest.mark.parametrize("shape", [(1,), (3, 2), (backend_numba.SERIAL_ADD_MAX + 5,)])
def test_add_chunks_small_and_large(shape):
    """Small arrays are added in the calling thread, large ones in parallel: same sums."""
    rng = np.random.default_rng(4)
    arr = rng.normal(size=shape)
    copies = rng.normal(size=(3,) + shape)
    expected = arr + copies.sum(axis=0)
    backend_numba.add_chunks(arr, copies)
    np.testing.assert_allclose(arr, expected, rtol=1e-12, atol=1e-14)   # summation order
