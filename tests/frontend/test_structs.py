"""``@ad.struct`` parameters of kernels and funcs, on every backend.

One kernel takes a struct (array, int and float fields, and a nested struct) and an
output struct, reads ``s.x[i]``, ``s.x.shape[0]``, ``s.springs.k[i]``, passes the
struct whole to a func, stores into ``r.e[i]``. Gradients appear on the structs'
arrays (``s.x.grad``) and are checked against central differences; the JVP along a
tangent of ``s.x`` against the central difference of the outputs. Then the refusals.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import LaunchError, TransformError
from tests.conftest import central_fd

SRC = '''
@ad.struct
class Springs:
    rest: float
    k: ad.array(dtype=float)


@ad.struct
class State:
    x: ad.array(dtype=float)
    n: int
    springs: Springs


@ad.struct
class Result:
    e: ad.array(dtype=float)


@ad.func
def energy(s: State, i: int) -> float:
    j = (i + 1) % s.x.shape[0]
    d = s.x[j] - s.x[i] - s.springs.rest
    return 0.5 * s.springs.k[i] * d * d


@ad.kernel
def total(s: State, scale: float, r: Result, out: ad.array(dtype=float)):
    i = ad.tid()
    e = energy(s, i) * scale
    if i < s.n:
        e = e + math.sin(s.x[i])
    r.e[i] = e
    ad.atomic_add(out, 0, e * s.springs.k[i])
'''

X = np.array([0.1, 0.9, 2.2, 2.8, 4.1])
K = np.array([1.5, 0.7, 2.0, 1.1, 0.4])


def _make(m, x, k):
    s = m.State(x=ad.array(x, requires_grad=True), n=3)
    s.springs = m.Springs(1.0, ad.array(k, requires_grad=True))
    r = m.Result()
    r.e = ad.zeros(5, requires_grad=True)
    return s, r, ad.zeros(1, requires_grad=True)


def test_struct_parameters_gradient_and_jvp(backend, kernel_module):
    m = kernel_module(SRC)
    s, r, out = _make(m, X, K)
    ad.launch(m.total, 5, inputs=[s, 0.5], outputs=[r, out])
    d = np.roll(X, -1) - X - 1.0
    want = 0.25 * K * d * d + np.where(np.arange(5) < 3, np.sin(X), 0.0)
    np.testing.assert_allclose(r.e.numpy(), want, rtol=1e-14)
    np.testing.assert_allclose(out.numpy(), [np.sum(want * K)], rtol=1e-13)

    w = np.array([0.3, 1.2, -0.8, 0.5, 1.0])

    def loss(x, k):
        s, r, out = _make(m, x, k)
        ad.launch(m.total, 5, inputs=[s, 0.5], outputs=[r, out])
        return float(np.sum(w * r.e.numpy()) + 2.0 * out.numpy()[0])

    s, r, out = _make(m, X, K)
    tape = ad.Tape()
    with tape:
        ad.launch(m.total, 5, inputs=[s, 0.5], outputs=[r, out])
    tape.backward(grads={r.e: w, out: np.array([2.0])})
    np.testing.assert_allclose(s.x.grad.numpy(), central_fd(lambda x: loss(x, K), X),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(s.springs.k.grad.numpy(), central_fd(lambda k: loss(X, k), K),
                               rtol=1e-6, atol=1e-8)

    t = np.array([0.4, -1.0, 0.7, 0.2, -0.5])
    s, r, out = _make(m, X, K)
    got = ad.launch(m.total, 5, inputs=[s, 0.5], outputs=[r, out], tangents={s.x: ad.array(t)})

    def outputs(h):
        s, r, out = _make(m, X + h * t, K)
        ad.launch(m.total, 5, inputs=[s, 0.5], outputs=[r, out])
        return r.e.numpy().copy(), out.numpy().copy()
    (ep, op), (em, om) = outputs(1e-6), outputs(-1e-6)
    np.testing.assert_allclose(got["r_e"].numpy(), (ep - em) / 2e-6, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got["out"].numpy(), (op - om) / 2e-6, rtol=1e-6, atol=1e-8)


BAD = '''
@ad.struct
class P:
    x: ad.array(dtype=float)
    n: int


@ad.func
def takes_number(v: float) -> float:
    return v


@ad.kernel
def assigns(p: P):
    i = ad.tid()
    p.n = 3


@ad.kernel
def bare(p: P, y: ad.array(dtype=float)):
    i = ad.tid()
    q = p


@ad.kernel
def unknown(p: P, y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = p.m


@ad.kernel
def wrong_func(p: P, y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = takes_number(p)


@ad.func
def with_grad(p: P) -> float:
    return p.x[0]


@ad.func_grad(with_grad)
def with_grad_grad(p, adj_ret):
    return 0.0


@ad.kernel
def custom(p: P, y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = with_grad(p)


@ad.kernel
def ok(p: P, y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = p.x[i] * float(p.n)
'''


def test_struct_refusals(kernel_module):
    m = kernel_module(BAD)
    lines = open(m.__file__).read().splitlines()
    cases = [(m.assigns, "fields of struct parameter 'p' cannot be assigned", "p.n = 3"),
             (m.bare, r"'p' is a struct \(P\): use its fields \(p.x\)", "q = p"),
             (m.unknown, r"struct 'P' has no field 'm' \(fields: x, n\)", "y[i] = p.m"),
             (m.wrong_func, r"struct 'p' \(P\) is passed to func 'takes_number', which does "
                            "not take a P there", "y[i] = takes_number(p)"),
             (m.custom, "func 'with_grad' takes a struct and has a custom gradient",
              "y[i] = with_grad(p)")]
    for kernel, message, text in cases:
        with pytest.raises(TransformError, match=message) as info:
            kernel.transformed
        assert info.value.filename == m.__file__
        assert lines[info.value.lineno - 1].strip() == text
    with pytest.raises(TypeError, match="field 'z' has unsupported type"):
        @ad.struct
        class Bad:
            z: str
    with pytest.raises(LaunchError, match="field 'p.x' is not set"):
        ad.launch(m.ok, 1, inputs=[m.P(n=1), ad.zeros(1)])


VEC = '''
@ad.struct
class Bodies:
    pos: ad.array(dtype=ad.vec3)
    g: ad.vec3
    m: float


@ad.kernel
def pe(b: Bodies, e: ad.array(dtype=float)):
    i = ad.tid()
    p = b.pos[i]
    e[i] = b.m * ad.dot(b.g, p) + ad.length(ad.cross(b.g, p))
'''


def test_struct_vector_fields(backend, kernel_module):
    """A struct's fields may be arrays of vectors and vectors: ``b.pos[i]`` loads a vec3,
    ``b.g`` is one; values against numpy, gradients on ``b.pos`` and ``b.g`` against
    central differences."""
    m = kernel_module(VEC)
    P = np.array([[0.3, -1.2, 0.8], [1.1, 0.4, -0.6], [-0.7, 0.9, 1.5]])
    G = np.array([0.2, -9.8, 0.5])

    def run(p, g, tape=None):
        b = m.Bodies(pos=ad.array(p, dtype=ad.vec3, requires_grad=True),
                     g=ad.array(g, requires_grad=True), m=2.0)
        e = ad.zeros(3, requires_grad=True)
        if tape is None:
            ad.launch(m.pe, 3, inputs=[b], outputs=[e])
        else:
            with tape:
                ad.launch(m.pe, 3, inputs=[b], outputs=[e])
        return b, e

    _, e = run(P, G)
    want = 2.0 * P @ G + np.linalg.norm(np.cross(G, P), axis=1)
    np.testing.assert_allclose(e.numpy(), want, rtol=1e-13)
    w = np.array([1.0, -0.5, 2.0])
    tape = ad.Tape()
    b, e = run(P, G, tape)
    tape.backward(grads={e: w})

    def loss(p, g):
        return float(w @ run(p, g)[1].numpy())
    np.testing.assert_allclose(b.pos.grad.numpy(), central_fd(lambda p: loss(p, G), P),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(b.g.grad.numpy(), central_fd(lambda g: loss(P, g), G),
                               rtol=1e-6, atol=1e-8)
