"""Deferred zeros (runtime/owed.py) and the stores that make them unneeded (optimize/cover.py).

``zero_()`` of a large CPU gradient nothing else references writes nothing; the
memory is zeroed when next looked at, unless a storing backward writes every
element first. A zero owed and never written where a reader expected zeros -- or a
backward that covers only part of the array -- would leave an earlier round's values
in the gradient: a silent wrong gradient. So each case runs several rounds on one
tape with different seeds and checks the gradients against float64 central
differences (and a closed form) on every backend, with the threshold lowered so
that small arrays are deferred too; and it checks where the zero was skipped and
where it must have been written (a grid or a loop shorter than the array, a dirty
sibling gradient, a reference the user kept, a view, a raising backward).
"""
import numpy as np
import pytest
from tests.conftest import central_fd

import adjoint as ad
from adjoint.build.pipeline import transform
from adjoint.runtime import owed
from adjoint.runtime.array import Array

KERNELS = '''
@ad.kernel
def dense(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
          b: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    s = b[i]
    for k in range(n):
        s += W[i, k] * x[k]
    y[i] = ad.tanh(s)


@ad.kernel
def dense_saved(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
                b: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    s = b[i]
    for k in range(n):
        s += W[i, k] * x[k]
    y[i] = ad.tanh(s) * s


@ad.kernel
def grid2(W: ad.array(dtype=float, ndim=2), y: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    y[i, j] = ad.sin(W[i, j])


@ad.kernel
def guarded(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
            y: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        if x[k] > 0.0:
            s += W[i, k] * x[k]
    y[i] = s


@ad.kernel
def offset(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
           y: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(1, n):
        s += W[i, k] * x[k]
    y[i] = s


@ad.kernel
def twice(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
          y: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        s += W[i, k] * x[k] + W[i, 0]
    y[i] = s


@ad.kernel
def ring(a: float, u: ad.array(dtype=float, ndim=2), v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    n1 = u.shape[1]
    ip = i + 1
    if ip == n0:
        ip = 0
    im = i - 1
    if im < 0:
        im = n0 - 1
    jp = j + 1
    if jp == n1:
        jp = 0
    jm = j - 1
    if jm < 0:
        jm = n1 - 1
    c = u[i, j]
    v[i, j] = c + a * (u[ip, j] * c + u[im, j] + u[i, jp] + u[i, jm] - 4.0 * c)
'''


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(KERNELS)


@pytest.fixture
def small(monkeypatch):
    """Defer the zeros of small arrays too (the tests' arrays are small)."""
    monkeypatch.setattr(owed, "DEFER_BYTES", 0)


def test_which_adjoints_are_covered(kernels):
    """The dense layer's W (grid x loop) and b (grid) are covered, with the loop's
    extent the parameter ``n``; a store under an ``if``, a loop from 1, a second
    addition into W proves nothing."""
    def covered(name):
        return dict(transform(getattr(kernels, name).pyfunc, "kernel").covered)
    assert covered("dense") == {"W": (("dim", 0), ("param", "n")), "b": (("dim", 0),)}
    assert covered("dense_saved") == {"W": (("dim", 0), ("param", "n")), "b": (("dim", 0),)}
    assert covered("grid2") == {"W": (("dim", 0), ("dim", 1))}
    assert covered("guarded") == {}
    assert covered("offset") == {}
    assert covered("twice") == {}
    assert kernels.dense.spec.covered_arrays == (("W", (("dim", 0), ("param", "n"))),
                                                 ("b", (("dim", 0),)))


def test_covers():
    assert owed.covers((("dim", 0), ("param", "n")), (4, 5), (4,), {"n": 5})
    assert not owed.covers((("dim", 0), ("param", "n")), (4, 5), (4,), {"n": 4})
    assert not owed.covers((("dim", 0), ("param", "n")), (4, 5), (3,), {"n": 5})
    assert not owed.covers((("dim", 0),), (4, 5), (4,), {})
    assert owed.covers((("const", 3), ("dim", 0)), (3, 7), (7,), {})


M, N = 6, 5
RNG = np.random.default_rng(5)
W0 = RNG.standard_normal((M, N)) * 0.5
X0 = RNG.standard_normal(N)
B0 = RNG.standard_normal(M) * 0.1


def _dense_ref(W, x, b, n, rows, saved):
    s = b[:rows] + W[:rows, :n] @ x[:n]
    return np.tanh(s) * s if saved else np.tanh(s)


class Settles:
    """Counts the deferred zeros written (``Array._settle``)."""

    def __init__(self, monkeypatch):
        self.shapes = []
        orig = Array._settle

        def settle(arr):
            self.shapes.append(arr.shape)
            orig(arr)
        monkeypatch.setattr(Array, "_settle", settle)


@pytest.mark.parametrize("kname", ["dense", "dense_saved"])
@pytest.mark.parametrize("n, rows, skipped", [(N, M, True), (N - 2, M, False), (N, M - 2, False)])
def test_rounds_on_one_tape(backend, kernels, small, monkeypatch, kname, n, rows, skipped):
    """Three rounds (backward, zero) on one tape: W's zero is never written when the
    grid and the loop cover it; with a loop or a grid shorter than W it is written
    before the backward adds into it. Gradients against central differences."""
    settles = Settles(monkeypatch)
    saved = kname == "dense_saved"
    W = ad.array(W0, requires_grad=True)
    x = ad.array(X0, requires_grad=True)
    b = ad.array(B0, requires_grad=True)
    y = ad.zeros(rows, requires_grad=True)
    for a in (W, x, b):
        a.grad.fill_(9.0)                       # what an owed zero must never show
        a.grad.zero_()
    tape = ad.Tape()
    with tape:
        ad.launch(getattr(kernels, kname), dim=rows, inputs=[n, W, x, b], outputs=[y])
    for r in range(3):
        seed = RNG.standard_normal(rows)
        tape.backward(grads={y: seed})
        gW = central_fd(lambda v: float(seed @ _dense_ref(v, X0, B0, n, rows, saved)), W0)
        gx = central_fd(lambda v: float(seed @ _dense_ref(W0, v, B0, n, rows, saved)), X0)
        gb = central_fd(lambda v: float(seed @ _dense_ref(W0, X0, v, n, rows, saved)), B0)
        np.testing.assert_allclose(W.grad.numpy(), gW, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(b.grad.numpy(), gb, rtol=1e-6, atol=1e-8)
        tape.zero()
    on_cpu = backend != "cuda"
    assert W.grad._owed == on_cpu               # the last zero is still owed
    if on_cpu and skipped:
        # rounds 2 and 3 stored all of W and b (x's gradient, added into, was written)
        assert (M, N) not in settles.shapes and (M,) not in settles.shapes
        assert (N,) in settles.shapes
    elif on_cpu:
        assert (M, N) in settles.shapes         # written before the backward added
    np.testing.assert_array_equal(W.grad.numpy(), 0.0)
    assert not W.grad._owed


def test_the_zero_is_deferred_and_written_when_looked_at(small):
    a = ad.array(np.arange(12.0).reshape(3, 4), requires_grad=True)
    a.grad.fill_(7.0)
    a.grad.zero_()
    assert a.grad._owed
    assert a.grad._buf[0, 0] == 7.0             # nothing written yet
    assert a.grad.shape == (3, 4) and a.grad.size == 12 and a.grad.ndim == 2
    assert a.grad._owed                         # the shape does not look at the memory
    np.testing.assert_array_equal(a.grad.numpy(), 0.0)
    assert not a.grad._owed


@pytest.mark.parametrize("hold", ["numpy", "view", "shared", "data"])
def test_a_buffer_someone_holds_is_zeroed_at_once(small, hold):
    """A numpy array the user kept, a view of it, another Array on it: ``zero_()``
    writes at once, so what they hold reads zeros."""
    a = ad.array(np.ones((3, 4)), requires_grad=True)
    a.grad.fill_(2.0)
    held = {"numpy": lambda: a.grad.numpy(), "view": lambda: a.grad.numpy()[1:],
            "shared": lambda: ad.array(a.grad.numpy(), copy=False),
            "data": lambda: a.grad.data}[hold]()
    a.grad.zero_()
    assert not a.grad._owed
    np.testing.assert_array_equal(np.asarray(held), 0.0)


def test_large_arrays_only_and_cpu_only():
    """With the default threshold a small gradient is zeroed at once; a large one is
    deferred."""
    a = ad.array(np.ones(10), requires_grad=True)
    a.grad.fill_(1.0)
    a.grad.zero_()
    assert not a.grad._owed and a.grad._buf[0] == 0.0
    big = ad.array(np.ones(owed.DEFER_BYTES // 8), requires_grad=True)
    big.grad.fill_(1.0)
    big.grad.zero_()
    assert big.grad._owed
    np.testing.assert_array_equal(big.grad.numpy(), 0.0)


def test_a_dirty_sibling_gradient_writes_the_zero(kernels, small, monkeypatch):
    """The storing backward runs only when b's gradient is clean too: with b's handed
    out (dirty), the adding backward runs and W's owed zero must be written first."""
    settles = Settles(monkeypatch)
    W = ad.array(W0, requires_grad=True)
    x = ad.array(X0, requires_grad=True)
    b = ad.array(B0, requires_grad=True)
    y = ad.zeros(M, requires_grad=True)
    W.grad.fill_(3.0)
    W.grad.zero_()
    held = b.grad.numpy()                      # b's gradient: no longer known clean
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.dense, dim=M, inputs=[N, W, x, b], outputs=[y])
    seed = RNG.standard_normal(M)
    tape.backward(grads={y: seed})
    assert settles.shapes == [(M, N)]
    gW = central_fd(lambda v: float(seed @ _dense_ref(v, X0, B0, N, M, False)), W0)
    np.testing.assert_allclose(W.grad.numpy(), gW, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(held, b.grad.numpy())


def test_a_raising_backward_leaves_zeros(small):
    """``owed.stored``: a backward that raises leaves the gradients it was to write
    zero, never an earlier round's values."""
    a = ad.array(np.ones((3, 4)), requires_grad=True)
    a.grad.fill_(5.0)
    a.grad.zero_()
    with pytest.raises(RuntimeError):
        with owed.stored((a.grad,)):
            a.grad._buf[0, 0] = 1.0
            raise RuntimeError("the backward failed")
    assert not a.grad._owed
    np.testing.assert_array_equal(a.grad.numpy(), 0.0)


def test_a_grid_covering_2d_array(backend, kernels, small, monkeypatch):
    """A 2-D grid storing every element: deferred zeros skipped; one row short: written."""
    settles = Settles(monkeypatch)
    for rows, skipped in ((M, True), (M - 1, False)):
        W = ad.array(W0, requires_grad=True)
        y = ad.zeros((rows, N), requires_grad=True)
        W.grad.fill_(9.0)
        W.grad.zero_()
        tape = ad.Tape()
        with tape:
            ad.launch(kernels.grid2, dim=(rows, N), inputs=[W], outputs=[y])
        for r in range(2):
            seed = RNG.standard_normal((rows, N))
            tape.backward(grads={y: seed})
            want = np.zeros((M, N))
            want[:rows] = np.cos(W0[:rows]) * seed
            np.testing.assert_allclose(W.grad.numpy(), want, rtol=1e-12)
            tape.zero()
        if backend != "cuda":
            assert ((M, N) in settles.shapes) != skipped
        settles.shapes.clear()


def test_pickle_and_deepcopy(backend, small):
    """An array pickles and deep-copies by value on every device (a CUDA array as a host
    copy, uploaded again), its gradient too, its owed zero written; the copy is
    independent of the original."""
    import copy
    import pickle
    a = ad.array(np.arange(6.0).reshape(2, 3), requires_grad=True)
    a.grad.fill_(2.0)
    big = ad.array(np.ones((2, 3)), requires_grad=True)
    big.grad.fill_(4.0)
    big.grad.zero_()                                # owed on the CPU
    for clone in (copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))):
        b, c = clone(a), clone(big)
        assert b.device == a.device and c.device == big.device
        np.testing.assert_array_equal(b.numpy(), np.arange(6.0).reshape(2, 3))
        np.testing.assert_array_equal(b.grad.numpy(), 2.0)
        np.testing.assert_array_equal(c.grad.numpy(), 0.0)
        b.grad.fill_(7.0)
        np.testing.assert_array_equal(a.grad.numpy(), 2.0)


# -- a periodic stencil's chain: the gathered backward stores, and owes its last pass ----
STEPS, A = 4, 0.1


def _ring64(u):
    c = u
    return c + A * (np.roll(u, -1, 0) * c + np.roll(u, 1, 0) + np.roll(u, -1, 1)
                    + np.roll(u, 1, 1) - 4.0 * c)


def _chain64(u0):
    for _ in range(STEPS):
        u0 = _ring64(u0)
    return u0


@pytest.mark.parametrize("shape", [(6, 5), (2, 5)])
def test_a_stencil_chain_owes_its_cleared_gradients(backend, kernels, small, shape):
    """Four periodic steps on one tape, three rounds with new seeds: each step's backward
    stores its gathered sum into the clean (owed) gradient of its input and leaves the
    clearing of its output's gradient owed (no last pass); gradients against central
    differences. On a 2-row ring the gathered grid is not taken: the plan's grid, which
    adds, gets the owed zeros written first. A gradient the caller holds is cleared by
    the last pass as before."""
    rng = np.random.default_rng(2)
    u0 = rng.uniform(0.5, 1.5, shape)
    us = [ad.array(u0, requires_grad=True)] + [ad.zeros(shape, requires_grad=True)
                                               for _ in range(STEPS)]
    for u in us:
        u.grad.fill_(9.0)                   # what an owed zero must never show
        u.grad.zero_()
    tape = ad.Tape()
    with tape:
        for k in range(STEPS):
            ad.launch(kernels.ring, dim=shape, inputs=[A, us[k]], outputs=[us[k + 1]])
    held = us[2].grad.numpy()               # the caller holds this one's memory
    for r in range(3):
        seed = rng.standard_normal(shape)
        tape.backward(grads={us[-1]: seed})
        g = central_fd(lambda v: float(np.sum(seed * _chain64(v))), u0)
        np.testing.assert_allclose(us[0].grad.numpy(), g, rtol=1e-6, atol=1e-8)
        if backend != "cuda":
            np.testing.assert_array_equal(held, 0.0)        # cleared in place
            # the steps' outputs: cleared by owing, but the held one by the last pass
            assert [u.grad._owed for u in us[1:]] == [True, False, True, True]
        for u in us[1:]:
            np.testing.assert_array_equal(u.grad.numpy(), 0.0)
        tape.zero()
