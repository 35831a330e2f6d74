"""Sums kept in lanes (emit/grid.py ``_in_lanes``): a chunk of straight-line threads that
accumulate into one element runs in blocks; each thread's value goes into lane
``k % SUM_LANES`` (``k`` its place in the chunk), the lanes are added in order at the
end. Checked: which kernels get it (straight-line ones; not a thread that may stop at a
failed bounds check, nor one with a loop), the order of the additions against a model
computed from the threads' own values, a forward and its JVP agreeing bit for bit, the
thread loop calling libmvec's vector functions, integer counts, gradients against
float64."""
import math
import re

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_numba, simd
from adjoint.runtime.backend_numba import PARALLEL_MIN_THREADS
from adjoint.runtime.helpers import SUM_LANES, chunk_start
from tests.conftest import central_fd
from tests.gpu_tolerance import assert_same
from tests.runtime.test_simd import WAVE     # the loss a user writes: wave_loss

KERNELS = WAVE + '''
@ad.kernel
def wave(x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    v = x[i]
    out[i] = ad.sin(v) * ad.exp(-v * v) + v

@ad.kernel
def field_loss(u: ad.array(dtype=ad.float32, ndim=2), loss: ad.array(dtype=ad.float32)):
    i, j = ad.tid()
    ad.atomic_add(loss, 0, ad.cos(u[i, j]) * u[i, j])

@ad.kernel
def field(u: ad.array(dtype=ad.float32, ndim=2), out: ad.array(dtype=ad.float32, ndim=2)):
    i, j = ad.tid()
    out[i, j] = ad.cos(u[i, j]) * u[i, j]

@ad.kernel
def count(x: ad.array(dtype=float), n: ad.array(dtype=int)):
    i = ad.tid()
    c = 0
    if x[i] > 0.0:
        c = 1
    ad.atomic_add(n, 0, c)

@ad.kernel
def gathered(x: ad.array(dtype=float), idx: ad.array(dtype=int), loss: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(loss, 0, x[idx[i]] * x[idx[i]])

@ad.kernel
def looped(x: ad.array(dtype=float), m: int, loss: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(m):
        s += x[i] * k
    ad.atomic_add(loss, 0, s)
'''

N = 3 * PARALLEL_MIN_THREADS + 17       # the parallel plan, and a part-filled last block
ROWS = PARALLEL_MIN_THREADS // 61 + 3     # a (ROWS, 61) grid runs the parallel plan too


def test_straight_line_threads_run_in_blocks(kernel_module):
    m = kernel_module(KERNELS)
    for k, part in ((m.wave_loss, "forward"), (m.wave_loss, "jvp"), (m.count, "forward")):
        src = ad.source(k, part)
        assert "for first in range(lo, hi, rt.SUM_BLOCK):" in src, src
        assert "rt.add_lanes(" in src and "rt.lanes_total(" in src
    src = ad.source(m.field_loss, "forward")      # a 2-D grid: each row's threads in blocks
    assert "for first in range(0, dim1, rt.SUM_BLOCK):" in src, src
    # a thread stopped by a failed bounds check, a thread with a loop: carried from
    # thread to thread (blocks would cost there: nothing vectorizes)
    for k in (m.gathered, m.looped):
        src = ad.source(k, "forward")
        assert "rt.SUM_BLOCK" not in src and "rt.chunk_sums(loss" in src, src


def _lanes_model(values, chunks):
    """The float32 sum of ``values`` (each thread's value, float32: 1-D, or 2-D by rows)
    as the grid adds them: per chunk of (rows of) threads, value ``k`` of each row into
    lane ``k % SUM_LANES``, the lanes in order onto the chunk's zero, the chunks in order
    onto the element's zero."""
    total = np.float32(0.0)
    for c in range(chunks):
        mine = values[chunk_start(len(values), chunks, c):chunk_start(len(values), chunks, c + 1)]
        lanes = [np.float32(0.0)] * SUM_LANES
        for row in (mine if mine.ndim == 2 else [mine]):
            for k, v in enumerate(row):
                lanes[k % SUM_LANES] = np.float32(lanes[k % SUM_LANES] + v)
        part = np.float32(0.0)
        for lane in lanes:
            part = np.float32(part + lane)
        total = np.float32(total + part)
    return total


def test_the_order_of_the_additions(kernel_module):
    """numba: the sum is the lanes model's, bit for bit, given each thread's value (the
    same expression stored per element by another kernel: the same arithmetic)."""
    m = kernel_module(KERNELS)
    x0 = np.random.default_rng(0).uniform(-3, 3, N).astype(np.float32)
    with ad.backend_scope("numba"):
        out = ad.zeros(N, dtype=ad.float32)
        ad.launch(m.wave, N, inputs=[ad.array(x0)], outputs=[out])
        loss = ad.zeros(1, dtype=ad.float32)
        ad.launch(m.wave_loss, N, inputs=[ad.array(x0)], outputs=[loss])
    chunks = max(1, min(backend_numba.MAX_CHUNKS, N))
    got = loss.numpy()[0]
    assert got == _lanes_model(out.numpy(), chunks)
    v = x0.astype(np.float64)
    assert float(got) == pytest.approx(math.fsum(np.sin(v) * np.exp(-v * v) + v), rel=1e-5)
    # a 2-D grid: each row's threads in blocks (rows of 61: blocks, lanes part-filled)
    u0 = np.random.default_rng(5).uniform(-2, 2, (ROWS, 61)).astype(np.float32)
    with ad.backend_scope("numba"):
        out = ad.zeros(u0.shape, dtype=ad.float32)
        ad.launch(m.field, u0.shape, inputs=[ad.array(u0)], outputs=[out])
        loss = ad.zeros(1, dtype=ad.float32)
        ad.launch(m.field_loss, u0.shape, inputs=[ad.array(u0)], outputs=[loss])
    got = loss.numpy()[0]
    assert got == _lanes_model(out.numpy(), max(1, min(backend_numba.MAX_CHUNKS, ROWS)))
    w = u0.astype(np.float64)
    assert float(got) == pytest.approx(math.fsum((np.cos(w) * w).ravel()), rel=1e-5)


def test_forward_and_jvp_sum_alike(backend, kernel_module):
    """The JVP's value is the forward's, bit for bit (both add in lanes; on a real GPU,
    whose atomics add in any order, to rounding); its tangent is the derivative along
    ``dx`` (float64 reference)."""
    m = kernel_module(KERNELS)
    rng = np.random.default_rng(1)
    x0 = rng.uniform(-3, 3, N).astype(np.float32)
    dx = rng.uniform(-1, 1, N).astype(np.float32)
    x = ad.array(x0)
    loss = ad.zeros(1, dtype=ad.float32)
    ad.launch(m.wave_loss, N, inputs=[x], outputs=[loss])
    value = loss.numpy()[0]
    loss2, dot = ad.zeros(1, dtype=ad.float32), ad.zeros(1, dtype=ad.float32)
    ad.launch(m.wave_loss, N, inputs=[x], outputs=[loss2], tangents={x: ad.array(dx), loss2: dot})
    v = x0.astype(np.float64)
    terms = np.sin(v) * np.exp(-v * v) + v
    assert_same(loss2.numpy()[0], value, scale=np.abs(terms).sum())
    e = np.exp(-v * v)
    slope = np.cos(v) * e - 2.0 * v * np.sin(v) * e + 1.0
    assert float(dot.numpy()[0]) == pytest.approx(math.fsum(slope * dx), rel=1e-4, abs=1e-3)


def test_a_2d_gradient_and_jvp(backend, kernel_module):
    """A 2-D grid's sum in lanes: the JVP's value is the forward's, bit for bit (on a
    real GPU to rounding); the tangent and the gradient against float64."""
    m = kernel_module(KERNELS)
    rng = np.random.default_rng(6)
    u0 = rng.uniform(-2, 2, (ROWS, 61)).astype(np.float32)
    du = rng.uniform(-1, 1, u0.shape).astype(np.float32)
    u = ad.array(u0, requires_grad=True)
    loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.field_loss, u0.shape, inputs=[u], outputs=[loss])
    tape.backward(grads={loss: np.ones(1, np.float32)})
    value = loss.numpy()[0]
    loss2, dot = ad.zeros(1, dtype=ad.float32), ad.zeros(1, dtype=ad.float32)
    ad.launch(m.field_loss, u0.shape, inputs=[u], outputs=[loss2],
              tangents={u: ad.array(du), loss2: dot})
    w = u0.astype(np.float64)
    assert_same(loss2.numpy()[0], value, scale=np.abs(np.cos(w) * w).sum())
    slope = np.cos(w) - w * np.sin(w)
    assert float(dot.numpy()[0]) == pytest.approx(math.fsum((slope * du).ravel()), rel=1e-4,
                                                  abs=1e-3)
    want = central_fd(lambda y: math.fsum(np.cos(y) * y), w[0, :20])
    np.testing.assert_allclose(u.grad.numpy()[0, :20], want, rtol=1e-4, atol=1e-5)


def test_counts_are_exact(backend, kernel_module):
    m = kernel_module(KERNELS)
    x0 = np.random.default_rng(2).uniform(-1, 1, N)
    n = ad.array(np.array([5]))
    ad.launch(m.count, N, inputs=[ad.array(x0)], outputs=[n])
    assert n.numpy()[0] == 5 + np.count_nonzero(x0 > 0.0)


def test_gradient(backend, kernel_module):
    """The backward of a sum in lanes, against float64 central differences."""
    m = kernel_module(KERNELS)
    x0 = np.random.default_rng(3).uniform(-3, 3, N).astype(np.float32)
    x = ad.array(x0, requires_grad=True)
    loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.wave_loss, N, inputs=[x], outputs=[loss])
    tape.backward(grads={loss: np.ones(1, np.float32)})
    v = x0.astype(np.float64)
    want = central_fd(lambda y: math.fsum(np.sin(y) * np.exp(-y * y) + y), v[:50])
    np.testing.assert_allclose(x.grad.numpy()[:50], want, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not simd.VARIANTS, reason=f"no vector math functions here ({simd.MODE})")
def test_the_thread_loop_calls_vector_math(kernel_module, monkeypatch, tmp_path):
    """The parallel plan's forward of the commonest kernel (a loss summed by every thread)
    calls libmvec's vector sin and exp: the block loop vectorized."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))    # compiled here: IR to inspect
    # a kernel of its own: one no other test compiled (and cached) before
    m = kernel_module(WAVE.replace("wave_loss", "wave_loss_ir"))
    x0 = np.random.default_rng(4).uniform(-3, 3, N).astype(np.float32)
    with ad.backend_scope("numba"):
        loss = ad.zeros(1, dtype=ad.float32)
        ad.launch(m.wave_loss_ir, N, inputs=[ad.array(x0)], outputs=[loss])
    (gen,) = m.wave_loss_ir.modules.values()
    ir = "".join(gen.wave_loss_ir_forward.inspect_llvm().values())
    assert "define" in ir                   # (compiled in this process, not loaded)
    lanes = simd.VARIANTS["sinf"][1]
    assert re.search(rf"call <{lanes} x float> @{simd.VARIANTS['sinf'][0]}\(", ir)
    assert re.search(rf"call <{lanes} x float> @{simd.VARIANTS['expf'][0]}\(", ir)
