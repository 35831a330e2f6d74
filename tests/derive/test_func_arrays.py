"""Arrays as ``@ad.func`` parameters: load, store and ``ad.atomic_add`` through them.

A func taking arrays is inlined into its caller (derive/inline.py), so its
accesses are the kernel's own: the gradient reaches the kernel's arrays, its
stores are not replayed by the backward, and the parallel plans see its colliding
accumulations. One kernel calls a func that reads two arrays in a loop (with an
early return), and a func that stores, accumulates at colliding indices and calls
another array func; checked against central differences (reverse) and by
test_jvp's ``jvp_check`` (forward, and the dot-product test) on every backend.
Then the refusals, with file and line.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import TransformError
from tests.conftest import central_fd
from tests.derive.test_jvp import jvp_check

SRC = '''
@ad.func
def window(w: ad.array(dtype=float), x: ad.array(dtype=float), i: int, n: int) -> float:
    s = 0.0
    for k in range(n):
        s += w[k] * x[(i + k) % x.shape[0]]
        if s > 50.0:
            return -s
    return s


@ad.func
def bump(acc: ad.array(dtype=float, ndim=2), j: int, v: float) -> float:
    ad.atomic_add(acc, j % 2, 0, v * v)
    acc[j, 1] += 3.0 * v                    # (its own row)
    return v


@ad.func
def deposit(out: ad.array(dtype=float), acc: ad.array(dtype=float, ndim=2), i: int,
            v: float):
    out[i] = math.sin(v)
    u = bump(acc, i, v + 1.0)
    return v * u, u


@ad.kernel
def gather(w: ad.array(dtype=float), x: ad.array(dtype=float), n: int,
           out: ad.array(dtype=float), acc: ad.array(dtype=float, ndim=2),
           res: ad.array(dtype=float)):
    i = ad.tid()
    s = window(w, x, i, n)
    a, b = deposit(out, acc, i, s)
    res[i] = a + b * window(w, x, i + 1, n)
'''

W = np.array([0.7, -0.4, 1.3])
X = np.array([0.2, -0.9, 0.5, 1.1, -0.3])
N = 5


def _run(m, w, x, out0, acc0, res0, tape=None):
    args = [ad.array(w, requires_grad=True), ad.array(x, requires_grad=True), 3,
            ad.array(out0, requires_grad=True), ad.array(acc0, requires_grad=True),
            ad.array(res0, requires_grad=True)]
    if tape is None:
        ad.launch(m.gather, N, inputs=args[:3], outputs=args[3:])
    else:
        with tape:
            ad.launch(m.gather, N, inputs=args[:3], outputs=args[3:])
    return args


def test_func_array_params_gradient_and_jvp(backend, kernel_module):
    m = kernel_module(SRC)
    out0, acc0, res0 = np.zeros(N), np.full((N, 2), 0.5), np.zeros(N)
    # the forward, by hand
    win = [sum(W[k] * X[(i + k) % N] for k in range(3)) for i in range(N + 1)]
    _, _, _, out, acc, res = _run(m, W, X, out0, acc0, res0)
    want_acc = acc0.copy()
    for i in range(N):
        want_acc[i % 2, 0] += (win[i] + 1.0) ** 2
    want_acc[:, 1] += 3.0 * (np.array(win[:N]) + 1.0)
    np.testing.assert_allclose(out.numpy(), np.sin(win[:N]), rtol=1e-14)
    np.testing.assert_allclose(acc.numpy(), want_acc, rtol=1e-14)
    u = np.array(win[:N]) + 1.0
    np.testing.assert_allclose(res.numpy(), np.array(win[:N]) * u + u * np.array(win[1:]),
                               rtol=1e-13)

    rng = np.random.default_rng(3)
    seeds = [rng.uniform(0.5, 1.5, a.shape) for a in (out0, acc0, res0)]

    def loss(w, x):
        got = _run(m, w, x, out0, acc0, res0)[3:]
        return sum(float(np.sum(s * a.numpy())) for s, a in zip(seeds, got))

    tape = ad.Tape()
    args = _run(m, W, X, out0, acc0, res0, tape)
    tape.backward(grads=dict(zip(args[3:], seeds)))
    np.testing.assert_allclose(args[0].grad.numpy(), central_fd(lambda w: loss(w, X), W),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(args[1].grad.numpy(), central_fd(lambda x: loss(W, x), X),
                               rtol=1e-6, atol=1e-8)
    jvp_check(m.gather, N, [W, X, 3], [out0, acc0, res0], reverse=True)


CUSTOM = '''
@ad.func
def lookup(table: ad.array(dtype=float), x: float) -> float:
    k = int(x)
    t = x - float(k)
    return table[k] * (1.0 - t) + table[k + 1] * t


@ad.func_grad(lookup)
def lookup_grad(table, x, adj_table, adj_ret):
    k = int(x)
    t = x - float(k)
    adj_table[k] += (1.0 - t) * adj_ret
    adj_table[k + 1] += t * adj_ret
    return 0.0, (table[k + 1] - table[k]) * adj_ret


@ad.func_jvp(lookup)
def lookup_jvp(table, x, dot_table, dot_x):
    k = int(x)
    t = x - float(k)
    v = table[k] * (1.0 - t) + table[k + 1] * t
    return v, dot_table[k] * (1.0 - t) + dot_table[k + 1] * t + (table[k + 1] - table[k]) * dot_x


@ad.kernel
def interp(table: ad.array(dtype=float), xs: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    y = lookup(table, xs[i])
    out[i] = y * y
'''


def test_func_array_params_custom_gradient_and_jvp(backend, kernel_module):
    """A func with @ad.func_grad and @ad.func_jvp reads an array: its adjoint takes the
    array's adjoint after the func's parameters and accumulates into it (colliding:
    several threads interpolate in one cell), its JVP takes the array's tangent."""
    m = kernel_module(CUSTOM)
    table, xs = np.array([0.5, -1.0, 2.0, 0.3]), np.array([0.25, 1.5, 1.75, 2.6, 0.9])
    w = np.array([1.0, -0.5, 0.8, 1.2, 0.3])

    def loss(table, xs):
        out = ad.zeros(5)
        ad.launch(m.interp, 5, inputs=[ad.array(table), ad.array(xs)], outputs=[out])
        return float(np.sum(w * out.numpy()))

    args = [ad.array(table, requires_grad=True), ad.array(xs, requires_grad=True),
            ad.zeros(5, requires_grad=True)]
    tape = ad.Tape()
    with tape:
        ad.launch(m.interp, 5, inputs=args[:2], outputs=args[2:])
    tape.backward(grads={args[2]: w})
    np.testing.assert_allclose(args[0].grad.numpy(), central_fd(lambda t: loss(t, xs), table),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(args[1].grad.numpy(), central_fd(lambda x: loss(table, x), xs),
                               rtol=1e-6, atol=1e-8)
    jvp_check(m.interp, 5, [table, xs], [np.zeros(5)], reverse=True)


def test_func_array_params_refusals(kernel_module):
    m = kernel_module('''
    @ad.func
    def first(a: ad.array(dtype=float)) -> float:
        return a[0]


    @ad.func
    def scaled(x: float) -> float:
        return 2.0 * x


    @ad.func_grad(scaled)
    def scaled_grad(x, adj_ret):
        return 2.0 * adj_ret


    @ad.func
    def with_grad(a: ad.array(dtype=float)) -> float:
        a[1] = 2.0
        return a[0]


    @ad.func_grad(with_grad)
    def with_grad_grad(a, adj_ret):
        return 0.0


    @ad.kernel
    def local(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        v = x[i]
        y[i] = first(v)


    @ad.kernel
    def swapped(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = scaled(x)


    @ad.kernel
    def ints(x: ad.array(dtype=int), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = first(x)


    @ad.kernel
    def custom(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = with_grad(x)
    ''')
    lines = open(m.__file__).read().splitlines()
    cases = [(m.local, "func 'first' takes an array as 'a': pass an array parameter",
              "y[i] = first(v)"),
             (m.swapped, "func 'scaled' takes a number as 'x', not the array 'x'", "y[i] = scaled(x)"),
             (m.ints, r"'a' as array\(dtype=float64, ndim=1\), but 'x' is "
                      r"array\(dtype=int64, ndim=1\)", "y[i] = first(x)"),
             (m.custom, "func 'with_grad' has a custom gradient or JVP and writes the array "
                        "'a'", "y[i] = with_grad(x)")]
    for kernel, message, text in cases:
        with pytest.raises(TransformError, match=message) as info:
            kernel.transformed
        assert info.value.filename == m.__file__
        assert lines[info.value.lineno - 1].strip() == text


def test_a_refusal_inside_a_func_names_the_func_line(kernel_module):
    """A statement inlined from a func keeps where it came from (pass inline): a refusal
    there names the caller's line (where the kernel reads and writes the array) and the
    func's own line."""
    m = kernel_module('''
    @ad.func
    def scratch(x: ad.array(dtype=float)) -> float:
        x[0] = x[0] * 3.0
        return x[0] + x[1]


    @ad.kernel
    def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = scratch(x)
    ''')
    lines = open(m.__file__).read().splitlines()
    with pytest.raises(TransformError, match="array 'x' is both read and written") as info:
        m.k.transformed
    assert info.value.filename == m.__file__
    assert lines[info.value.lineno - 1].strip() == "y[i] = scratch(x)"
    inner = next(n for n, t in enumerate(lines, 1) if t.strip() == "x[0] = x[0] * 3.0")
    assert f"(inside func 'scratch', {m.__file__}:{inner}: x[0] = x[0] * 3.0)" in \
        str(info.value)


def test_an_index_out_of_bounds_inside_a_func_names_the_func(backend, kernel_module):
    """The runtime check of an access inlined from a func says which func and line, after
    the kernel's line that calls it; forward and backward, on every backend."""
    m = kernel_module('''
    @ad.func
    def pick(x: ad.array(dtype=float), k: int) -> float:
        return x[k + 2] * x[k + 2]


    @ad.kernel
    def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = pick(x, i)
    ''')
    lines = open(m.__file__).read().splitlines()
    inner = next(n for n, t in enumerate(lines, 1) if "return x[k + 2]" in t)
    dev = "cuda" if backend == "cuda" else "cpu"
    x = ad.array(np.ones(3), device=dev, requires_grad=True)
    y = ad.zeros(3, device=dev, requires_grad=True)
    where = f"index 3 is out of bounds for axis 0 of array 'x' with shape (3,), inside " \
            f"func 'pick' ({m.__file__.rsplit('/', 1)[-1]}:{inner})"
    with pytest.raises(ad.BoundsError) as info:
        ad.launch(m.k, 3, inputs=[x], outputs=[y])
        ad.synchronize()                              # (where CUDA reports it)
    assert where in str(info.value) and "y[i] = pick(x, i)" in str(info.value)
    with pytest.raises(ad.BoundsError) as info:       # the backward checks it too
        ad.launch(m.k, 3, inputs=[x], outputs=[y], adjoint=True)
        x.grad.numpy()                                # (where CUDA reports it)
    assert where in str(info.value)
