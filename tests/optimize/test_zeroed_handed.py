"""Handed adjoints and seeds read in place (optimize/zeroed.py ``handed``,
runtime/seeds.py, runtime/steps.py ``handing``).

A backward that reads each element of an output's adjoint at the thread's own index
before it clears it (``y[i] = f(x[i])``) *hands* the adjoint on. On the CPU its clears
run only if asked (``rt_clear``): when the gradient is the grid's shape and adjoint's
own memory, the runtime skips them and owes the whole zero instead, and a seed of
``tape.backward`` is read where it is rather than copied into the gradient. A wrong
proof or a seed read where it should have been copied gives a wrong gradient, a
written seed or a gradient left holding values: every case checks the gradients
against float64 central differences on every backend, the seed unchanged, and the
outputs' gradients zero.
"""
import numpy as np
import pytest
from tests.conftest import central_fd

import adjoint as ad
from adjoint.runtime import owed, seeds as seeds_mod

KERNELS = '''
@ad.kernel
def store(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = math.sin(x[i])


@ad.kernel
def twice(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i] * 2.0
    y[i] = math.sin(x[i])


@ad.kernel
def plus_atomic(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = math.sin(x[i])
    ad.atomic_add(y, i, x[i] * x[i])


@ad.kernel
def branches(x: ad.array(dtype=float), y: ad.array(dtype=float), w: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = math.sin(x[i])
    if x[i] > 0.0:
        w[i] = x[i] * y[i]
    else:
        w[i] = 2.0 * x[i]


@ad.kernel
def shift(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i + 1] = math.sin(x[i])


@ad.kernel
def square(y: ad.array(dtype=float), z: ad.array(dtype=float)):
    i = ad.tid()
    z[i] = y[i] * y[i] + 0.5 * y[i]


@ad.kernel
def both(x: ad.array(dtype=float), y: ad.array(dtype=float), w: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = math.sin(x[i])
    w[i] = x[i] * x[i]


@ad.kernel
def halves(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    if i % 2 == 0:
        y[i] = x[i] * x[i]
    else:
        y[i] = 2.0


@ad.kernel(enable_backward=False)
def forward_only(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i] * 2.0


@ad.kernel
def grid2(x: ad.array(dtype=float, ndim=2), y: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    y[i, j] = x[i, j] * x[i, j] * float(j + 1)
'''

N = 8
RNG = np.random.default_rng(5)
X0 = RNG.uniform(-1.0, 1.0, N)
SEED = RNG.standard_normal(N)


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(KERNELS)


@pytest.fixture(autouse=True)
def small_arrays_owe(request, monkeypatch):
    """The eight-element gradients here are handed as large ones are (below
    ``owed.DEFER_BYTES`` the kernel clears them: ``test_the_threshold_small_gradients_are_cleared``)."""
    if "threshold" not in request.node.name:
        monkeypatch.setattr(owed, "DEFER_BYTES", 0)


def test_which_adjoints_are_handed(kernels):
    """Handed: read at the thread's element, then cleared (an atomic into the element
    reads it first). Not: a second store, whose adjoint reads the element after the
    first clear; a store at ``i + 1`` (not even zeroed); in ``branches`` y is stored
    then loaded (its adjoint is added into: not zeroed)."""
    table = {"store": ("y",), "twice": (), "plus_atomic": ("y",), "branches": ("w",),
             "shift": (), "square": ("z",), "grid2": ("y",),
             "both": ("y", "w")}
    assert {k: getattr(kernels, k).spec.handed_arrays for k in table} == table
    assert kernels.twice.spec.zeroed_arrays == ("y",)


def _count_copies(monkeypatch):
    """A list that grows by one for each seed copied into a gradient."""
    copies = []
    write = seeds_mod._write

    def counted(arr, seed):
        copies.append(arr)
        write(arr, seed)
    monkeypatch.setattr(seeds_mod, "_write", counted)
    return copies


REFS = {"store": lambda x: np.sin(x), "twice": lambda x: np.sin(x),
        "plus_atomic": lambda x: np.sin(x) + x * x}


@pytest.mark.parametrize("name", ["store", "twice", "plus_atomic"])
def test_a_seed_is_read_in_place(backend, kernels, monkeypatch, name):
    """One launch seeded with a host array: on the CPU the backward reads it where it is
    (no copy), never writes it, and leaves y's gradient zero -- also for ``twice``, which
    must clear (it is not handed: the seed is copied)."""
    copies = _count_copies(monkeypatch)
    x = ad.array(X0, requires_grad=True)
    y = ad.zeros(N, requires_grad=True)
    seed = SEED.copy()
    tape = ad.Tape()
    with tape:
        ad.launch(getattr(kernels, name), dim=N, inputs=[x], outputs=[y])
    for _ in range(2):          # twice on one tape: the owed zero of round one is no seed
        tape.backward(grads={y: seed})
        gx = central_fd(lambda v: float(SEED @ REFS[name](v)), X0)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
        np.testing.assert_array_equal(seed, SEED)
        np.testing.assert_array_equal(y.grad.numpy(), 0.0)
        tape.zero()
    in_place = backend != "cuda" and name != "twice"
    assert len(copies) == (0 if in_place else 2)


def _chain(kernels, x, y, z):
    ad.launch(kernels.store, dim=N, inputs=[x], outputs=[y])
    ad.launch(kernels.square, dim=N, inputs=[y], outputs=[z])


def _sq(v):
    return v * v + 0.5 * v


def test_a_pending_seed_is_written_before_a_step_adds_into_it(backend, kernels, monkeypatch):
    """x -> store -> y -> square -> z, seeding both y and z: square's backward adds into
    y's gradient, so y's seed is copied in first; z's is read in place."""
    copies = _count_copies(monkeypatch)
    sy, sz = RNG.standard_normal(N), RNG.standard_normal(N)
    x = ad.array(X0, requires_grad=True)
    y, z = ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        _chain(kernels, x, y, z)
    tape.backward(grads={y: sy, z: sz})
    gx = central_fd(lambda v: float(sy @ np.sin(v) + sz @ _sq(np.sin(v))), X0)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
    for a in (y, z):
        np.testing.assert_array_equal(a.grad.numpy(), 0.0)
    assert [a is y for a in copies] == ([True] if backend != "cuda" else [True, False])


@pytest.mark.parametrize("kind", ["strided", "float32", "read-only", "list", "scalar",
                                  "ad.Array", "x.grad", "z.grad"])
def test_a_seed_that_cannot_wait_is_copied(backend, kernels, kind):
    """Seeds read in place only when they are host arrays of the gradient's shape, dtype
    and layout, writable, and no gradient of the tape's arrays: any other is copied as
    it is given, and gives the same gradients."""
    x = ad.array(X0, requires_grad=True)
    y, z = ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        _chain(kernels, x, y, z)
    values = SEED.copy()
    before = np.zeros(N)            # what x.grad holds before the backward
    if kind == "strided":
        seed = np.repeat(SEED, 2)[::2]
    elif kind == "float32":
        seed = SEED.astype(np.float32)
        values = seed.astype(np.float64)
    elif kind == "read-only":
        seed = SEED.copy()
        seed.flags.writeable = False
    elif kind == "list":
        seed = SEED.tolist()
    elif kind == "scalar":
        seed, values = 0.75, np.full(N, 0.75)
    elif kind == "ad.Array":
        seed = ad.array(SEED)
    elif kind == "x.grad":          # the seed is memory the backward adds into
        x.grad.assign(SEED)
        seed, before = x.grad.numpy(), SEED.copy()     # (on cuda: a host copy)
    else:                           # z.grad: the seed is z's own gradient
        z.grad.assign(SEED)
        seed = z.grad.numpy()
    tape.backward(grads={z: seed})
    gx = central_fd(lambda v: float(values @ _sq(np.sin(v))), X0)
    np.testing.assert_allclose(x.grad.numpy(), before + gx, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(z.grad.numpy(), 0.0)
    if kind not in ("x.grad", "z.grad", "list", "scalar"):
        np.testing.assert_array_equal(np.asarray(seed.numpy() if kind == "ad.Array" else seed,
                                                 np.float64), values)


def test_seeds_no_step_reads_and_record_func(backend, kernels):
    """A seed of an array no step touched ends in its gradient; a ``record_func`` step
    (which may read any gradient) sees every seed written."""
    x = ad.array(X0, requires_grad=True)
    y, z = ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True)
    w = ad.zeros(N, requires_grad=True)
    seen = []
    tape = ad.Tape()
    with tape:
        _chain(kernels, x, y, z)
        tape.record_func(lambda: seen.append(z.grad.numpy().copy()), [z])
    sw = RNG.standard_normal(N)
    tape.backward(grads={z: SEED, w: sw})
    np.testing.assert_array_equal(seen[0], SEED)
    np.testing.assert_array_equal(w.grad.numpy(), sw)
    gx = central_fd(lambda v: float(SEED @ _sq(np.sin(v))), X0)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)


def test_a_grid_smaller_than_the_array_clears_its_part(backend, kernels, monkeypatch):
    """A launch over the first N - 2 elements: its threads clear only those, so the
    seed is copied and the last two elements keep it."""
    copies = _count_copies(monkeypatch)
    x = ad.array(X0, requires_grad=True)
    y = ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.store, dim=N - 2, inputs=[x], outputs=[y])
    tape.backward(grads={y: SEED})
    gx = central_fd(lambda v: float(SEED[:-2] @ np.sin(v[:-2])), X0)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(y.grad.numpy(), np.concatenate([np.zeros(N - 2), SEED[-2:]]))
    assert len(copies) == 1


def test_a_2d_output_and_one_seed_for_two_outputs(backend, kernels, monkeypatch):
    """A 2-D grid's output seeded in place; one host array seeding both outputs of a
    launch."""
    copies = _count_copies(monkeypatch)
    x0 = RNG.uniform(-1.0, 1.0, (3, 4))
    s2 = RNG.standard_normal((3, 4))
    x = ad.array(x0, requires_grad=True)
    y = ad.zeros((3, 4), requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.grid2, dim=(3, 4), inputs=[x], outputs=[y])
    tape.backward(grads={y: s2})
    gx = central_fd(lambda v: float(np.sum(s2 * v * v * np.arange(1, 5))), x0)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)

    a = ad.array(X0, requires_grad=True)
    y, w = ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True)
    seed = SEED.copy()
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.both, dim=N, inputs=[a], outputs=[y, w])
    tape.backward(grads={y: seed, w: seed})
    np.testing.assert_allclose(a.grad.numpy(), SEED * (np.cos(X0) + 2 * X0), rtol=1e-12)
    np.testing.assert_array_equal(seed, SEED)
    for g in (y.grad, w.grad):
        np.testing.assert_array_equal(g.numpy(), 0.0)
    # (the second is copied: two adjoint buffers of one launch never share memory)
    assert len(copies) == (1 if backend != "cuda" else 3)


def test_the_threshold_small_gradients_are_cleared(backend, kernels, monkeypatch):
    """Below ``owed.DEFER_BYTES`` (64 KB) a handed gradient is cleared by the kernel (a
    ``zero_()`` would cost more) and its seed copied; above, the seed is read in place.
    The big case against the analytic derivative (no central differences of 8k inputs)."""
    copies = _count_copies(monkeypatch)
    for n in (N, owed.DEFER_BYTES // 8 + 1):
        x0 = np.linspace(-1.0, 1.0, n)
        seed = np.cos(np.arange(n) * 0.37)
        x = ad.array(x0, requires_grad=True)
        y = ad.zeros(n, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(kernels.store, dim=n, inputs=[x], outputs=[y])
        tape.backward(grads={y: seed})
        np.testing.assert_allclose(x.grad.numpy(), seed * np.cos(x0), rtol=1e-13, atol=1e-15)
        np.testing.assert_array_equal(y.grad.numpy(), 0.0)
    assert len(copies) == (1 if backend != "cuda" else 2)


def test_a_backward_that_raises_leaves_the_seeds_written(backend, kernels):
    """A step raising in the backward (a launch of a kernel compiled without one) leaves
    every seed that no step read in its gradient, as a copy made before the backward
    would have."""
    x = ad.array(X0, requires_grad=True)
    y, z = ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True)
    w = ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.store, dim=N, inputs=[x], outputs=[y])
        ad.launch(kernels.forward_only, dim=N, inputs=[x], outputs=[w])
        ad.launch(kernels.square, dim=N, inputs=[x], outputs=[z])
    sy = RNG.standard_normal(N)
    with pytest.raises(ad.TapeError, match="enable_backward=False"):
        tape.backward(grads={y: sy, z: SEED})
    np.testing.assert_array_equal(y.grad.numpy(), sy)          # no step read it
    np.testing.assert_array_equal(z.grad.numpy(), 0.0)         # square read it in place
    np.testing.assert_allclose(x.grad.numpy(), SEED * (2 * X0 + 0.5), rtol=1e-12)


def test_verify_fp_checks_gradients_not_a_seed_read_in_place(backend, kernels, monkeypatch):
    """With ``verify_fp``, a handed output's seed read in place is not checked as a
    gradient (it is the caller's array, where the clears would have left zeros): an inf
    in it raises only where it reaches a gradient, named there. ``halves`` stores a
    constant at odd elements, whose seed reaches no gradient."""
    monkeypatch.setattr(ad.config, "verify_fp", True)
    x = ad.array(X0, requires_grad=True)
    y = ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.halves, dim=N, inputs=[x], outputs=[y])
    seed = SEED.copy()
    seed[3] = np.inf                # odd: reaches no gradient
    tape.backward(grads={y: seed})
    even = np.arange(N) % 2 == 0
    np.testing.assert_allclose(x.grad.numpy(), np.where(even, SEED * 2 * X0, 0.0), rtol=1e-12)
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)
    tape.zero()
    seed[2] = np.inf                # even: reaches x's gradient
    with pytest.raises(ad.NonFiniteError, match=r"adj_x\[2\] = (-)?inf"):
        tape.backward(grads={y: seed})
