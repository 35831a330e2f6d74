"""Funcs that return nothing (issue 38): helpers that only store into arrays or call
atomics, called as a statement (``scatter(f, i, j, fs)``), with an early bare
``return`` inside an ``if``, and one calling another.

Pass normalize gives such a func ``n_returns == 0`` and a final ``return 0`` that no
caller reads; pass inline puts its body in the caller like any func taking arrays; pass
fence refuses a use of its call's value. The gradients are checked against central
differences in float64 on every backend, and Warp's spring example (``import
adjoint.warp as wp``, float32, an array of vec3 passed to the func) against a float64
NumPy reference. Then the refusals, with file and line.
"""
import textwrap

import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import TransformError
from tests.conftest import central_fd

SRC = '''
@ad.func
def put(out: ad.array(dtype=float), i: int, v: float):
    out[i] = v * math.sin(v)


@ad.func
def spread(acc: ad.array(dtype=float), i: int, v: float):
    ad.atomic_add(acc, i % 2, v * v)
    ad.atomic_sub(acc, 2, 0.5 * v)


@ad.func
def clipped(acc: ad.array(dtype=float), i: int, v: float):
    if v > 0.4:
        return
    acc[i] += math.exp(v)
    spread(acc, i + 1, v)


@ad.kernel
def deposit(x: ad.array(dtype=float), out: ad.array(dtype=float),
            acc: ad.array(dtype=float), low: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i] * 1.5
    put(out, i, v)
    spread(acc, i, v)
    clipped(low, i, x[i])
'''

X = np.array([0.3, -0.7, 0.9, 0.1, -1.2])
N = len(X)


def _forward(x):
    out, acc, low = np.zeros(N), np.zeros(3), np.zeros(N + 1)
    for i in range(N):
        v = x[i] * 1.5
        out[i] = v * np.sin(v)
        acc[i % 2] += v * v
        acc[2] -= 0.5 * v
        if x[i] > 0.4:
            continue
        low[i] += np.exp(x[i])
        low[(i + 1) % 2] += x[i] ** 2
        low[2] -= 0.5 * x[i]
    return out, acc, low


def _run(m, x, tape=None):
    args = [ad.array(x, requires_grad=True), ad.zeros(N, requires_grad=True),
            ad.zeros(3, requires_grad=True), ad.zeros(N + 1, requires_grad=True)]
    if tape is None:
        ad.launch(m.deposit, N, inputs=args[:1], outputs=args[1:])
    else:
        with tape:
            ad.launch(m.deposit, N, inputs=args[:1], outputs=args[1:])
    return args


def test_funcs_returning_nothing_forward_and_gradient(backend, kernel_module):
    m = kernel_module(SRC)
    got = _run(m, X)[1:]
    for a, want in zip(got, _forward(X)):
        np.testing.assert_allclose(a.numpy(), want, rtol=1e-14, atol=1e-15)

    rng = np.random.default_rng(38)
    seeds = [rng.uniform(0.5, 1.5, n) for n in (N, 3, N + 1)]

    def loss(x):
        return sum(float(np.sum(s * a.numpy())) for s, a in zip(seeds, _run(m, x)[1:]))

    tape = ad.Tape()
    args = _run(m, X, tape)
    tape.backward(grads=dict(zip(args[1:], seeds)))
    want = central_fd(loss, X)
    np.testing.assert_allclose(args[0].grad.numpy(), want, rtol=1e-6, atol=1e-8)


WARP = '''
import adjoint.warp as wp


@wp.func
def scatter(f: wp.array(dtype=wp.vec3), i: int, j: int, fs: wp.vec3):
    wp.atomic_sub(f, i, fs)
    wp.atomic_add(f, j, fs)


@wp.kernel
def springs(x: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3)):
    t = wp.tid()
    i = t
    j = (t + 1) % x.shape[0]
    d = x[j] - x[i]
    fs = d * wp.length(d)
    scatter(f, i, j, fs)
'''


def _springs(x):
    f = np.zeros_like(x)
    n = len(x)
    for i in range(n):
        j = (i + 1) % n
        d = x[j] - x[i]
        fs = d * np.linalg.norm(d)
        f[i] -= fs
        f[j] += fs
    return f


def test_warp_scatter_example_float32(backend, kernel_module):
    import adjoint.warp as wp
    m = kernel_module(WARP)
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((5, 3))
    seed = rng.uniform(-1.0, 1.0, (5, 3))
    x = wp.array(x0.astype(np.float32), dtype=wp.vec3, requires_grad=True)
    f = wp.zeros(5, dtype=wp.vec3, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(m.springs, 5, inputs=[x], outputs=[f])
    assert f.numpy().dtype == np.float32
    np.testing.assert_allclose(f.numpy(), _springs(x0), rtol=1e-5, atol=1e-5)
    tape.backward(grads={f: seed.astype(np.float32)})
    want = central_fd(lambda x: float(np.sum(seed * _springs(x))), x0)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-4)


REFUSED = [
    ('''
     @ad.func
     def put(out: ad.array(dtype=float), i: int):
         out[i] = 1.0

     @ad.kernel
     def k(out: ad.array(dtype=float)):
         i = ad.tid()
         y = put(out, i) + 1.0
     ''', "'put' returns no value; call it as a statement", "y = put(out, i) + 1.0"),
    ('''
     @ad.func
     def put(out: ad.array(dtype=float), i: int):
         out[i] = 1.0

     @ad.kernel
     def k(out: ad.array(dtype=float)):
         i = ad.tid()
         y = put(out, i)
     ''', "'put' returns no value", "y = put(out, i)"),
    ('''
     @ad.func
     def put(out: ad.array(dtype=float), i: int, v: float):
         if v > 0.0:
             return
         out[i] = v
         return v

     @ad.kernel
     def k(out: ad.array(dtype=float)):
         i = ad.tid()
         put(out, i, 1.0)
     ''', "every return of a func must return the same number of values",
     "def put(out: ad.array(dtype=float), i: int, v: float):"),
]


@pytest.mark.parametrize("src,message,text", REFUSED)
def test_refusals_name_the_line(kernel_module, src, message, text):
    m = kernel_module(textwrap.dedent(src))
    lines = open(m.__file__).read().splitlines()
    with pytest.raises(TransformError, match=message) as info:
        m.k.transformed
    assert info.value.filename == m.__file__
    assert lines[info.value.lineno - 1].strip() == text


def test_a_vector_array_of_another_shape_is_refused(kernel_module):
    m = kernel_module('''
    import adjoint.warp as wp

    @wp.func
    def push(f: wp.array(dtype=wp.vec4), i: int):
        f[i] = wp.vec4(1.0, 2.0, 3.0, 4.0)

    @wp.kernel
    def k(f: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        push(f, i)
    ''')
    with pytest.raises(TransformError, match="argument 1 of 'push' takes an array of vec4"):
        m.k.transformed
