"""Integers in kernels: the bit operations ``& | ^ << >> ~`` (and Warp's ``bit_and``, ...,
``nonzero``), and arrays and scalars of the narrow int types (adjoint/rules/bits.py,
adjoint/runtime/intops.py, frontend/scalarize.py); the casts are tests/rules/test_casts.py's,
whose machinery the tables here use.

- ``INT_CASES``: int expressions of two int64 operands ``p``, ``q`` and a float ``x``,
  against NumPy's int64 arithmetic written here (shifts, counts outside 0..63, wrap-around),
  on every backend (python, numba, the CUDA simulator), bit for bit;
- ``FLOAT_CASES``: floats through bit operations and ``ad.nonzero``: the value against
  NumPy, the gradient (tape) and the JVP against central differences in float64;
- narrow int arrays: loads are ints (``255 + 1`` is 256, not uint8's 0), stores wrap
  as C converts, ``+=`` is refused naming the line; a narrow scalar parameter is range
  checked at the launch;
- a float operand of a bit operation is an error naming the line; bfloat16
  is refused with the reason (uint64: tests/runtime/test_uint64.py);
- ``import adjoint.warp as wp``: the same operations spelled as Warp spells them, and
  against NVIDIA Warp's CPU device where it is installed (skipped otherwise).
"""
import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from tests.rules.test_casts import (Case, _device, _wrap, check_float_case, check_int_case,
                                    load_kernels)


def _shl(p, n):
    n = np.asarray(n)
    inside = (n >= 0) & (n <= 63)
    return np.where(inside, np.left_shift(p, np.where(inside, n, 0)), 0)


def _shr(p, n):
    n = np.asarray(n)
    inside = (n >= 0) & (n <= 63)
    return np.where(inside, np.right_shift(p, np.where(inside, n, 0)), p >> 63)


INT_CASES = [
    Case("and", "p & q", lambda p, q, x: p & q),
    Case("or", "p | q", lambda p, q, x: p | q),
    Case("xor", "p ^ q", lambda p, q, x: p ^ q),
    Case("invert", "~p", lambda p, q, x: ~p),
    Case("lshift", "p << (q & 15)", lambda p, q, x: _shl(p, q & 15)),
    Case("rshift", "p >> (q & 15)", lambda p, q, x: _shr(p, q & 15)),
    Case("lshift_wraps_to_int64", "p << 60", lambda p, q, x: _shl(p, 60)),
    Case("shift_counts_outside_0_63", "ad.lshift(p, q * 10) + ad.rshift(p, q - 4) * 3",
         lambda p, q, x: _shl(p, q * 10) + _shr(p, q - 4) * 3),
    Case("builtins", "ad.bit_and(p, q) + ad.bit_or(p, 1) - ad.bit_xor(q, 5) + ad.invert(q)",
         lambda p, q, x: (p & q) + (p | 1) - (q ^ 5) + ~q),
    Case("augmented", "p ^ (q << 2) & 1023 | 7", lambda p, q, x: p ^ ((q << 2) & 1023) | 7),
    Case("bools", "(p > 0) & (q > 0) | (x < 0.0)",
         lambda p, q, x: ((p > 0) & (q > 0) | (x < 0)).astype(np.int64)),
    Case("nonzero", "ad.nonzero(p & 3) + 2 * ad.nonzero(q - 9)",
         lambda p, q, x: ((p & 3) != 0) + 2 * ((q - 9) != 0)),
    Case("hash", "ad.uint32(ad.uint32(p * 16777619) ^ q) >> 3",
         lambda p, q, x: _wrap(_wrap(p * 16777619, 32, False) ^ q, 32, False) >> 3),
]

FLOAT_CASES = [
    Case("nonzero_of_a_float", "ad.nonzero(x) * x + ad.nonzero(x - 0.25) * 3.0",
         lambda p, q, x: (x != 0) * x + (x != 0.25) * 3.0),
    Case("bits_then_float", "x * float((p ^ q) & 255) - float(~q) * x * x",
         lambda p, q, x: x * ((p ^ q) & 255) - (~q) * x * x),
]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return load_kernels(tmp_path_factory, "integers", INT_CASES, FLOAT_CASES)


@pytest.mark.parametrize("case", INT_CASES, ids=[c.name for c in INT_CASES])
def test_int_operations_match_numpy_int64(backend, kernels, case):
    check_int_case(kernels, case)


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c.name for c in FLOAT_CASES])
def test_floats_through_bit_operations(backend, kernels, case):
    check_float_case(kernels, case)


NARROW = """
@ad.kernel
def narrow(a: ad.array(dtype=ad.uint8), b: ad.array(dtype=ad.int16, ndim=2), k: ad.uint8,
           s: ad.int8, x: ad.array(dtype=float), o8: ad.array(dtype=ad.uint8),
           o32: ad.array(dtype=ad.uint32), oi: ad.array(dtype=ad.int8, ndim=2),
           y: ad.array(dtype=float)):
    i = ad.tid()
    v = a[i] + 1 + k
    o8[i] = v
    o32[i] = b[i, 0] * 1000
    oi[i, 1] = b[i, 1] + s
    oi[i, 0] = 2.9 * x[i]
    y[i] = x[i] * float(a[i] + b[i, 0]) + float(v)
"""


def test_narrow_int_arrays_load_as_ints_and_store_wrapped(backend, kernel_module):
    m = kernel_module(NARROW)
    dev = _device()
    a0 = np.array([255, 0, 17], np.uint8)
    b0 = np.array([[-3, 120], [300, -128], [7, 5]], np.int16)
    x0 = np.array([0.5, -1.0, 2.0])

    def run(x):
        outs = [ad.zeros(3, dtype=ad.uint8, device=dev), ad.zeros(3, dtype=ad.uint32, device=dev),
                ad.zeros((3, 2), dtype=ad.int8, device=dev),
                ad.zeros(3, requires_grad=True, device=dev)]
        xa = ad.array(x, requires_grad=True, device=dev)
        tape = ad.Tape()
        with tape:
            ad.launch(m.narrow, 3, inputs=[ad.array(a0, dtype=ad.uint8, device=dev),
                                           ad.array(b0, dtype=ad.int16, device=dev), 250, -20,
                                           xa], outputs=outs)
        return xa, tape, outs

    xa, tape, (o8, o32, oi, y) = run(x0)
    v = a0.astype(np.int64) + 1 + 250                   # 506: an int, not uint8's 250
    np.testing.assert_array_equal(o8.numpy(), v.astype(np.uint8))
    assert o8.numpy().dtype == np.uint8 and o32.numpy().dtype == np.uint32
    np.testing.assert_array_equal(o32.numpy(), (b0[:, 0].astype(np.int64) * 1000).astype(np.uint32))
    np.testing.assert_array_equal(oi.numpy()[:, 1],
                                  (b0[:, 1].astype(np.int64) - 20).astype(np.int8))
    np.testing.assert_array_equal(oi.numpy()[:, 0], np.trunc(2.9 * x0).astype(np.int8))
    want = x0 * (a0.astype(np.int64) + b0[:, 0]) + v
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-15)
    tape.backward(grads={y: np.ones(3)})
    np.testing.assert_allclose(xa.grad.numpy(), a0.astype(np.int64) + b0[:, 0], rtol=1e-15)
    with pytest.raises(OverflowError, match="300 out of bounds for uint8"):
        ad.launch(m.narrow, 3, inputs=[ad.array(a0, dtype=ad.uint8), ad.array(b0, dtype=ad.int16),
                                       300, 0, ad.array(x0)], outputs=[
            ad.zeros(3, dtype=ad.uint8), ad.zeros(3, dtype=ad.uint32),
            ad.zeros((3, 2), dtype=ad.int8), ad.zeros(3)])


@pytest.mark.parametrize("body, message", [
    ("out[i] = x[i] << 2", "'<<' takes ints (or bools), not a float"),
    ("out[i] = ~(x[i] * 2.0)", "'~' takes ints"),
    ("out[i] = ad.bit_xor(3, x[i])", "takes ints"),
    ("out[i] = 3 & 1.5", "'&' takes ints"),
    ("u[i] += 1", "array of uint8: it is stored into (=), not accumulated into"),
    ("ad.atomic_add(u, i, 1)", "array of uint8: it is stored into (=), not accumulated"),
])
def test_what_integers_refuse_names_the_line(kernel_module, body, message):
    m = kernel_module(f"""
    @ad.kernel
    def bad(x: ad.array(dtype=float), u: ad.array(dtype=ad.uint8), out: ad.array(dtype=int)):
        i = ad.tid()
        {body}
    """)
    with pytest.raises(ad.TransformError) as err:
        ad.launch(m.bad, 1, inputs=[ad.zeros(1), ad.zeros(1, dtype=ad.uint8)],
                  outputs=[ad.zeros(1, dtype=int)])
    assert message in str(err.value) and err.value.lineno is not None
    assert body in str(err.value)


def test_bfloat16_is_refused_with_the_reason():
    # (float16 arrays are supported: tests/runtime/test_float16.py)
    with pytest.raises(wp_ns.WarpNameError, match="wp.bfloat16 is not supported"):
        getattr(wp_ns, "bfloat16")


# -- Warp's spellings, and Warp itself ---------------------------------------------------

WARP_PROGRAM = '''
@wp.kernel
def ints(a: wp.array(dtype=int), b: wp.array(dtype=int), x: wp.array(dtype=float),
         u: wp.array(dtype=wp.uint8), out: wp.array(dtype=int, ndim=2),
         ou: wp.array(dtype=wp.uint8), y: wp.array(dtype=float)):
    i = wp.tid()
    p = a[i]
    q = b[i]
    out[i, 0] = p & q
    out[i, 1] = p | q
    out[i, 2] = p ^ q
    out[i, 3] = ~p
    out[i, 4] = p << (q & 7)
    out[i, 5] = p >> (q & 7)
    out[i, 6] = wp.bit_and(p, q) + wp.bit_or(p, 1) + wp.bit_xor(q, 5) + wp.invert(q)
    out[i, 7] = wp.lshift(p, 3) + wp.rshift(p, 2)
    out[i, 8] = wp.nonzero(p & 3)
    out[i, 9] = wp.int32(x[i] * 10.0)
    out[i, 10] = p % q
    out[i, 11] = wp.mod(p, q)
    out[i, 12] = int(u[i]) + 1
    ou[i] = wp.uint8(p)
    y[i] = wp.float32(p) * x[i] + wp.nonzero(x[i]) * x[i] * x[i] + float(wp.float64(x[i]))


def run(p, q, x, u):
    a = wp.array(p, dtype=int)
    b = wp.array(q, dtype=int)
    xa = wp.array(x, dtype=float, requires_grad=True)
    ua = wp.array(u, dtype=wp.uint8)
    out = wp.zeros((len(p), 13), dtype=int)
    ou = wp.zeros(len(p), dtype=wp.uint8)
    y = wp.zeros(len(p), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(ints, dim=len(p), inputs=[a, b, xa, ua], outputs=[out, ou, y])
    tape.backward(grads={y: wp.array(np.ones(len(p)), dtype=float)})
    return out.numpy(), ou.numpy(), y.numpy(), xa.grad.numpy()
'''

WP0 = (np.array([5, -7, 1000, 77, 0, -300]), np.array([3, 12, -5, 7, 9, 5]),
       np.array([0.25, -1.9, 0.0, 3.3, 2.6, -0.55]),
       np.array([0, 255, 17, 200, 1, 9], np.uint8))


def _expected_warp(p, q, x, u):
    out = np.stack([p & q, p | q, p ^ q, ~p, p << (q & 7), p >> (q & 7),
                    (p & q) + (p | 1) + (q ^ 5) + ~q, (p << 3) + (p >> 2), (p & 3) != 0,
                    np.trunc(x * 10), np.fmod(p, q), np.fmod(p, q),
                    u.astype(np.int64) + 1], axis=1).astype(np.int64)
    y = p * x + (x != 0) * x * x + x
    return out, p.astype(np.uint8), y, p + 2 * (x != 0) * x + 1


@pytest.fixture(params=["python", "numba"])
def cpu_backend(request):
    with ad.backend_scope(request.param):
        yield request.param


def test_warp_spellings_under_adjoint_warp(cpu_backend, kernel_module):
    m = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    out, ou, y, g = m.run(*WP0)
    want_out, want_ou, want_y, want_g = _expected_warp(*WP0)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(ou, want_ou)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_allclose(g, want_g, rtol=1e-6)


def test_nvidia_warp_computes_the_same(kernel_module):
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    real = kernel_module("import warp as wp\nwp.config.quiet = True\n" + WARP_PROGRAM)
    ours = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    for got, want in zip(ours.run(*WP0), real.run(*WP0)):
        if got.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)
