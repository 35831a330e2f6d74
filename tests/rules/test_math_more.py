"""``math.asinh acosh atanh hypot fmod isnan isinf isfinite`` and ``len(a)`` in kernels.

The rule-table tests (test_rule_table.py, test_rules_jvp.py, test_rules.py) check each
rule at random points of its domain on every backend. Here, on every backend:

- one kernel using all of them: its value against NumPy (written independently), its
  gradient (tape) and its JVP against central differences;
- the derivatives the rules state by choice: ``hypot``'s 0 at the origin (as
  ``ad.length2``'s), ``fmod``'s ``dz/dy = -trunc(x / y)`` with the sign of ``x``;
- the values at the edges (Python's ``math`` raises there; a kernel follows C);
- ``len(a)`` is ``a.shape[0]``, and the messages for what is not supported.
"""
import math

import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import TransformError
from tests.conftest import central_fd

INF, NAN = math.inf, math.nan

ALL = '''
    @ad.kernel
    def k(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        a = x[i]
        b = y[i]
        s = math.asinh(3.0 * a) * b + math.acosh(2.0 + a * a) + math.atanh(0.5 * b)
        s += math.hypot(a, 2.0 * b) + math.fmod(5.0 * a, b + 1.5) * a
        if math.isnan(s) or math.isinf(s) or not math.isfinite(s):
            s = 0.0
        out[i] = s
'''

# fmod(5a, b + 1.5) is 1e-2 away from its jumps (test below)
X0 = np.array([-0.83, -0.31, 0.42, 0.77, 1.13])
Y0 = np.array([0.61, -0.47, 1.09, -0.88, 0.35])


def reference(a, b):
    """The kernel ``k`` above in NumPy."""
    return (np.arcsinh(3.0 * a) * b + np.arccosh(2.0 + a * a) + np.arctanh(0.5 * b)
            + np.hypot(a, 2.0 * b) + np.fmod(5.0 * a, b + 1.5) * a)


def test_reference_points_are_away_from_the_jumps():
    q = 5.0 * X0 / (Y0 + 1.5)
    assert np.min(np.abs(q - np.round(q))) > 1e-2


def _launch(m, x, y, dev, **kw):
    out = ad.zeros(len(X0), device=dev, requires_grad=True)
    return out, ad.launch(m.k, dim=len(X0), inputs=[x, y], outputs=[out], **kw)


def test_new_math_functions_match_numpy_and_differences(backend, kernel_module):
    m = kernel_module(ALL)
    dev = "cuda" if backend == "cuda" else "cpu"
    x = ad.array(X0, device=dev, requires_grad=True)
    y = ad.array(Y0, device=dev, requires_grad=True)
    seed = np.array([0.7, -1.3, 0.4, 1.1, -0.6])
    with ad.Tape() as tape:
        out, _ = _launch(m, x, y, dev)
    np.testing.assert_allclose(out.numpy(), reference(X0, Y0), rtol=1e-12, atol=1e-14)
    tape.backward(grads={out: seed})

    def loss(a, b):
        return float(seed @ reference(a, b))
    np.testing.assert_allclose(x.grad.numpy(), central_fd(lambda v: loss(v, Y0), X0),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(y.grad.numpy(), central_fd(lambda v: loss(X0, v), Y0),
                               rtol=1e-6, atol=1e-7)
    # the JVP along (dx, dy): the directional difference of the same reference
    dx, dy = np.array([0.3, -0.2, 0.5, 0.1, -0.4]), np.array([-0.6, 0.2, 0.3, -0.1, 0.8])
    _, dots = _launch(m, ad.array(X0, device=dev), ad.array(Y0, device=dev), dev,
                      tangents={"x": ad.array(dx, device=dev), "y": ad.array(dy, device=dev)})
    h = 1e-6
    want = (reference(X0 + h * dx, Y0 + h * dy) - reference(X0 - h * dx, Y0 - h * dy)) / (2 * h)
    np.testing.assert_allclose(dots["out"].numpy(), want, rtol=1e-6, atol=1e-7)


EDGES = '''
    @ad.kernel
    def k(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float, ndim=2)):
        i = ad.tid()
        a = x[i]
        b = y[i]
        out[0, i] = math.hypot(a, b)
        out[1, i] = math.fmod(a, b)
        out[2, i] = math.asinh(a)
        out[3, i] = math.acosh(a)
        out[4, i] = math.atanh(a)
        out[5, i] = float(math.isnan(a)) + 2.0 * float(math.isinf(a)) + 4.0 * float(math.isfinite(a))
'''


def test_edges_follow_c(backend, kernel_module):
    """Where Python's math raises, a kernel gives C's answer (and never raises)."""
    m = kernel_module(EDGES)
    dev = "cuda" if backend == "cuda" else "cpu"
    a = np.array([0.0, -7.5, 7.5, INF, 1.0, -1.0, NAN, 0.5])
    b = np.array([0.0, 2.0, -2.0, 3.0, 0.0, NAN, 1.0, INF])
    out = ad.zeros((6, len(a)), device=dev)
    ad.launch(m.k, dim=len(a), inputs=[ad.array(a, device=dev), ad.array(b, device=dev)],
              outputs=[out])
    got = out.numpy()
    with np.errstate(all="ignore"):
        want = np.stack([np.hypot(a, b), np.fmod(a, b), np.arcsinh(a), np.arccosh(a),
                         np.arctanh(a), np.isnan(a) + 2.0 * np.isinf(a) + 4.0 * np.isfinite(a)])
    np.testing.assert_allclose(got, want, rtol=4e-16, atol=0)     # (NumPy's atanh: 1 ulp off)
    assert got[1, 1] == -1.5 and got[1, 2] == 1.5       # fmod: the sign of x (% has y's)
    assert got[0, 3] == INF and got[3, 3] == INF and got[4, 4] == INF and got[4, 5] == -INF


CHOSEN = '''
    @ad.kernel
    def k(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        out[i] = math.hypot(x[i], y[i]) + math.fmod(x[i], y[i])
'''


def test_derivatives_stated_by_choice(backend, kernel_module):
    """hypot at the origin: 0 (nan from x / z); fmod: dz/dx = 1, dz/dy = -trunc(x / y)."""
    m = kernel_module(CHOSEN)
    dev = "cuda" if backend == "cuda" else "cpu"
    a, b = np.array([0.0, -7.5, 7.5, 3.0]), np.array([0.0, 2.0, -2.0, 4.0])
    x, y = (ad.array(v, device=dev, requires_grad=True) for v in (a, b))
    out = ad.zeros(len(a), device=dev, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.k, dim=len(a), inputs=[x, y], outputs=[out])
    tape.backward(grads={out: np.ones(len(a))})
    gx, gy = x.grad.numpy(), y.grad.numpy()
    r = np.hypot(a[1:], b[1:])
    # (0, 0): hypot's 0 plus fmod's 1 for x; fmod(0, 0) is nan, its dz/dy -(0 - nan) / 0
    assert gx[0] == 1.0
    np.testing.assert_allclose(gx[1:], a[1:] / r + 1.0, rtol=1e-14)
    np.testing.assert_allclose(gy[1:], b[1:] / r - np.trunc(a[1:] / b[1:]), rtol=1e-14)
    assert list(np.trunc(a[1:] / b[1:])) == [-3.0, -3.0, 0.0]


LEN = '''
    @ad.kernel
    def k(x: ad.array(dtype=float), w: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float)):
        i = ad.tid()
        s = 0.0
        for k in range(len(w)):
            s += w[k, i] * x[i]
        out[i] = s / float(len(x))
'''


def test_len_of_an_array_is_its_first_axis(backend, kernel_module):
    m = kernel_module(LEN)
    dev = "cuda" if backend == "cuda" else "cpu"
    xv, wv = np.array([0.5, -1.0, 2.0]), np.arange(12.0).reshape(4, 3) / 7.0
    x, w = (ad.array(v, device=dev, requires_grad=True) for v in (xv, wv))
    out = ad.zeros(3, device=dev, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.k, dim=3, inputs=[x, w], outputs=[out])
    np.testing.assert_allclose(out.numpy(), wv.sum(axis=0) * xv / 3.0, rtol=1e-15)
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_allclose(x.grad.numpy(), wv.sum(axis=0) / 3.0, rtol=1e-15)
    np.testing.assert_allclose(w.grad.numpy(), np.tile(xv / 3.0, (4, 1)), rtol=1e-15)


@pytest.mark.parametrize("body, message", [
    ("out[i] = math.gamma(x[i])", "math.gamma is not supported in kernels and funcs (it has "
                                  "no derivative rule); the math functions that are: math.acos"),
    ("out[i] = float(len(x, 2))", "len() takes one array parameter"),
    ("v = 1.0\n    out[i] = float(len(v))", "len() takes one array parameter"),
    ("out[i] = sum(x)", "call to unsupported function 'sum' (only math.* functions with a "
                        "derivative rule, ad.* and @ad.func functions can be called)"),
    ("out[i] = plain(x[i])", "'plain' is a plain Python function: decorate it with @ad.func"),
    ("out[i] = k(x, out)", "kernel 'k' cannot be called inside a kernel or func (a kernel is "
                           "launched, with ad.launch): write the code both share as an @ad.func"),
])
def test_unsupported_calls_say_what_is(kernel_module, body, message):
    src = f'''
    def plain(v):
        return 2.0 * v

    @ad.kernel
    def k(x: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
    {body}
'''.replace("\n    out", "\n        out").replace("\n    v =", "\n        v =")
    m = kernel_module(src)
    with pytest.raises(TransformError) as err:
        ad.launch(m.k, dim=2, inputs=[ad.zeros(2)], outputs=[ad.zeros(2)])
    assert message in str(err.value)
    assert f"{m.__file__}:" in str(err.value)
