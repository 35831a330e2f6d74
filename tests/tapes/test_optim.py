"""``ad.optim.SGD`` and ``ad.optim.Adam`` against their updates written in numpy."""
import numpy as np
import pytest

import adjoint as ad


def _param(values):
    p = ad.array(np.array(values, dtype=np.float64), requires_grad=True)
    return p


GRADS = [np.array([[0.5, -1.0], [2.0, 0.0]]), np.array([[-0.25, 3.0], [1.0, -2.0]]),
         np.array([[0.0, 0.5], [-1.5, 4.0]])]


def _set_grad(p, g):
    p.grad.assign(g)


def test_sgd_reads_grad(backend):
    p = _param([[1.0, 2.0], [3.0, 4.0]])
    opt = ad.optim.SGD([p], lr=0.1)
    expected = p.numpy().copy()
    for g in GRADS:
        _set_grad(p, g)
        opt.step()
        expected = expected - 0.1 * g
        np.testing.assert_allclose(p.numpy(), expected, rtol=1e-15, atol=0)


def test_sgd_momentum_with_explicit_grads(backend):
    p, q = _param([1.0, -2.0, 0.5]), _param([4.0])
    opt = ad.optim.SGD([p, q], lr=0.05, momentum=0.9)
    ep, buf = p.numpy().copy(), np.zeros(3)
    for g in ([1.0, 2.0, -3.0], [0.5, 0.0, 1.0], [-1.0, 1.0, 1.0]):
        opt.step([ad.array(g), None])        # q is left alone
        buf = 0.9 * buf + np.array(g)
        ep = ep - 0.05 * buf
        np.testing.assert_allclose(p.numpy(), ep, rtol=1e-15, atol=1e-15)
    np.testing.assert_array_equal(q.numpy(), [4.0])


def test_adam_matches_the_update_by_hand(backend):
    p = _param([[1.0, 2.0], [3.0, 4.0]])
    opt = ad.optim.Adam([p], lr=0.01, betas=(0.8, 0.99), eps=1e-6)
    x, m, v = p.numpy().copy(), np.zeros((2, 2)), np.zeros((2, 2))
    for t, g in enumerate(GRADS, start=1):
        m = 0.8 * m + 0.2 * g
        v = 0.99 * v + 0.01 * g * g
        x = x - 0.01 * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.99 ** t)) + 1e-6)
        if t == 2:
            opt.step([ad.array(g)])          # explicit gradients
        else:
            _set_grad(p, g)
            opt.step()
        np.testing.assert_allclose(p.numpy(), x, rtol=1e-14, atol=1e-15)


def test_adam_float32_parameter(backend):
    p = ad.array(np.array([1.0, -1.0], dtype=np.float32), requires_grad=True)
    opt = ad.optim.Adam([p], lr=0.1)
    p.grad.assign(np.array([2.0, -0.5], dtype=np.float32))
    opt.step()
    # first step of Adam moves each entry by lr * sign(g) (up to eps)
    np.testing.assert_allclose(p.numpy(), [0.9, -0.9], rtol=1e-6)


def test_bad_gradients_are_refused():
    p = _param([1.0, 2.0])
    opt = ad.optim.Adam([p])
    with pytest.raises(ad.AdjointError, match="gradient of parameter 0"):
        opt.step([ad.zeros(3)])
    with pytest.raises(ad.AdjointError, match="2 gradients for 1 parameters"):
        opt.step([None, None])
    with pytest.raises(ad.AdjointError, match="parameter 0 must be a float"):
        ad.optim.SGD([np.zeros(2)])
