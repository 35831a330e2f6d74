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
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_numba
from adjoint.runtime.backend_numba import PARALLEL_MIN_THREADS
from adjoint.runtime.racecheck import racecheck
from tests.conftest import central_fd

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


_serial_fold = backend_numba.jit_helper(backend_numba._add_chunks_serial)


@numba.njit
def _fold_in_compiled_code(arr, copies):
    _serial_fold(arr, copies)     # (an overload: reachable from compiled code only)


@pytest.mark.parametrize("fold", ["serial", "parallel"])
@pytest.mark.parametrize("shape", [(1,), (3, 2), (backend_numba.SERIAL_ADD_MAX + 5,)])
def test_add_chunks_small_and_large(shape, fold):
    """The chunks' copies summed into the array: in the calling thread (up to
    SERIAL_FOLD_CHUNKS copies), or in parallel (small arrays in the calling thread, large
    ones in parallel): the same sums, added in the same order, bit for bit."""
    rng = np.random.default_rng(4)
    arr = rng.normal(size=shape)
    copies = rng.normal(size=(3,) + shape)
    expected = arr.copy()
    for c in copies:
        expected += c
    if fold == "serial":
        _fold_in_compiled_code(arr, copies)
    else:
        backend_numba._add_chunks_parallel(arr, copies)
    np.testing.assert_array_equal(arr, expected)


SCATTER = '''
import math, sys
import numpy as np
import adjoint as ad
from adjoint.runtime import backend_numba

@ad.kernel
def scatter(idx: ad.array(dtype=ad.int32), x: ad.array(dtype=float),
            out: ad.array(dtype=float, ndim=2)):
    i = ad.tid()
    ad.atomic_add(out, idx[i], 0, math.sin(x[i]))
    ad.atomic_add(out, idx[i], 1, x[i] * x[i])

n, m = 3 * backend_numba.PARALLEL_MIN_THREADS, 50
rng = np.random.default_rng(5)
idx = rng.integers(0, m, n).astype(np.int32)
x = ad.array(rng.uniform(-2.0, 2.0, n), requires_grad=True)
out = ad.zeros((m, 2), requires_grad=True)
seed = rng.normal(size=(m, 2))
with ad.Tape() as tape:
    ad.launch(scatter, dim=n, inputs=[idx, x], outputs=[out])
tape.backward(grads={out: seed})
assert "private_copies" in ad.source(scatter, "backward") or \\
    "private_copies" in ad.source(scatter, "forward")
xs = x.numpy()
expected = seed[idx, 0] * np.cos(xs) + seed[idx, 1] * 2.0 * xs
np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12, atol=1e-12)
ref = np.zeros((m, 2))
np.add.at(ref, (idx, 0), np.sin(xs))
np.add.at(ref, (idx, 1), xs * xs)
np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12)
print(backend_numba.MAX_CHUNKS, backend_numba.add_chunks is backend_numba._add_chunks_parallel)
'''


def test_many_threads_fold_the_chunks_in_parallel(tmp_path):
    """With more threads than SERIAL_FOLD_CHUNKS (one chunk copy each), a privatize grid
    sums its copies with the parallel fold: a scatter's forward and gradient, exact."""
    script = tmp_path / "scatter_many_threads.py"
    script.write_text(SCATTER)
    env = dict(os.environ, NUMBA_NUM_THREADS="8")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["8", "True"]
