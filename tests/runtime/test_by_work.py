"""Serial or parallel by the work of a launch (issue 39): a kernel part with a parallel
plan runs its serial loop (``<part>_small``) below ``PARALLEL_MIN_THREADS`` threads'
worth of work, where the work is the threads times the trip counts of the thread's
loops that a launch's arguments give (emit/spec.py ``trips``; runtime/helpers.py
``by_size``). A grid of 64 bodies each looping over 64 runs in parallel; a grid of 64
threads each doing a few operations stays serial. Both variants compute the same
values (tests/derive/test_parallel.py), so the choice is checked on what is picked."""
import numpy as np

import adjoint as ad
from adjoint.emit.spec import trips
from adjoint.runtime import helpers
from adjoint.runtime.capture_code import resolve

SOURCE = """
@ad.kernel
def pairs(n: int, x: ad.array(dtype=ad.float64), out: ad.array(dtype=ad.float64)):
    i = ad.tid()
    e = 0.0
    for j in range(n):
        e += x[i] * x[j]
    out[i] = e


@ad.kernel
def nested(x: ad.array(dtype=ad.float64), m: int, out: ad.array(dtype=ad.float64)):
    i = ad.tid()
    s = 0.0
    for j in range(x.shape[0]):
        for q in range(m - 1):
            s += x[j] * x[i]
    out[i] = s


@ad.kernel
def fixed(x: ad.array(dtype=ad.float64), out: ad.array(dtype=ad.float64)):
    i = ad.tid()
    s = 0.0
    k = 0
    while k < 3:
        s += x[i]
        k += 1
    out[i] = s * 2.0
"""


def test_trips_name_the_loops_a_launch_bounds(kernel_module):
    m = kernel_module(SOURCE)
    assert trips(m.pairs.transformed) == (0,)              # range(n): argument 0
    assert trips(m.nested.transformed) == ((0, 0), 1)      # x.shape[0], then m - 1
    assert trips(m.fixed.transformed) == ()                # a while loop counts once


def test_by_size_weighs_threads_by_trips():
    ran = []
    run = helpers.by_size(lambda *a: ran.append("small"), lambda *a: ran.append("grid"), 1,
                          lambda: 2048, trips=(0, (1, 0)))
    run(64, 8, np.zeros(3))                 # 64 * 8 * 3 = 1536 < 2048
    run(64, 8, np.zeros(4))                 # 2048
    run(64, 0, np.zeros(100))               # a loop of no trips counts once: 6400
    assert ran == ["small", "grid", "grid"]
    plain = helpers.by_size(lambda *a: ran.append("small"), lambda *a: ran.append("grid"), 2,
                            lambda: 2048)
    ran.clear()
    plain(32, 32)
    plain(64, 32)
    assert ran == ["small", "grid"]


def test_a_numba_launch_picks_its_variant_by_work(kernel_module):
    m = kernel_module(SOURCE)
    with ad.backend_scope("numba"):
        spec = m.pairs.spec
        with open(m.pairs.modules["numba"].__file__, encoding="utf-8") as fh:
            assert "rt.by_size(pairs_forward_small, pairs_forward, 1, trips=(0,))" in fh.read()
        small, grid = spec.forward.__wrapped__.by_size[:2]
        x = np.linspace(0.0, 1.0, 64)
        picked = {n: resolve(spec.forward, (64,), [n, x, np.zeros(64)])[0] for n in (8, 64)}
        assert picked[8] is small and picked[64] is grid      # 512 and 4096 threads' worth
        for n in (8, 64):       # (and the values are the sums either way)
            o = ad.zeros(64, dtype=ad.float64)
            ad.launch(m.pairs, 64, [n, ad.array(x)], [o], record_tape=False)
            np.testing.assert_allclose(o.numpy(), x * x[:n].sum(), rtol=1e-13)
