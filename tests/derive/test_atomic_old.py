"""The value an atomic returns (Warp's: the element's old value, issue 38):
``old = ad.atomic_add(a, i, v)``, ``atomic_sub``, ``atomic_min``, ``atomic_max`` (and the bit
ones, tests/derive/test_atomic_bits.py), also taken straight into a store (``o[i] =
wp.atomic_xor(a, j, v)``) or inside an expression. One mechanism: normalize writes each as
``old = AtomicFetch(a[i], op, v)``, whose update every pass reads as the statement form's
(``AtomicFetch.update``). Old values against a serial model on python, numba and the CUDA
simulator (colliding threads run in order there); the updates keep their gradients
(central differences in float64); a kernel whose backward would need an old value, or
whose gradient would flow through one, runs forward and its backward (and JVP) is refused
naming its line; NVIDIA Warp's CPU
device computes the same old values where it is installed (skipped otherwise).
"""
import itertools
import math
import re

import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from adjoint.errors import TransformError
from adjoint.vector_mode import jvp_launch
from tests.conftest import central_fd
from tests.gpu_tolerance import real_gpu

SRC = '''
@ad.kernel
def slots(x: ad.array(dtype=float), count: ad.array(dtype=ad.int32), lo: ad.array(dtype=float),
          hi: ad.array(dtype=float), total: ad.array(dtype=float), idx: ad.array(dtype=ad.int32),
          out: ad.array(dtype=float)):
    i = ad.tid()
    k = ad.atomic_add(count, 0, 2)
    idx[i] = k + 10 * ad.atomic_sub(count, 1, i)
    a = ad.atomic_min(lo, 0, x[i] * 2.0)
    b = ad.atomic_max(hi, i % 2, math.sin(x[i]))
    t = ad.atomic_add(total, 0, x[i] * x[i])
    ad.atomic_sub(total, 1, 3.0 * x[i])
    out[i] = x[i] * 2.0 + float(ad.atomic_add(count, 2, 1) > 2)
    idx[N + i] = int(a < 0.0) + 2 * int(b > 0.5) + 4 * int(t > 1.0)
'''

X = np.array([0.3, -0.7, 0.9, 0.1, -1.2, 0.5])
N = len(X)


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _run(m, x, tape=None):
    dev = _device()
    xa = ad.array(x, requires_grad=True, device=dev)
    count = ad.array(np.array([0, 100, 0], np.int32), dtype=ad.int32, device=dev)
    lo = ad.array(np.array([0.25]), requires_grad=True, device=dev)
    hi = ad.array(np.array([0.0, 0.1]), requires_grad=True, device=dev)
    total = ad.array(np.array([0.5, 0.0]), requires_grad=True, device=dev)
    idx = ad.zeros(2 * N, dtype=ad.int32, device=dev)
    out = ad.zeros(N, requires_grad=True, device=dev)
    args = [xa, count, lo, hi, total, idx, out]
    if tape is None:
        ad.launch(m.slots, N, inputs=args)
    else:
        with tape:
            ad.launch(m.slots, N, inputs=args)
    return args


def _model(x, order=None):
    """The kernel's threads one after another, in order (or in ``order``)."""
    count, lo, hi, total = [0, 100, 0], [0.25], [0.0, 0.1], [0.5, 0.0]
    idx, out = [0] * (2 * N), [0.0] * N
    for i in range(len(x)) if order is None else order:
        xi = x[i]
        k = count[0]
        count[0] += 2
        s = count[1]
        count[1] -= i
        idx[i] = k + 10 * s
        a, lo[0] = lo[0], min(lo[0], xi * 2.0)
        b, hi[i % 2] = hi[i % 2], max(hi[i % 2], math.sin(xi))
        t = total[0]
        total[0] += xi * xi
        total[1] -= 3.0 * xi
        c = count[2]
        count[2] += 1
        out[i] = xi * 2.0 + float(c > 2)
        idx[N + i] = int(a < 0.0) + 2 * int(b > 0.5) + 4 * int(t > 1.0)
    return count, lo, hi, total, idx, out


def test_old_values_are_warps(backend, kernel_module):
    m = kernel_module("N = 6\n" + SRC)
    _, count, lo, hi, total, idx, out = _run(m, X)
    w_count, w_lo, w_hi, w_total, w_idx, w_out = _model(X)
    np.testing.assert_array_equal(count.numpy(), w_count)
    if real_gpu():
        _check_some_arrival_order(idx.numpy(), out.numpy())
        np.testing.assert_allclose(lo.numpy(), w_lo, rtol=1e-15)
        np.testing.assert_allclose(hi.numpy(), w_hi, rtol=1e-15)
        np.testing.assert_allclose(total.numpy(), w_total, rtol=1e-14)
        return
    np.testing.assert_array_equal(idx.numpy(), w_idx)
    np.testing.assert_allclose(lo.numpy(), w_lo, rtol=1e-15)
    np.testing.assert_allclose(hi.numpy(), w_hi, rtol=1e-15)
    np.testing.assert_allclose(total.numpy(), w_total, rtol=1e-14)
    np.testing.assert_allclose(out.numpy(), w_out, rtol=1e-15)


def _check_some_arrival_order(idx, out):
    """On a GPU the lanes of one atomic instruction on one element are served in an order
    the hardware picks, and numba-cuda's float min/max return the value their
    compare-and-swap loop read first (docs/from-warp.md): a thread's old value is then the
    element as some order of the threads left it before this thread's update, or older.
    Each flag of ``idx[N:]`` comes from one atomic: a thread's flag must be one that some
    order of the threads gives it, or the element's starting value. ``count[0]`` (add 2)
    and ``count[2]`` (add 1) hand out each old value once."""
    flags = idx[N:]
    assert set(flags) <= set(range(8))
    start = _model(X, order=())[4][N:]      # no thread ran: the starting values' flags
    possible = [[{(start[i] >> bit) & 1} for i in range(N)] for bit in range(3)]
    for order in itertools.permutations(range(N)):
        model = np.array(_model(X, order)[4][N:])
        for bit in range(3):
            for i in range(N):
                possible[bit][i].add(int(model[i] >> bit) & 1)
    for bit in range(3):
        for i in range(N):
            assert (int(flags[i]) >> bit) & 1 in possible[bit][i], (bit, i, flags)
    assert len(set(idx[:N])) == N
    assert sorted(np.rint(out - 2.0 * X).astype(int)) == [0, 0, 0, 1, 1, 1]


def test_the_updates_keep_their_gradients(backend, kernel_module):
    """Each atomic whose old value is taken still differentiates as its statement form:
    add and sub pass the element's gradient to the value, min and max to the value that
    survived. Checked against central differences of the model in float64."""
    if backend == "cuda":
        pytest.skip("the simulator's floats add in thread order too, but one backend "
                    "pair is enough for the finite differences")
    m = kernel_module("N = 6\n" + SRC)
    seeds = {"lo": np.array([0.7]), "hi": np.array([1.3, -0.4]),
             "total": np.array([0.9, 1.1]), "out": np.linspace(0.5, 1.5, N)}
    tape = ad.Tape()
    xa, _, lo, hi, total, _, out = _run(m, X, tape)
    tape.backward(grads={lo: seeds["lo"], hi: seeds["hi"], total: seeds["total"],
                         out: seeds["out"]})

    def loss(x):
        _, w_lo, w_hi, w_total, _, w_out = _model(x)
        return float(np.dot(seeds["lo"], w_lo) + np.dot(seeds["hi"], w_hi) +
                     np.dot(seeds["total"], w_total) + np.dot(seeds["out"], w_out))
    np.testing.assert_allclose(xa.grad.numpy(), central_fd(loss, X), rtol=1e-7, atol=1e-9)


def test_python_calls_return_the_old_value():
    a = np.array([6.0, 3.0])
    assert ad.atomic_add(a, 0, 1.5) == 6.0 and a[0] == 7.5
    assert ad.atomic_sub(a, 1, 1.0) == 3.0 and a[1] == 2.0
    assert ad.atomic_min(a, 1, -1.0) == 2.0 and a[1] == -1.0
    assert ad.atomic_max(a, 0, 1.0) == 7.5 and a[0] == 7.5


DIRECT = '''
@ad.kernel
def direct(flags: ad.array(dtype=ad.int32), x: ad.array(dtype=float),
           o: ad.array(dtype=ad.int32, ndim=2), y: ad.array(dtype=float)):
    i = ad.tid()
    o[i, 0] = ad.atomic_xor(flags, i % 2, i + 1)
    o[i, 1] = 3 * ad.atomic_add(flags, 2, 1) + ad.atomic_or(flags, 3, i)
    y[i] = x[i] * x[i]
'''


def test_an_old_value_stored_or_used_directly(backend, kernel_module):
    """``o[i] = ad.atomic_xor(a, j, v)`` and an atomic inside an expression act as the
    local form ``old = ...; o[i] = old``; the kernel keeps its gradient."""
    m = kernel_module(DIRECT)
    dev, n = _device(), 5
    flags = ad.array(np.array([1, 2, 0, 8], np.int32), dtype=ad.int32, device=dev)
    o = ad.zeros((n, 2), dtype=ad.int32, device=dev)
    x = ad.array(np.linspace(-1.0, 1.0, n), requires_grad=True, device=dev)
    y = ad.zeros(n, requires_grad=True, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(m.direct, n, inputs=[flags, x, o, y])
    f, want = [1, 2, 0, 8], np.zeros((n, 2), np.int32)
    for i in range(n):
        want[i, 0] = f[i % 2]
        f[i % 2] ^= i + 1
        c = f[2]
        f[2] += 1
        want[i, 1] = 3 * c + f[3]
        f[3] |= i
    np.testing.assert_array_equal(o.numpy(), want)
    np.testing.assert_array_equal(flags.numpy(), f)
    tape.backward(grads={y: ad.array(np.ones(n), device=dev)})
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * np.linspace(-1.0, 1.0, n), rtol=1e-15)


KERNEL = '''
@ad.kernel
def k(c: ad.array(dtype=ad.int32), x: ad.array(dtype=float), y: ad.array(dtype=float),
      p: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    {body}
'''

LAZY = [    # (body, what the backward's refusal says, whether the JVP is refused too)
    ("y[i] = ad.atomic_add(x, 0, 1.0)",
     r"the old value atomic_add\(\) returns is used in a value whose gradient is taken", True),
    ("old = ad.atomic_max(x, 0, 2.0)\n    y[i] = old * 3.0",
     r"the old value atomic_max\(\) returns is used in a value whose gradient is taken", True),
    ("k = ad.atomic_add(c, 0, 1)\n    y[k] = x[i] * x[i]",
     "the old value this atomic returns decides what the backward computes", False),
    ("y[i] = x[i] * float(ad.atomic_sub(c, 0, 1))",
     "the old value this atomic returns decides what the backward computes", False),
]


def _arrays():
    return [ad.zeros(2, dtype=ad.int32), ad.array(np.array([0.5, 1.5]), requires_grad=True),
            ad.zeros(2, requires_grad=True), ad.zeros(2, dtype=ad.vec3)]


def _line_of(err, module):
    """The line of the user's file an error names (the generated module says its basename)."""
    text = str(err.value)
    name = re.escape(module.__file__.rsplit("/", 1)[-1])
    lines = re.findall(rf"{name}:(\d+): ", text)     # (not the kernel's origin, in parentheses)
    assert len(lines) == 1, text
    return int(lines[0])


@pytest.mark.parametrize("body, message, jvp_refused", LAZY)
def test_a_kernel_its_backward_refuses_runs_forward(kernel_module, body, message,
                                                     jvp_refused):
    """Warp runs such a kernel forward (as a program that never differentiates it does):
    the refusal waits for the backward (or the JVP) and names the user's line then."""
    m = kernel_module(KERNEL.format(body=body))
    args = _arrays()
    with ad.Tape() as tape:
        ad.launch(m.k, 2, inputs=args)          # the forward runs
    assert args[2].numpy().any() or "y[k]" in body
    with pytest.raises(ad.LaunchError, match=message) as err:
        tape.backward(grads={args[2]: ad.array(np.ones(2))})
    assert "kernel 'k' has no backward" in str(err.value)
    assert _line_of(err, m) in (9, 10)
    if jvp_refused:
        with pytest.raises(ad.LaunchError, match="has no tangent adjoint can compute") as err:
            ad.launch(m.k, 2, inputs=_arrays(), tangents={"x": ad.array(np.ones(2))},
                      record_tape=False)
        assert "kernel 'k' has no JVP" in str(err.value) and _line_of(err, m) in (9, 10)
        with pytest.raises(ad.LaunchError, match="has no tangent adjoint can compute"):
            jvp_launch(m.k, 2, inputs=_arrays(), tangents={"x": np.ones((3, 2))})
    else:
        ad.launch(m.k, 2, inputs=_arrays(), tangents={"x": ad.array(np.ones(2))},
                  record_tape=False)


def test_enable_backward_false_says_so(kernel_module):
    m = kernel_module(KERNEL.format(body=LAZY[0][0]).replace("@ad.kernel", "@ad.kernel("
                                                               "enable_backward=False)"))
    args = _arrays()
    with ad.Tape() as tape:
        ad.launch(m.k, 2, inputs=args)
    with pytest.raises(ad.AdjointError, match="enable_backward=False"):
        tape.backward(grads={args[2]: ad.array(np.ones(2))})


def test_an_old_vector_is_refused_at_once(kernel_module):
    m = kernel_module(KERNEL.format(body="v = ad.atomic_add(p, i, ad.vec3(1.0, 2.0, 3.0))"))
    with pytest.raises(TransformError, match=r"the old value atomic_add\(\) returns of 'p', an "
                                             "array of vec3, is not supported") as err:
        ad.launch(m.k, 2, inputs=_arrays())
    assert f"{m.__file__}:10:" in str(err.value)


WARP_PROGRAM = '''
@wp.kernel
def compact(x: wp.array(dtype=float), count: wp.array(dtype=int), keep: wp.array(dtype=int),
            lo: wp.array(dtype=float), hi: wp.array(dtype=float), o: wp.array(dtype=int),
            f: wp.array(dtype=int)):
    i = wp.tid()
    if x[i] > 0.0:
        slot = wp.atomic_add(count, 0, 1)
        keep[slot] = i
    o[i] = wp.atomic_sub(count, 1, 2) + wp.atomic_xor(f, 0, i)
    old = wp.atomic_min(lo, 0, x[i])
    f[1 + i] = wp.where(old > x[i], 1, 0)
    wp.atomic_max(hi, 0, x[i] * x[i])


def run(x):
    n = len(x)
    xa = wp.array(x, dtype=float, requires_grad=True)
    count = wp.array(np.array([0, 50]), dtype=int)
    keep = wp.zeros(n, dtype=int)
    lo = wp.array(np.array([0.0]), dtype=float, requires_grad=True)
    hi = wp.zeros(1, dtype=float, requires_grad=True)
    o = wp.zeros(n, dtype=int)
    f = wp.zeros(n + 1, dtype=int)
    tape = wp.Tape()
    with tape:
        wp.launch(compact, dim=n, inputs=[xa, count, keep, lo, hi, o, f])
    tape.backward(grads={lo: wp.array(np.array([2.0]), dtype=float),
                         hi: wp.array(np.array([1.0]), dtype=float)})
    return (count.numpy(), keep.numpy(), o.numpy(), f.numpy(), lo.numpy(), hi.numpy(),
            xa.grad.numpy())
'''

XW = np.array([0.5, -0.25, 0.75, -1.5, 1.25], np.float32)


def test_warp_spellings(kernel_module):
    """Warp's compaction idiom (``slot = wp.atomic_add(count, 0, 1); keep[slot] = i``: the
    slot indexes an int store, which the backward does not replay) in float32."""
    m = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    count, keep, o, f, lo, hi, grad = m.run(XW)
    n = len(XW)
    c, ff, lo_v, want_keep, want_o, want_f = [0, 50], [0] * (n + 1), 0.0, [0] * n, [], [0] * n
    for i, xi in enumerate(XW):
        if xi > 0.0:
            want_keep[c[0]] = i
            c[0] += 1
        s = c[1]
        c[1] -= 2
        want_o.append(s + ff[0])
        ff[0] ^= i
        want_f[i] = int(lo_v > xi)
        lo_v = min(lo_v, float(xi))
    np.testing.assert_array_equal(count, c)
    np.testing.assert_array_equal(keep, want_keep)
    np.testing.assert_array_equal(o, want_o)
    np.testing.assert_array_equal(f, [ff[0]] + want_f)
    assert lo[0] == np.float32(-1.5) and hi[0] == np.float32(2.25)
    want_grad = np.zeros(n, np.float32)
    want_grad[3] = 2.0 + 2.0 * 1.0 * -1.5           # the minimum's and the maximum's
    np.testing.assert_allclose(grad, want_grad, rtol=1e-6)


def test_nvidia_warp_computes_the_same(kernel_module):
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    real = kernel_module("import warp as wp\nwp.config.quiet = True\n" + WARP_PROGRAM)
    ours = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    for got, want in zip(ours.run(XW), real.run(XW)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
