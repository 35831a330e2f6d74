"""The race checker (adjoint/runtime/racecheck.py) of the Python backend.

The first tests run hand-written grid functions shaped like generated ones (a
``prange`` over rows, chunks with private copies, even/odd row blocks) so that
each race they contain is known independently of the transformer's plans. The
last ones launch kernels through the transformer: kernels whose plans are right
run unchanged, and the two plans issue 10 found wrong are caught.
"""
import threading

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_python as rt
from adjoint.runtime.racecheck import MAX_CHUNKS, RaceError, racecheck


@pytest.fixture(autouse=True)
def python_backend():
    with ad.backend_scope("python"):
        yield


@rt.jit_grid
def pairs_store(dim0, x, out):
    for tid0 in rt.prange(dim0):
        out[tid0 // 2] = x[tid0]           # rows 2k and 2k + 1 store one element


@rt.jit_grid
def running_sum(dim0, x):
    for tid0 in rt.prange(dim0):
        if tid0 > 0:
            x[tid0] = x[tid0] + x[tid0 - 1]   # reads what the row before writes


@rt.jit_grid
def shared_read(dim0, x, out):
    for tid0 in rt.prange(dim0):
        out[tid0] = x[0] + x[tid0]         # every row reads x[0]: no race


@rt.jit_grid
def two_params(dim0, a, b, out):
    for tid0 in rt.prange(dim0):
        out[tid0] = a[tid0] * b[tid0]
        a[tid0] += 1.0


@rt.jit_grid
def slice_store(dim0, out):
    for tid0 in rt.prange(dim0):
        out[tid0:tid0 + 2] = 1.0           # rows t and t + 1 both store element t + 1


@rt.jit_grid
def small_or_parallel(dim0, out):
    if dim0 < rt.PARALLEL_MIN_THREADS:     # as generated code starts
        for tid0 in range(dim0):
            out[0] += 1.0
        return
    for tid0 in rt.prange(dim0):
        out[0] += 1.0


def test_two_rows_storing_one_element_is_a_race():
    with racecheck(), pytest.raises(RaceError) as err:
        pairs_store(6, np.arange(6.0), np.zeros(3))
    msg = str(err.value)
    assert "'pairs_store'" in msg and "plan 'parallel'" in msg
    assert "element 'out'[0]" in msg and "row 1" in msg and "row 0" in msg
    assert "written by row 1 and written by row 0" in msg


def test_a_row_reading_what_another_writes_is_a_race():
    with racecheck(), pytest.raises(RaceError, match=r"'x'\[1\] is read by row 2 and read and "
                                                     r"written \(\+=\) by row 1"):
        running_sum(4, np.ones(4))


def test_a_slice_store_records_every_element():
    with racecheck(), pytest.raises(RaceError, match=r"'out'\[1\] is written by row 1 and "
                                                     r"written by row 0"):
        slice_store(3, np.zeros(4))


def test_reads_shared_by_every_row_and_unchecked_runs_pass():
    out = np.zeros(5)
    with racecheck():
        shared_read(5, np.arange(5.0), out)
    np.testing.assert_array_equal(out, np.arange(5.0))
    x = np.ones(4)
    with racecheck(False):
        running_sum(4, x)                  # not checked: runs as plain Python
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0, 4.0])


def test_one_buffer_for_two_parameters_is_caught_within_one_row():
    x = np.arange(1.0, 4.0)
    with racecheck(), pytest.raises(RaceError) as err:
        two_params(3, x, x, np.zeros(3))
    msg = str(err.value)
    assert "'a'[0] (also 'b'[0]: the same memory)" in msg
    assert "by row 0" in msg and "do not overlap" in msg
    with racecheck():                      # distinct buffers: no race
        two_params(3, np.arange(1.0, 4.0), np.arange(1.0, 4.0), np.zeros(3))


def test_overlapping_views_are_the_same_elements():
    x = np.zeros(6)
    with racecheck(), pytest.raises(RaceError) as err:
        two_params(4, x[1:5], x[:4], np.zeros(4))   # a[t] is b[t + 1]
    msg = str(err.value)
    assert "'b'[1] (also 'a'[0]: the same memory)" in msg
    assert "row 1" in msg and "row 0" in msg and "at the same time" in msg
    with racecheck():                      # disjoint halves of one buffer: no race
        two_params(3, x[:3], x[3:], np.zeros(3))


def test_small_launches_take_the_parallel_path_while_checking():
    with racecheck(False):
        assert rt.PARALLEL_MIN_THREADS == 2048
        small_or_parallel(4, np.zeros(1))
    with racecheck():
        assert rt.PARALLEL_MIN_THREADS == 0
        with pytest.raises(RaceError, match="element 'out'\\[0\\]"):
            small_or_parallel(4, np.zeros(1))


@rt.jit_grid
def scatter(dim0, x, idx, out, private):
    n_chunks = rt.chunk_count(dim0)
    out_chunks = rt.private_copies(out, n_chunks)
    for chunk in rt.prange(n_chunks):
        for tid0 in range(rt.chunk_start(dim0, n_chunks, chunk),
                          rt.chunk_start(dim0, n_chunks, chunk + 1)):
            if private:
                out_chunks[chunk][idx[tid0]] += x[tid0]
            else:
                out[idx[tid0]] += x[tid0]
    rt.add_chunks(out, out_chunks)


def test_private_copies_per_chunk_are_not_races_but_a_shared_array_is():
    x, idx = np.arange(40.0), np.arange(40) % 3
    expected = np.bincount(idx, weights=x)
    out = np.zeros(3)
    with racecheck():
        scatter(40, x, idx, out, True)
        assert rt.chunk_count(40) == 1     # outside a checked grid: the serial backend's
    np.testing.assert_allclose(out, expected)
    x, idx = np.arange(200.0), np.arange(200) % 3
    with racecheck(), pytest.raises(RaceError) as err:
        scatter(200, x, idx, np.zeros(3), False)
    msg = str(err.value)
    assert f"grid function 'scatter', plan 'privatize' ({MAX_CHUNKS} chunks run at once)" in msg
    assert "by chunk 1 (rows 3..5)" in msg and "by chunk 0 (rows 0..2)" in msg


def _stencil_thread(tid0, u, adj_u, wrap):
    """Adds into rows tid0 - 1 and tid0 + 1: clamped at the ends (``wrap`` None), or
    wrapped, row 0's lower neighbour being row ``wrap`` and row n-1's upper one row 0."""
    n = u.shape[0]
    lo, hi = tid0 - 1, tid0 + 1
    if wrap is not None:
        lo, hi = (wrap if lo < 0 else lo), (0 if hi == n else hi)
    else:
        lo, hi = max(lo, 0), min(hi, n - 1)
    adj_u[lo] += u[tid0]
    adj_u[hi] += u[tid0]


@rt.jit_grid
def stencil(dim0, u, adj_u, wrap):
    n_blocks = rt.block_count(dim0, 1)
    for phase in range(2):
        for pair in rt.prange((n_blocks + (1 - phase)) // 2):
            block = 2 * pair + phase
            for tid0 in range(rt.chunk_start(dim0, n_blocks, block),
                              rt.chunk_start(dim0, n_blocks, block + 1)):
                _stencil_thread(tid0, u, adj_u, wrap)


@pytest.mark.parametrize("n", [6, 7, 8, 9, 13])
def test_even_odd_blocks_pass_a_stencil_and_a_ring(n):
    """The blocks are even in number (rt.block_count), so on a ring (row 0's neighbour
    is row n-1) the first and the last block never run at once, for any n."""
    assert rt.block_count(n, 1) % 2 == 0
    u = np.arange(1.0, n + 1.0)
    for wrap in (None, n - 1):
        adj = np.zeros(n)
        with racecheck():
            stencil(n, u, adj, wrap)
        expected = np.zeros(n)
        for t in range(n):
            expected[(t - 1) % n if wrap else max(t - 1, 0)] += u[t]
            expected[(t + 1) % n if wrap else min(t + 1, n - 1)] += u[t]
        np.testing.assert_allclose(adj, expected)


def test_even_odd_blocks_catch_a_wraparound_beyond_the_radius():
    """Row 0's neighbour wrapped to row 4 (not within the radius 1 of row 0 on the
    ring): blocks 0 and 2 run at once and both reach row 4."""
    u = np.arange(1.0, 9.0)
    with racecheck(), pytest.raises(RaceError) as err:
        stencil(8, u, np.zeros(8), 4)
    msg = str(err.value)
    assert "plan 'color' (radius 1, 4 blocks of rows; phase 0" in msg
    assert "'adj_u'[4]" in msg and "block 2 (rows 4..5)" in msg and "block 0 (rows 0..1)" in msg


# --- kernels through the transformer -------------------------------------------------------

KERNELS = """
@ad.kernel
def scatter_add(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int64),
                out: ad.array(dtype=float)):
    i = ad.tid()
    out[idx[i]] += x[i] * x[i]

@ad.kernel
def heat(u: ad.array(dtype=float, ndim=2), a: float, v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    if i > 0 and i < n0 - 1:
        v[i, j] = u[i, j] + a * (u[i + 1, j] + u[i - 1, j] - 2.0 * u[i, j])

@ad.kernel
def periodic(u: ad.array(dtype=float, ndim=2), a: float, v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    im = i - 1
    if im < 0:
        im = n0 - 1
    ip = i + 1
    if ip == n0:
        ip = 0
    v[i, j] = u[i, j] + a * (u[ip, j] + u[im, j] - 2.0 * u[i, j])

@ad.kernel
def merge_store(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    k = i
    if x[i] > 0.0:
        k = 0
    out[k] = x[i] * 2.0

@ad.kernel
def walk(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    j = i
    for k in range(2):
        out[j] += x[i] * x[i]
        j = j + 1

@ad.kernel
def walk_gather(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    j = i
    s = 0.0
    for k in range(2):
        s += x[j] * x[j]
        j = j + 1
    out[i] = s

@ad.kernel
def while_walk(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    j = i
    while j < i + 2:
        out[j] += x[i]
        j = j + 1

@ad.kernel
def two_reads(u0: ad.array(dtype=float, ndim=2), u1: ad.array(dtype=float, ndim=2),
              o: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    o[i, j] = u0[i + 1, j] * u1[i + 1, j] + u1[i, j]
"""


def _grad(kernel, dim, inputs, out_shape):
    """Forward and backward of ``kernel`` with seed ones; returns the first input's grad."""
    outs = [ad.zeros(out_shape, requires_grad=True)]
    with ad.Tape() as tape:
        ad.launch(kernel, dim, inputs=inputs, outputs=outs)
    tape.backward(grads={outs[0]: np.ones(out_shape)})
    return inputs[0].grad.numpy()


def test_right_plans_of_small_launches_pass_and_give_the_same_gradients(kernel_module):
    m = kernel_module(KERNELS)
    rng = np.random.default_rng(0)
    xs, idx = rng.normal(size=9), rng.integers(0, 4, 9)
    us = rng.normal(size=(6, 5))
    grads = {}
    for on in (False, True):
        with racecheck(on):
            grads[on] = (_grad(m.scatter_add, 9, [ad.array(xs, requires_grad=True),
                                                  ad.array(idx)], 4),
                         _grad(m.heat, (6, 5), [ad.array(us, requires_grad=True), 0.1], (6, 5)))
    np.testing.assert_allclose(grads[True][0], 2.0 * xs)
    for off, on in zip(grads[False], grads[True]):
        np.testing.assert_allclose(on, off, rtol=1e-14)


def test_periodic_stencil_race_is_caught_or_fixed(kernel_module):
    """Issue 10 item 1: the wrap-around rows were planned as 'color' with radius 1."""
    m = kernel_module(KERNELS)
    u = ad.array(np.random.default_rng(1).normal(size=(6, 5)), requires_grad=True)
    try:
        with racecheck():
            g = _grad(m.periodic, (6, 5), [u, 0.1], (6, 5))
    except RaceError as e:
        assert "'periodic'" in str(e) and "'adj_u'" in str(e) and "plan 'color'" in str(e)
        pytest.xfail(f"issue 10 item 1, caught by the race checker: {e}")
    np.testing.assert_allclose(g, np.ones((6, 5)), rtol=1e-14)   # d sum(v) / du = 1 - 2a + 2a


def test_one_array_for_two_read_parameters_is_caught_or_fixed(kernel_module):
    """Issue 10 item 2: adj_u0 and adj_u1 are one buffer inside one parallel loop."""
    m = kernel_module(KERNELS)
    xs = np.random.default_rng(2).normal(size=(8, 8))
    x = ad.array(xs, requires_grad=True)
    try:
        with racecheck():
            g = _grad(m.two_reads, (7, 8), [x, x], (7, 8))
    except RaceError as e:
        assert "'two_reads'" in str(e) and "the same memory" in str(e)
        pytest.xfail(f"issue 10 item 2, caught by the race checker: {e}")
    expected = 2.0 * xs * (np.arange(8) >= 1)[:, None] + (np.arange(8) <= 6)[:, None]
    np.testing.assert_allclose(g, expected, rtol=1e-14)


N8 = np.linspace(-1.0, 1.0, 8)
K = np.arange(10)


@pytest.mark.parametrize("name, n_x, n_out, grad", [
    # threads 0 and 4..7 store out[0]; thread 7 runs last, so its value survives
    ("merge_store", 8, 8, np.where(np.isin(np.arange(8), [1, 2, 3, 7]), 2.0, 0.0)),
    ("walk", 8, 10, 4.0 * N8),                          # out[i] and out[i + 1] += x[i]^2
    ("walk_gather", 10, 8, 2.0 * np.linspace(-1.0, 1.0, 10) *    # x[k] read by threads k-1, k
     ((K < 8).astype(float) + ((K >= 1) & (K <= 8)))),
    ("while_walk", 8, 10, np.full(8, 2.0)),             # out[i] and out[i + 1] += x[i]
])
def test_thread_index_merged_with_another_value_is_not_exclusive(kernel_module, name, n_x,
                                                                 n_out, grad):
    """A copy of the thread index merged (branch or loop) with another value indexes
    elements other threads reach too; planned 'parallel' on 6a0420a."""
    m = kernel_module(KERNELS)
    x = ad.array(np.linspace(-1.0, 1.0, n_x), requires_grad=True)
    out = ad.zeros(n_out, requires_grad=True)
    try:
        with racecheck():
            with ad.Tape() as tape:
                ad.launch(getattr(m, name), 8, inputs=[x], outputs=[out])
            tape.backward(grads={out: np.ones(n_out)})
    except RaceError as e:
        assert f"'{name}'" in str(e) and "plan 'parallel'" in str(e)
        pytest.xfail(f"caught by the race checker: {e}")
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-14, atol=1e-15)


_inside, _resume = threading.Event(), threading.Event()


@rt.jit_grid
def own_rows_waiting(dim0, x, out):
    for tid0 in rt.prange(dim0):
        if tid0 == 1:                    # mid-grid: let another thread run a whole grid
            _inside.set()
            _resume.wait(10)
        out[tid0] = x[tid0] * 2.0


def test_launches_from_two_python_threads_are_checked_apart():
    """The checker's state is per Python thread, as concurrent first launches need: a
    grid another thread runs while one is mid-way is checked on its own (its race is
    caught, not run unchecked) and leaves the first one's rows alone."""
    _inside.clear()
    _resume.clear()
    x, out_a, errors = np.arange(4.0), np.zeros(4), []

    def a():
        try:
            with racecheck():
                own_rows_waiting(4, x, out_a)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    t = threading.Thread(target=a)
    with racecheck():
        t.start()
        try:
            assert _inside.wait(10)
            with pytest.raises(RaceError, match="'pairs_store'"):
                pairs_store(6, np.arange(6.0), np.zeros(3))   # this thread's racy grid
        finally:
            _resume.set()
            t.join()
    assert errors == []
    np.testing.assert_array_equal(out_a, x * 2.0)
