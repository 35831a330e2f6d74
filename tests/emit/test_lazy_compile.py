"""Only what a launch runs is compiled: a small launch runs (and numba compiles) the serial
``<kernel>_<part>_small`` and never the parallel grid function, a large one the grid
function and never the serial loop (emit/module.py, ``rt.by_size``).

Values are checked by hand on every backend; what was compiled, on numba.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_numba, backend_python, config, racecheck
from adjoint.runtime.backend_numba import PARALLEL_MIN_THREADS

KERNEL = '''
@ad.kernel
def cube(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] * x[i] * x[i]

@ad.kernel
def rows(u: ad.array(dtype=float, ndim=2), total: ad.array(dtype=float)):
    i, j = ad.tid()
    ad.atomic_add(total, 0, u[i, j] * u[i, j])
'''


def _module(kernel):
    (module,) = kernel.modules.values()
    return module


def _compiled(fn):
    """How many signatures numba compiled (or loaded) for the dispatcher ``fn``."""
    return len(fn.signatures)


def _cube(kernel, n):
    x0 = np.linspace(-1.0, 1.0, n)
    x = ad.array(x0, requires_grad=True)
    out = ad.zeros(n, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, n, inputs=[x], outputs=[out])
    tape.backward(grads={out: np.ones(n)})
    np.testing.assert_allclose(out.numpy(), x0 ** 3, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * x0 ** 2, rtol=1e-12)


def test_small_and_large_launches_give_the_same_values(backend, kernel_module):
    m = kernel_module(KERNEL)
    for n in (7, 2 * PARALLEL_MIN_THREADS + 3):
        _cube(m.cube, n)


def test_a_small_launch_compiles_only_the_serial_loop(kernel_module):
    m = kernel_module(KERNEL)
    with ad.backend_scope("numba"):
        _cube(m.cube, 9)
        gen = _module(m.cube)
        assert _compiled(gen.cube_forward_small) == 1 and _compiled(gen.cube_backward_small) == 1
        assert _compiled(gen.cube_forward) == 0 and _compiled(gen.cube_backward) == 0


def test_a_large_launch_compiles_only_the_parallel_loop(kernel_module, monkeypatch):
    """On a tape, ``rows`` (a one-element loss) runs its forward and VJP as one launch
    (runtime/eager.py): that grid function alone is compiled, nothing replays. With that
    off, the forward's and the backward's grid functions, not their serial loops."""
    m = kernel_module(KERNEL)
    n0, n1 = 4, PARALLEL_MIN_THREADS // 2          # 2-D: the size is n0 * n1 threads
    u0 = np.random.default_rng(3).random((n0, n1))
    gen = None
    for eager in (True, False):
        monkeypatch.setattr(config, "eager_vjp", eager)
        with ad.backend_scope("numba"):
            u = ad.array(u0, requires_grad=True)
            total = ad.zeros(1, requires_grad=True)
            with ad.Tape() as tape:
                ad.launch(m.rows, (n0, n1), inputs=[u], outputs=[total])
            tape.backward(grads={total: np.array([1.0])})
            gen = _module(m.rows)
            if eager:
                assert _compiled(gen.rows_forward_vjp) == 1
                assert _compiled(gen.rows_forward) == 0 and _compiled(gen.rows_backward) == 0
            else:
                assert _compiled(gen.rows_forward) == 1 and _compiled(gen.rows_backward) == 1
            assert _compiled(gen.rows_forward_small) == 0
            assert _compiled(gen.rows_backward_small) == 0
            assert _compiled(gen.rows_forward_vjp_small) == 0
        np.testing.assert_allclose(total.numpy(), [np.sum(u0 * u0)], rtol=1e-12)
        np.testing.assert_allclose(u.grad.numpy(), 2.0 * u0, rtol=1e-12)


@pytest.mark.parametrize("checking", [False, True])
def test_the_python_backend_runs_the_parallel_plan_under_race_checking(checking):
    """Race checking checks the parallel plan whatever the launch's size; otherwise a
    launch below the threshold runs the serial loop, on both CPU backends."""
    for rt in (backend_python, backend_numba):
        ran = []
        run = rt.by_size(lambda *a: ran.append(("small", a)), lambda *a: ran.append(("grid", a)), 2)
        with racecheck.racecheck(checking):
            run(3, 5, "x")
            run(2, PARALLEL_MIN_THREADS, "y")
        parallel_small = checking and rt is backend_python
        assert ran == [("grid" if parallel_small else "small", (3, 5, "x")),
                       ("grid", (2, PARALLEL_MIN_THREADS, "y"))]


def _helper_compiles(run, helper_name):
    """The argument types of each compilation numba made of the function named
    ``helper_name`` while ``run()`` ran."""
    from numba.core import event
    with event.install_recorder("numba:compile") as rec:
        run()
    return [ev.data["args"] for _, ev in rec.buffer
            if not ev.is_start and ev.data["dispatcher"].py_func.__name__ == helper_name]


@pytest.mark.skipif(not backend_numba.SHARED_OVERLOADS,
                    reason="this numba's overload templates differ: helpers compile per flags")
def test_a_runtime_helper_compiles_once_for_every_caller():
    """A helper called from a plain function, from a parallel region (compiled by numba
    with other flags) and from a second grid is compiled once per argument types: numba
    keyed overload implementations by the caller's flags too (backend_numba
    ``_overload_shared``; two or three compiles of each helper per process before)."""
    import numba

    def triple_plus(a, b):
        return 3 * a + b
    helper = backend_numba.jit_helper(triple_plus)

    @numba.njit
    def plain(n):
        return helper(n, 1)

    def make_grid(b):
        @numba.njit(parallel=True)
        def grid(n):
            total = 0
            for i in numba.prange(n):
                total += helper(backend_numba.signed(i), b)
            return total
        return grid
    grid, other_grid = make_grid(1), make_grid(2)

    def run():
        assert plain(4) == 13
        assert grid(4) == 3 * 6 + 4
        assert other_grid(4) == 3 * 6 + 8
    compiled = _helper_compiles(run, "triple_plus")
    assert compiled and len(compiled) == len(set(compiled)), compiled
