"""Clean gradients are stored into, never silently overwritten (optimize/once.py).

A backward that adds into each element of an adjoint array at most once per launch
has a ``_clean`` variant that stores instead; the runtime runs it only when every
such gradient buffer holds zeros that nothing wrote since (runtime/watch.py). Each
test below is a way a buffer stops being clean -- a second launch into the same
gradient, a second backward, a seed, a user's write, two arrays sharing a gradient,
memory shared with the caller -- and checks the gradient against float64 central
differences on every backend, and which backward ran (a spy on ``verify.run``): a
mechanism that stored where it must add would drop a term here.
"""
import numpy as np
import pytest
from tests.conftest import central_fd

import adjoint as ad
from adjoint.runtime import verify, watch

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
def twice(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
          b: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    s = b[i]
    for k in range(n):
        s += W[i, k] * x[k] + W[i, k]
    y[i] = s


@ad.kernel
def columns(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
            b: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    s = b[i]
    for k in range(1, n, 2):
        s += W[k, i] * x[k]
    y[i] = s * s


@ad.kernel
def repeat(n: int, W: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
           b: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    s = b[i]
    for r in range(2):
        for k in range(n):
            s += W[i, k] * x[k]
    y[i] = s


@ad.kernel
def gather(idx: ad.array(dtype=int), x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[idx[i]] * 2.0


@ad.kernel
def rows(u: ad.array(dtype=float, ndim=2), y: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    y[i, j] = u[i, 0] * u[i, j]
'''


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(KERNELS)


@pytest.fixture
def parts(monkeypatch):
    """The parts (``backward``, ``backward_saved_clean``, ...) run, in order."""
    ran = []
    real = verify.run

    def spy(spec, part, *args, **kwargs):
        ran.append(part)
        return real(spec, part, *args, **kwargs)
    monkeypatch.setattr(verify, "run", spy)
    return ran


def test_which_arrays_are_stored_into(kernels):
    """Proven: one addition per element (thread index, and every loop's variable, in the
    index). Not: two additions, a loop missing from the index, a gathered index, a 2-D
    launch indexed by one thread index."""
    assert kernels.dense.spec.clean_arrays == ("W", "b")
    assert kernels.twice.spec.clean_arrays == ("b",)
    assert kernels.columns.spec.clean_arrays == ("W", "b")
    assert kernels.repeat.spec.clean_arrays == ("b",)
    assert kernels.gather.spec.clean_arrays == ()
    assert kernels.rows.spec.clean_arrays == ()


# -- the dense layer against central differences ---------------------------------------
N = 6
RNG = np.random.default_rng(3)
W0 = RNG.standard_normal((N, N)) / 2
X0 = RNG.standard_normal(N)
X0[2] = 0.0                                 # adj_W[:, 2] is -0.0 where the seed is negative
B0 = RNG.standard_normal(N) / 4
SEED = RNG.standard_normal(N)


def _fd(x0, seed=SEED):
    """d/dW and d/db of sum(seed * tanh(W x0 + b)) at (W0, B0), by central differences."""
    gW = central_fd(lambda W: float(seed @ np.tanh(W @ x0 + B0)), W0)
    gb = central_fd(lambda b: float(seed @ np.tanh(W0 @ x0 + b)), B0)
    return gW, gb


def _layer(kernels, tape, W, b, x, seed=SEED):
    y = ad.zeros(N, requires_grad=True)
    with tape:
        ad.launch(kernels.dense, dim=N, inputs=[N, W, ad.array(x), b], outputs=[y])
    return y, seed


def _params():
    return ad.array(W0, requires_grad=True), ad.array(B0, requires_grad=True)


def _check(W, b, gW, gb):
    np.testing.assert_allclose(W.grad.numpy(), gW, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(b.grad.numpy(), gb, rtol=1e-6, atol=1e-8)


def test_fresh_gradients_are_stored_into(backend, kernels, parts):
    W, b = _params()
    tape = ad.Tape()
    y, seed = _layer(kernels, tape, W, b, X0)
    tape.backward(grads={y: seed})
    assert parts[-1] == "backward_saved_clean"
    _check(W, b, *_fd(X0))


def test_the_stored_gradient_has_the_added_ones_bits(backend, kernels):
    """``0.0 + v``: a -0.0 adjoint lands as +0.0, as the addition into a zero gives."""
    got = []
    for dirty in (False, True):
        W, b = _params()
        if dirty:
            W.grad.numpy()              # handed out: adjoint no longer knows it is zero
            b.grad.numpy()
        tape = ad.Tape()
        y, seed = _layer(kernels, tape, W, b, X0, -np.abs(SEED))
        tape.backward(grads={y: seed})
        got.append(W.grad.numpy().copy())
    np.testing.assert_array_equal(got[0], got[1])
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(got[1]))
    assert not np.signbit(got[0][:, 2]).any()


def test_two_launches_into_one_gradient(backend, kernels, parts):
    W, b = _params()
    x1 = RNG.standard_normal(N)
    tape = ad.Tape()
    y0, s0 = _layer(kernels, tape, W, b, X0)
    y1, s1 = _layer(kernels, tape, W, b, x1, SEED[::-1].copy())
    tape.backward(grads={y0: s0, y1: s1})
    assert parts[-2:] == ["backward_saved_clean", "backward_saved"]
    g0, g1 = _fd(X0), _fd(x1, SEED[::-1].copy())
    _check(W, b, g0[0] + g1[0], g0[1] + g1[1])


def test_backward_twice_without_zero_adds(backend, kernels, parts):
    W, b = _params()
    tape = ad.Tape()
    y, seed = _layer(kernels, tape, W, b, X0)
    tape.backward(grads={y: seed})
    tape.backward(grads={y: seed})
    assert parts[-2:] == ["backward_saved_clean", "backward_saved"]
    gW, gb = _fd(X0)
    _check(W, b, 2 * gW, 2 * gb)


def test_zero_makes_it_clean_again_and_skips_a_clean_buffer(backend, kernels, parts):
    W, b = _params()
    tape = ad.Tape()
    y, seed = _layer(kernels, tape, W, b, X0)
    tape.backward(grads={y: seed})
    assert not watch.is_clean(W.grad._data)
    tape.zero()
    assert watch.is_clean(W.grad._data)
    tape.backward(grads={y: seed})
    assert parts[-1] == "backward_saved_clean"
    _check(W, b, *_fd(X0))


@pytest.mark.parametrize("how", ["assign", "fill", "numpy", "launch"])
def test_a_seeded_gradient_is_added_to(backend, kernels, parts, how):
    W, b = _params()
    G0 = np.full((N, N), 0.25)
    if how == "assign":
        W.grad.assign(G0)
    elif how == "fill":
        W.grad.fill_(0.25)
    elif how == "numpy":
        if backend == "cuda":
            pytest.skip("numpy() of a device array is a copy")
        W.grad.numpy()[...] = G0
    else:       # a forward launch writing the gradient as its output
        ad.launch(kernels.rows, dim=(N, N), inputs=[ad.array(np.full((N, N), 0.5))],
                  outputs=[W.grad])
    tape = ad.Tape()
    y, seed = _layer(kernels, tape, W, b, X0)
    tape.backward(grads={y: seed})
    assert parts[-1] == "backward_saved"
    gW, gb = _fd(X0)
    _check(W, b, gW + G0, gb)


def test_arrays_sharing_one_gradient(backend, kernels, parts):
    W, b = _params()
    W2 = ad.array(W0, requires_grad=True)
    W2.grad = W.grad
    x1 = RNG.standard_normal(N)
    tape = ad.Tape()
    y0, s0 = _layer(kernels, tape, W, b, X0)
    y1, s1 = _layer(kernels, tape, W2, b, x1)
    tape.backward(grads={y0: s0, y1: s1})
    assert parts[-2:] == ["backward_saved_clean", "backward_saved"]
    g0, g1 = _fd(X0), _fd(x1)
    _check(W, b, g0[0] + g1[0], g0[1] + g1[1])


def test_a_gradient_on_the_callers_memory_is_never_clean(kernels, parts):
    """``ad.array(g, copy=False)``: the caller writes ``g`` behind adjoint's back."""
    W, b = _params()
    g = np.zeros((N, N))
    W.grad = ad.array(g, copy=False)
    W.grad.zero_()
    g[...] = 0.5                            # unseen by adjoint
    tape = ad.Tape()
    y, seed = _layer(kernels, tape, W, b, X0)
    tape.backward(grads={y: seed})
    assert parts[-1] == "backward_saved"
    gW, gb = _fd(X0)
    _check(W, b, gW + 0.5, gb)


def test_an_adjoint_launch_adds_into_what_it_is_given(backend, kernels, parts):
    W, b = _params()
    x, y = ad.array(X0), ad.zeros(N)
    ad.launch(kernels.dense, dim=N, inputs=[N, W, x, b], outputs=[y])
    gW = ad.zeros((N, N))
    gb = ad.full(N, 1.0)
    seed = ad.array(SEED)
    ad.launch(kernels.dense, dim=N, inputs=[N, W, x, b], outputs=[y], adjoint=True,
              adj_inputs=[None, gW, None, gb], adj_outputs=[seed])
    assert parts[-1] == "backward"          # gb was not clean
    fW, fb = _fd(X0)
    np.testing.assert_allclose(gW.numpy(), fW, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb.numpy(), fb + 1.0, rtol=1e-6, atol=1e-8)
    gb2, seed = ad.zeros(N), ad.array(SEED)
    gW.zero_()
    ad.launch(kernels.dense, dim=N, inputs=[N, W, x, b], outputs=[y], adjoint=True,
              adj_inputs=[None, gW, None, gb2], adj_outputs=[seed])
    assert parts[-1] == "backward_clean"
    np.testing.assert_allclose(gW.numpy(), fW, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb2.numpy(), fb, rtol=1e-6, atol=1e-8)
