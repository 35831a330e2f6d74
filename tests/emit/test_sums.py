"""Sums kept in locals: the privatize plan's one-element accumulations (emit/sums.py).

An element that threads only ever accumulate into at an index every thread computes
alike (``loss[0] += v``, ``out[slot] -= v`` with ``slot`` a scalar parameter) is summed
per chunk of threads in a local of the thread function, stored once per chunk and
added to the element in chunk order. Checked: the generated source (no store into a
chunk copy per thread; an index that is not invariant keeps the copies), gradients
and JVPs against float64 central differences on every backend at sizes that run
numba's parallel plan, float32 rounding after every addition (as the store did), a
thread stopped by a bounds check keeping what it added before, and an empty array
the threads never reach.
"""
import math

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_numba
from adjoint.runtime.backend_numba import PARALLEL_MIN_THREADS
from adjoint.runtime.helpers import SUM_LANES, chunk_start
from adjoint.runtime import racecheck as racecheck_module
from adjoint.runtime.racecheck import racecheck
from tests.conftest import central_fd
from tests.derive.test_jvp import jvp_check

KERNELS = '''
@ad.kernel
def const_loss(x: ad.array(dtype=float), w: float, loss: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    ad.atomic_add(loss, 0, w * math.sin(v) * v)
    ad.atomic_sub(loss, 1, v * v)

@ad.kernel
def slot_loss(x: ad.array(dtype=float), slot: int, out: ad.array(dtype=float, ndim=2)):
    i = ad.tid()
    v = x[i]
    ad.atomic_add(out, slot, 1, math.cos(v))
    if v > 0.0:
        out[0, slot] += v * v

@ad.kernel
def scattered(x: ad.array(dtype=float), idx: ad.array(dtype=int), out: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(out, idx[i], x[i] * x[i])

@ad.kernel
def shared_param(x: ad.array(dtype=float), p: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i] * p[0] + p[1] * p[1]

@ad.kernel
def stopped(x: ad.array(dtype=float), idx: ad.array(dtype=int), loss: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(loss, 0, 1.0)
    v = x[idx[i]]
    ad.atomic_add(loss, 0, v)

@ad.kernel
def maybe(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    if v > 1.0:
        ad.atomic_add(loss, 0, v)

@ad.kernel
def widened(x: ad.array(dtype=ad.float32), w: float, loss: ad.array(dtype=ad.float32)):
    i = ad.tid()
    ad.atomic_add(loss, 0, w * x[i])
'''


def _n(backend):
    """A launch size that runs the parallel plan on numba (the small loop below it)."""
    return 3 * PARALLEL_MIN_THREADS + 17 if backend == "numba" else 300


def _arrays(args):
    return [ad.array(a) if isinstance(a, np.ndarray) else a for a in args]


def _scalar(kernel, dim, before, x, after, out0, pick):
    """``pick(out)`` after a launch at ``x`` (float64 throughout)."""
    out = ad.array(out0)
    ad.launch(kernel, dim=dim, inputs=[*_arrays(before), ad.array(x), *_arrays(after)],
              outputs=[out], record_tape=False)
    return pick(out.numpy())


def _grad(kernel, dim, before, x0, after, out0, seed):
    x = ad.array(x0, requires_grad=True)
    out = ad.array(out0, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, dim=dim, inputs=[*_arrays(before), x, *_arrays(after)],
                  outputs=[out])
    tape.backward(grads={out: seed})
    return out.numpy().copy(), x.grad.numpy().copy()


def _directional_fd(f, x0, grad, rng):
    for _ in range(3):
        d = rng.normal(size=x0.shape)
        fd = (f(x0 + 1e-6 * d) - f(x0 - 1e-6 * d)) / 2e-6
        assert float(np.dot(grad, d)) == pytest.approx(fd, rel=1e-6, abs=1e-6)


def test_sources_keep_invariant_elements_in_locals(kernel_module):
    m = kernel_module(KERNELS)
    fwd = ad.source(m.const_loss, "forward")
    assert "loss_at_0 = rt.accumulate(loss_at_0, " in fwd
    assert "loss_at_1 = rt.accumulate(loss_at_1, -" in fwd          # atomic_sub
    assert "private_copies" not in fwd and "loss[0] +=" not in fwd.split("def const_loss_forward_small")[0]
    fwd = ad.source(m.slot_loss, "forward")
    assert "out_at_slot_1 = rt.accumulate(" in fwd and "out_at_0_slot = rt.accumulate(" in fwd
    assert "if 0 <= slot < out.shape[0] and 1 < out.shape[1]:" in fwd
    # an index that differs between threads keeps the per-chunk copies
    assert "rt.private_copies(out, n_chunks)" in ad.source(m.scattered, "forward")
    # the backward of a load every thread makes: adj_p[0], adj_p[1] in locals
    bwd = ad.source(m.shared_param, "backward")
    assert "adj_p_at_0 = rt.accumulate(adj_p_at_0, " in bwd and "adj_p_at_1" in bwd
    assert "private_copies" not in bwd
    jvp = ad.source(m.const_loss, "jvp")
    assert "dot_loss_at_0 = rt.accumulate(" in jvp


def test_constant_index_gradient(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-2.0, 2.0, n)
    out0 = np.array([0.25, -1.0])
    seed = np.array([0.75, -0.5])
    out, grad = _grad(m.const_loss, n, [], x0, [1.5], out0, seed)
    np.testing.assert_allclose(out, [0.25 + 1.5 * math.fsum(np.sin(x0) * x0),
                                     -1.0 - math.fsum(x0 * x0)], rtol=1e-12)
    _directional_fd(lambda x: _scalar(m.const_loss, n, [], x, [1.5], out0,
                                      lambda o: float(o @ seed)), x0, grad, rng)
    small = x0[:7]
    np.testing.assert_allclose(
        _grad(m.const_loss, 7, [], small, [1.5], out0, seed)[1],
        central_fd(lambda x: 0.75 * 1.5 * math.fsum(np.sin(x) * x) + 0.5 * math.fsum(x * x),
                   small), rtol=1e-6, atol=1e-8)


def test_loop_invariant_index_gradient(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    rng = np.random.default_rng(1)
    x0 = rng.uniform(-2.0, 2.0, n)
    out0 = np.zeros((3, 4))
    seed = rng.normal(size=(3, 4))
    out, grad = _grad(m.slot_loss, n, [], x0, [2], out0, seed)
    want = np.zeros((3, 4))
    want[2, 1] = math.fsum(np.cos(x0))
    want[0, 2] = math.fsum(np.where(x0 > 0.0, x0 * x0, 0.0))
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, -np.sin(x0) * seed[2, 1] +
                               np.where(x0 > 0.0, 2.0 * x0, 0.0) * seed[0, 2], rtol=1e-12)
    _directional_fd(lambda x: _scalar(m.slot_loss, n, [], x, [2], out0,
                                      lambda o: float(np.sum(o * seed))), x0, grad, rng)


def test_varying_index_keeps_the_copies_and_is_right(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    rng = np.random.default_rng(2)
    x0 = rng.uniform(-2.0, 2.0, n)
    idx = rng.integers(0, 5, n)
    seed = rng.normal(size=5)
    out, grad = _grad(m.scattered, n, [], x0, [idx], np.zeros(5), seed)
    np.testing.assert_allclose(out, np.bincount(idx, x0 * x0, 5), rtol=1e-12)
    np.testing.assert_allclose(grad, 2.0 * x0 * seed[idx], rtol=1e-12)


def test_backward_of_a_shared_load(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    rng = np.random.default_rng(3)
    x0 = rng.normal(size=n)
    p0 = np.array([0.5, -1.25])
    seed = rng.normal(size=n)
    p = ad.array(p0, requires_grad=True)
    y = ad.zeros(n, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.shared_param, dim=n, inputs=[ad.array(x0), p], outputs=[y])
    tape.backward(grads={y: seed})

    def f(q):
        out = ad.zeros(n)
        ad.launch(m.shared_param, dim=n, inputs=[ad.array(x0), ad.array(q)], outputs=[out])
        return float(out.numpy() @ seed)
    np.testing.assert_allclose(p.grad.numpy(), central_fd(f, p0), rtol=1e-6)
    np.testing.assert_allclose(p.grad.numpy(), [math.fsum(x0 * seed),
                                                2.0 * p0[1] * math.fsum(seed)], rtol=1e-12)


def test_jvp(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    x0 = np.random.default_rng(4).uniform(-2.0, 2.0, n)
    # (sums of thousands of terms: central differences carry ~1e-6 relative noise)
    jvp_check(m.const_loss, n, [x0, 1.5], [np.array([0.5, 2.0])], rtol=2e-5, atol=1e-6)


def test_float32_jvp(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    rng = np.random.default_rng(8)
    x0 = rng.uniform(-2.0, 2.0, n).astype(np.float32)
    dx = rng.uniform(-1.0, 1.0, n).astype(np.float32)
    loss, dot = ad.array(np.array([0.25], np.float32)), ad.zeros(1, dtype=ad.float32)
    x = ad.array(x0)
    ad.launch(m.widened, dim=n, inputs=[x, 0.7], outputs=[loss],
              tangents={x: ad.array(dx), loss: dot})
    assert float(loss.numpy()[0]) == pytest.approx(0.25 + 0.7 * math.fsum(x0), rel=1e-4, abs=1e-3)
    assert float(dot.numpy()[0]) == pytest.approx(0.7 * math.fsum(dx), rel=1e-4, abs=1e-3)


def _float32_sum(values, start, chunks, lanes):
    """``start`` plus ``values`` summed as the plan does: from zero per chunk, each
    addition rounded to float32, then the chunks' sums in order. With ``lanes`` (a
    straight-line thread: emit/grid.py ``_in_lanes``), a chunk's value ``k`` is first
    rounded to float32 (added to -0.0), then added into lane ``k % SUM_LANES``, and the
    lanes are added to the chunk's zero in order; else one after another."""
    total = np.float32(start)
    for c in range(chunks):
        mine = values[chunk_start(len(values), chunks, c):chunk_start(len(values), chunks, c + 1)]
        part = np.float32(0.0)
        if lanes:
            sums = [np.float32(0.0)] * SUM_LANES
            for k, v in enumerate(mine):
                sums[k % SUM_LANES] = np.float32(sums[k % SUM_LANES] + np.float32(v))
            for lane in sums:
                part = np.float32(part + lane)
        else:
            for v in mine:
                part = np.float32(np.float64(part) + v)
        total = np.float32(total + part)
    return total


def test_float32_sum_rounds_after_every_addition(backend, kernel_module):
    """``w: float`` makes each value float64; the store into the float32 array rounded
    after each addition, and so does the local (a float64 local would not)."""
    m = kernel_module(KERNELS)
    n = _n("numba")      # chunks long enough for the rounding to show
    # one value n times: each float32 rounding errs the same way, so the sums show it
    x0 = np.full(n, 333.3, np.float32)
    loss = ad.array(np.array([0.125], np.float32))
    ad.launch(m.widened, dim=n, inputs=[ad.array(x0), 0.1], outputs=[loss])
    values = 0.1 * x0.astype(np.float64)
    got = loss.numpy()[0]
    if backend == "cuda":       # atomics in an unknown order: only the tolerance
        assert float(got) == pytest.approx(0.125 + math.fsum(values), rel=1e-3)
        return
    # (the Python backend runs serially, or in racecheck.MAX_CHUNKS chunks when checking)
    chunks = backend_numba.MAX_CHUNKS if backend == "numba" else \
        racecheck_module.MAX_CHUNKS if racecheck_module.enabled() else 1
    chunks = max(1, min(chunks, n))
    grid = backend == "numba" or racecheck_module.enabled()     # (else the serial loop)
    assert got == _float32_sum(values, 0.125, chunks, lanes=grid), (got, math.fsum(values))
    float64_local = np.float32(0.125)
    for c in range(chunks):
        part = math.fsum(values[chunk_start(n, chunks, c):chunk_start(n, chunks, c + 1)])
        float64_local = np.float32(float64_local + np.float32(part))
    assert got != float64_local       # (the data shows the difference)


def test_a_stopped_thread_keeps_what_it_added_before(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    rng = np.random.default_rng(6)
    x0 = rng.integers(-8, 8, n).astype(np.float64)       # integers: exact sums
    idx = rng.integers(0, n, n)
    bad = [5, n // 2, n - 3]
    idx[bad] = n + 10
    loss = ad.zeros(1)
    with pytest.raises(ad.BoundsError):
        ad.launch(m.stopped, dim=n, inputs=[ad.array(x0), ad.array(idx)], outputs=[loss])
        loss.numpy()            # (where CUDA reports it)
    good = np.ones(n, bool)
    good[bad] = False
    # every thread added its 1.0; the stopped ones nothing after their failed check
    assert loss.numpy()[0] == n + np.sum(x0[idx[good]])


def test_an_empty_array_no_thread_reaches(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    x = ad.array(np.linspace(-1.0, 0.5, n))          # never above 1: no thread adds
    loss = ad.zeros(0)
    ad.launch(m.maybe, dim=n, inputs=[x], outputs=[loss])
    x = ad.array(np.linspace(-1.0, 2.0, n))
    with pytest.raises(ad.BoundsError):
        ad.launch(m.maybe, dim=n, inputs=[x], outputs=[loss])
        ad.synchronize()        # (where CUDA reports it)


def test_sums_pass_the_race_checker(kernel_module):
    m = kernel_module(KERNELS)
    x0 = np.random.default_rng(7).uniform(-2.0, 2.0, 200)
    with ad.backend_scope("python"), racecheck():
        out, grad = _grad(m.slot_loss, 200, [], x0, [1], np.zeros((3, 4)), np.ones((3, 4)))
        _grad(m.shared_param, 200, [], x0, [np.array([0.5, 1.0])], np.zeros(200), np.ones(200))
    assert out[1, 1] == pytest.approx(math.fsum(np.cos(x0)), rel=1e-12)
