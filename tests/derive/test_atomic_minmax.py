"""``ad.atomic_min`` / ``ad.atomic_max`` in kernels, on every backend.

Threads scatter values into bins (colliding indices): the forward keeps each bin's
smallest (largest) value; the gradient of a bin goes to the thread whose value
survived, and the bin's earlier value keeps it only where no thread replaced it.
Checked against central differences of the whole launch (values drawn so that no
two are equal: at a tie the function has no derivative, and which tied value gets
the gradient is not specified). Forward mode is checked by test_jvp's ``jvp_check``
(tangents against central differences, and the dot-product test against reverse
mode); the CUDA JVP of colliding updates is refused with its reason, that of an
update at the thread's own index runs.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import LaunchError, TransformError
from tests.conftest import central_fd
from tests.derive.test_jvp import jvp_check

SRC = '''
@ad.kernel
def bins(x: ad.array(dtype=float), b: ad.array(dtype=int), lo: ad.array(dtype=float),
         hi: ad.array(dtype=float, ndim=2)):
    i = ad.tid()
    v = x[i] * x[i] + math.sin(x[i])
    ad.atomic_min(lo, b[i], v)
    for k in range(2):                        # twice per thread, into two columns
        ad.atomic_max(hi, b[i], k, (k + 1.0) * v)


@ad.kernel
def own(x: ad.array(dtype=float), lo: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_min(lo, i, 3.0 * x[i])
    ad.atomic_min(lo, i, x[i] * x[i])
'''

X = np.array([0.3, -1.2, 0.75, 1.9, -0.4, 2.2, -2.6, 1.1, 0.05])
B = np.array([0, 1, 0, 2, 1, 2, 0, 3, 3])
LO0 = np.array([0.5, 9.0, 9.0, 9.0, 0.2])      # bin 4: no thread (keeps 0.2)
HI0 = np.array([[-9.0, -9.0], [-9.0, -9.0], [-9.0, -9.0], [-9.0, 8.0], [1.0, 1.0]])  # 8.0 kept


def _run(m, x, lo0, hi0, tape=None):
    xs = ad.array(x, requires_grad=True)
    lo = ad.array(lo0, requires_grad=True)
    hi = ad.array(hi0, requires_grad=True)
    if tape is None:
        ad.launch(m.bins, len(x), inputs=[xs, ad.array(B)], outputs=[lo, hi])
    else:
        with tape:
            ad.launch(m.bins, len(x), inputs=[xs, ad.array(B)], outputs=[lo, hi])
    return xs, lo, hi


def test_atomic_minmax_forward_and_gradient(backend, kernel_module):
    m = kernel_module(SRC)
    v = X * X + np.sin(X)
    _, lo, hi = _run(m, X, LO0, HI0)
    want_lo, want_hi = LO0.copy(), HI0.copy()
    for k in range(len(X)):
        want_lo[B[k]] = min(want_lo[B[k]], v[k])
        want_hi[B[k], 0] = max(want_hi[B[k], 0], v[k])
        want_hi[B[k], 1] = max(want_hi[B[k], 1], 2.0 * v[k])
    # (to rounding: numba's sin is glibc's vector one, within a few ulp of NumPy's)
    np.testing.assert_allclose(lo.numpy(), want_lo, rtol=1e-15)
    np.testing.assert_allclose(hi.numpy(), want_hi, rtol=1e-15)
    assert hi.numpy()[3, 1] == 8.0 and lo.numpy()[4] == 0.2      # kept earlier values

    rng = np.random.default_rng(1)
    w_lo, w_hi = rng.uniform(0.5, 1.5, LO0.shape), rng.uniform(0.5, 1.5, HI0.shape)

    def loss(x, lo0, hi0):
        _, lo, hi = _run(m, x, lo0, hi0)
        return float(np.sum(w_lo * lo.numpy()) + np.sum(w_hi * hi.numpy()))

    tape = ad.Tape()
    xs, lo, hi = _run(m, X, LO0, HI0, tape)
    tape.backward(grads={lo: w_lo, hi: w_hi})
    np.testing.assert_allclose(xs.grad.numpy(), central_fd(lambda x: loss(x, LO0, HI0), X),
                               rtol=1e-6, atol=1e-8)
    # the earlier values: a gradient only where no thread replaced them
    np.testing.assert_allclose(lo.grad.numpy(), central_fd(lambda a: loss(X, a, HI0), LO0),
                               atol=1e-8)
    np.testing.assert_allclose(hi.grad.numpy(), central_fd(lambda a: loss(X, LO0, a), HI0),
                               atol=1e-8)
    assert lo.grad.numpy()[4] == w_lo[4] and lo.grad.numpy()[1] == 0.0


def test_atomic_minmax_jvp(backend, kernel_module):
    m = kernel_module(SRC)
    if backend == "cuda":
        with pytest.raises(LaunchError, match="no CUDA JVP.*atomic_min/atomic_max"):
            jvp_check(m.bins, len(X), [X, B], [LO0, HI0])
    else:
        jvp_check(m.bins, len(X), [X, B], [LO0, HI0], reverse=True)
    # at the thread's own index there is no collision: a JVP on every backend
    jvp_check(m.own, 4, [np.array([0.5, 2.5, -1.0, 3.5])], [np.array([1.0, 9.0, 9.0, 2.0])],
              reverse=True)


def test_atomic_minmax_mixed_with_other_writes_is_refused(kernel_module):
    m = kernel_module('''
    @ad.kernel
    def mixed(x: ad.array(dtype=float), lo: ad.array(dtype=float)):
        i = ad.tid()
        ad.atomic_min(lo, 0, x[i])
        ad.atomic_add(lo, 0, x[i])
    ''')
    with pytest.raises(TransformError, match=r"'lo' is updated by ad.atomic_min \(line 9\) "
                                             r"and written another way.*line 10"):
        ad.launch(m.mixed, 2, inputs=[ad.zeros(2)], outputs=[ad.zeros(1)])
