"""Gradients a backward leaves all zero are noted clean (optimize/zeroed.py).

A launch whose backward clears every element of an adjoint array (each thread its
own element, on every path, and nothing adds into it) leaves that gradient zero
when its grid is the array's shape; the tape then notes the buffer clean
(runtime/watch.py), and ``Tape.zero`` skips it. A buffer noted clean while it holds
anything else would keep its values through ``zero()``: the second round on the
same tape would add onto them. So each case below runs two rounds on one tape
(backward, zero, backward with another seed) and checks every gradient against
float64 central differences on every backend, and whether the intermediate
gradient was noted clean -- where the fact holds, and where it must not
(a conditional store, a store at ``i + 1``, a grid smaller than the array, a load
after the store, a store in a loop, an early return).
"""
import numpy as np
import pytest
from tests.conftest import central_fd

import adjoint as ad
from adjoint.runtime import watch
from adjoint.runtime.steps import mark_zeroed

KERNELS = '''
@ad.kernel
def store(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = math.sin(x[i])


@ad.kernel
def branches(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    if x[i] > 0.0:
        y[i] = math.sin(x[i])
    else:
        y[i] = x[i] * 3.0


@ad.kernel
def cond(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    if x[i] > 0.0:
        y[i] = math.sin(x[i])


@ad.kernel
def shift(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i + 1] = math.sin(x[i])


@ad.kernel
def reread(x: ad.array(dtype=float), y: ad.array(dtype=float), w: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = math.sin(x[i])
    w[i] = y[i] * 2.0 + x[i]


@ad.kernel
def plus_atomic(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = math.sin(x[i])
    ad.atomic_add(y, i, x[i] * x[i])


@ad.kernel
def mix(a: ad.array(dtype=float), b: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = a[i] * b[i]


@ad.kernel
def in_loop(x: ad.array(dtype=float), y: ad.array(dtype=float), n: int):
    i = ad.tid()
    for k in range(n):
        y[i] = x[i] * float(k + 1)


@ad.kernel
def early(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    if x[i] > 0.5:
        return
    y[i] = math.sin(x[i])


@ad.kernel
def transposed(x: ad.array(dtype=float, ndim=2), y: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    y[j, i] = x[i, j] * 2.0


@ad.kernel
def grid2(x: ad.array(dtype=float, ndim=2), y: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    if i > 0 and j > 0:
        y[i, j] = x[i, j] * x[i - 1, j - 1]
    else:
        y[i, j] = x[i, j]


@ad.kernel
def square(y: ad.array(dtype=float), z: ad.array(dtype=float)):
    i = ad.tid()
    z[i] = y[i] * y[i] + 0.5 * y[i]
'''


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(KERNELS)


def test_which_adjoints_are_proven_zeroed(kernels):
    """Proven: stores at the thread index on every path (an atomic into the stored
    element only reads its adjoint). Not: a conditional store, another index, an added
    load of the stored array, a store in a loop, after an early return, transposed."""
    table = {"store": ("y",), "branches": ("y",), "cond": (), "shift": (), "reread": ("w",),
             "plus_atomic": ("y",), "mix": ("y",), "in_loop": (), "early": (),
             "transposed": (), "grid2": ("y",), "square": ("z",)}
    assert {k: getattr(kernels, k).spec.zeroed_arrays for k in table} == table


# -- two rounds on one tape against central differences ---------------------------------
N = 8
RNG = np.random.default_rng(11)
X0 = RNG.uniform(-1.0, 1.0, N)
Y0 = RNG.standard_normal(N)         # y's values before the launch: kept where not stored
SEEDS = (RNG.standard_normal(N), RNG.standard_normal(N))


def _sq(y):
    return y * y + 0.5 * y


def _case(kernels, name):
    """(launches(x, y, w), reference(x, y0) -> the array ``square`` reads, whether
    y's gradient is noted clean after a backward): x -> [kernel] -> y -> square -> z."""
    def one(dim):
        return lambda x, y, w: ad.launch(getattr(kernels, name), dim=dim, inputs=[x], outputs=[y])
    sin = np.sin
    return {
        "store": (one(N), lambda x, y: sin(x), True),
        "branches": (one(N), lambda x, y: np.where(x > 0, sin(x), 3 * x), True),
        "cond": (one(N), lambda x, y: np.where(x > 0, sin(x), y), False),
        "shift": (one(N - 1), lambda x, y: np.concatenate([y[:1], sin(x[:-1])]), False),
        "small_grid": (lambda x, y, w: ad.launch(kernels.store, dim=N - 2, inputs=[x],
                                                 outputs=[y]),
                       lambda x, y: np.concatenate([sin(x[:-2]), y[-2:]]), False),
        "plus_atomic": (one(N), lambda x, y: sin(x) + x * x, True),
        "twice_in": (lambda x, y, w: ad.launch(kernels.mix, dim=N, inputs=[x, x], outputs=[y]),
                     lambda x, y: x * x, True),
        "in_loop": (lambda x, y, w: ad.launch(kernels.in_loop, dim=N, inputs=[x], outputs=[y, 3]),
                    lambda x, y: 3 * x, False),
        "early": (one(N), lambda x, y: np.where(x > 0.5, y, sin(x)), False),
        # w (zeroed) feeds square; y is stored, then loaded: its adjoint is added into
        "reread": (lambda x, y, w: ad.launch(kernels.reread, dim=N, inputs=[x], outputs=[y, w]),
                   lambda x, y: 2 * sin(x) + x, False),
    }[name]


CASES = ["store", "branches", "cond", "shift", "small_grid", "plus_atomic", "twice_in",
         "in_loop", "early", "reread"]


@pytest.mark.parametrize("case", CASES)
def test_two_rounds_on_one_tape(backend, kernels, case):
    if backend == "cuda" and case == "shift":
        pytest.skip("a store at i + 1 has no CUDA backward (stores other threads may collide with)")
    launches, ref, clean = _case(kernels, case)
    x = ad.array(X0, requires_grad=True)
    y = ad.array(Y0, requires_grad=True)
    w = ad.array(Y0[::-1].copy(), requires_grad=True)
    mid = w if case == "reread" else y          # the array square reads
    z = ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        launches(x, y, w)
        ad.launch(kernels.square, dim=N, inputs=[mid], outputs=[z])
    for seed in SEEDS:
        tape.backward(grads={z: seed})
        assert watch.is_clean(z.grad._data)     # square stores all of z
        assert watch.is_clean(y.grad._data) == clean
        gx = central_fd(lambda v: float(seed @ _sq(ref(v, Y0))), X0)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
        if seed is SEEDS[-1]:       # (y.grad.numpy() hands the buffer out: no longer clean)
            gy = central_fd(lambda v: float(seed @ _sq(ref(X0, v))), Y0)
            np.testing.assert_allclose(y.grad.numpy(), gy, rtol=1e-6, atol=1e-8)
            np.testing.assert_array_equal(z.grad.numpy(), 0.0)
        tape.zero()
    for a in (x, y, w, z):
        np.testing.assert_array_equal(a.grad.numpy(), 0.0)


def test_a_2d_grid_equal_to_the_array(backend, kernels):
    """A 2-D launch storing every element (a border branch and an interior one): two
    rounds; a grid one row short leaves that row's gradient, noted dirty."""
    x0 = RNG.uniform(-1.0, 1.0, (4, 5))
    y0 = RNG.standard_normal((4, 5))
    seeds = (RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5)))

    def ref(x, y, rows):
        out = y.copy()
        inner = x.copy()
        inner[1:, 1:] = x[1:, 1:] * x[:-1, :-1]
        out[:rows] = inner[:rows]
        return out

    for rows in (4, 3):
        x = ad.array(x0, requires_grad=True)
        y = ad.array(y0, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(kernels.grid2, dim=(rows, 5), inputs=[x], outputs=[y])
        tape.backward(grads={y: seeds[0]})
        assert watch.is_clean(y.grad._data) == (rows == 4)
        gx = central_fd(lambda v: float(np.sum(seeds[0] * ref(v, y0, rows))), x0)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
        tape.zero()
        tape.backward()         # nothing seeded: all zero, unless zero() skipped a stale value
        np.testing.assert_array_equal(x.grad.numpy(), 0.0)
        np.testing.assert_array_equal(y.grad.numpy(), 0.0)
        tape.backward(grads={y: seeds[1]})
        gx = central_fd(lambda v: float(np.sum(seeds[1] * ref(v, y0, rows))), x0)
        gy = central_fd(lambda v: float(np.sum(seeds[1] * ref(x0, v, rows))), y0)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(y.grad.numpy(), gy, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("how", ["numpy", "fill", "assign"])
def test_a_user_write_after_the_backward_is_zeroed(backend, kernels, how):
    """A write into a gradient noted clean (by the user, between backward and zero)
    makes it dirty again: ``zero()`` zeroes it, and the next round is exact."""
    x = ad.array(X0, requires_grad=True)
    y = ad.array(Y0, requires_grad=True)
    z = ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.store, dim=N, inputs=[x], outputs=[y])
        ad.launch(kernels.square, dim=N, inputs=[y], outputs=[z])
    gx = [central_fd(lambda v: float(s @ _sq(np.sin(v))), X0) for s in SEEDS]
    tape.backward(grads={z: SEEDS[0]})
    assert watch.is_clean(y.grad._data)
    if how == "numpy" and backend == "cuda":
        y.grad.numpy()[...] = 7.0       # a host copy: the gradient itself stays clean
        assert watch.is_clean(y.grad._data)
        return
    if how == "numpy":
        y.grad.numpy()[...] = 7.0
    elif how == "fill":
        y.grad.fill_(7.0)
    else:
        y.grad.assign(np.full(N, 7.0))
    assert not watch.is_clean(y.grad._data)
    tape.zero()
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)
    tape.backward(grads={z: SEEDS[1]})
    np.testing.assert_allclose(x.grad.numpy(), gx[1], rtol=1e-6, atol=1e-8)


def test_a_gradient_sharing_memory_with_another_adjoint_is_not_noted(kernels):
    """``call_unaliased`` gives the later of two adjoint buffers sharing memory a scratch
    copy and adds it into the shared one after the threads ran: what the backward
    cleared may then hold values. (A launch refuses a written array passed twice, so
    this needs two arrays whose gradients share memory, as a wrapper could make.)"""
    spec = kernels.store.spec
    x, y = ad.array(X0, requires_grad=True), ad.array(Y0, requires_grad=True)
    y.grad.fill_(1.0)
    mark_zeroed(spec, [x, y], (N,), [y.grad._data, y.grad._data])
    assert not watch.is_clean(y.grad._data)
    mark_zeroed(spec, [x, y], (N,), [x.grad._data, y.grad._data])
    assert watch.is_clean(y.grad._data)
