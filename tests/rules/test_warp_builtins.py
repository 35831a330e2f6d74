"""Warp's scalar builtins: ``ad.sign step lerp smoothstep round rint trunc frac`` and
``math.log2 log10 cbrt erf erfc copysign degrees radians`` (also ``ad.<name>``).

The rule-table tests (tests/rules/test_rules.py, test_rules_jvp.py, test_rule_table.py) check
each rule against central differences at random points of its domain. Here:

- one kernel using all of them: its value against NumPy (written independently), its
  gradient (tape) and its JVP against central differences, on every backend;
- the derivatives the rules define by choice (docs/language.md, "Warp's scalar
  builtins"), on every backend: 0 at the jumps of sign, step, round, rint and trunc; 1
  for frac; copysign's ±1 at x = ±0, by sign bits, and 0 for y; cbrt's +inf at 0;
  smoothstep's 0 at its edges and where the edges meet;
- the runtime functions at their edges (ties, -0.0, ±inf, nan, beyond 2**52) against
  NumPy or exact decimal rounding, float64 and float32, numba's spelling bit for bit
  with Python's; numba.cuda's cbrt (``cbrt_device``) within an ulp of the exact cube root;
- ``math.trunc`` is Python's (an int: an index), ``ad.trunc`` Warp's (a float).
"""
import decimal
import math

import numba
import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_numba, backend_python, ieee_compiled
from tests.conftest import central_fd

INF, NAN = math.inf, math.nan

ALL = '''
    @ad.kernel
    def k(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        a = x[i]
        b = y[i]
        s1 = ad.smoothstep(-1.0, 1.5, a) * ad.lerp(a, b, 0.3) + ad.lerp(1.0, a * b, b)
        s2 = math.log2(b * b + 1.0) * ad.sign(a) + ad.step(b) * math.log10(2.0 + a)
        s3 = math.cbrt(a) * math.erf(b) + math.degrees(a) * math.erfc(a) + ad.radians(b * b)
        s4 = math.copysign(a, b) * ad.frac(3.0 * b) + ad.round(3.0 * b) * a
        s5 = ad.rint(2.0 * a) * b + ad.trunc(4.0 * a) * b * b + ad.smoothstep(a, b + 2.0, 0.5)
        out[i] = s1 + s2 + s3 + s4 + s5
'''

# away from every kink by more than the differences' step (see the reference below)
X0 = np.array([-0.83, -0.31, 0.42, 0.77, 1.13])
Y0 = np.array([0.61, -0.47, 1.09, -0.88, 0.35])


def _smooth(e0, e1, x):
    t = np.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def reference(a, b):
    """The kernel ``k`` above in NumPy."""
    erf = np.vectorize(math.erf)
    lerp = lambda p, q, t: p + (q - p) * t          # noqa: E731
    half_away = lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5)  # noqa: E731 (no ties here)
    s1 = _smooth(-1.0, 1.5, a) * lerp(a, b, 0.3) + lerp(1.0, a * b, b)
    s2 = np.log2(b * b + 1.0) * np.where(a < 0, -1.0, 1.0) + \
        np.where(b < 0, 1.0, 0.0) * np.log10(2.0 + a)
    s3 = np.cbrt(a) * erf(b) + np.degrees(a) * (1.0 - erf(a)) + np.radians(b * b)
    s4 = np.copysign(a, b) * (3.0 * b - np.trunc(3.0 * b)) + half_away(3.0 * b) * a
    s5 = np.rint(2.0 * a) * b + np.trunc(4.0 * a) * b * b + _smooth(a, b + 2.0, 0.5)
    return s1 + s2 + s3 + s4 + s5


def test_reference_points_are_away_from_the_kinks():
    """The differences below step 1e-6: every argument of a jump or kink is 1e-2 away."""
    for v, kinks in ((X0, 0.0), (Y0, 0.0), (2 * X0, np.arange(-5, 5) + 0.5),
                     (4 * X0, np.arange(-5, 6)), (3 * Y0, np.arange(-5, 5) + 0.5),
                     (3 * Y0, np.arange(-5, 6)), ((0.5 - X0) / (Y0 + 2.0 - X0), [0.0, 1.0])):
        assert np.min(np.abs(np.subtract.outer(v, kinks))) > 1e-2


def test_every_builtin_in_one_kernel_matches_numpy_and_differences(backend, kernel_module):
    m = kernel_module(ALL)
    dev = "cuda" if backend == "cuda" else "cpu"
    n = len(X0)
    w = np.array([0.7, -1.3, 0.4, 1.1, -0.6])

    def f(x, y):
        out = ad.zeros(n, device=dev)
        ad.launch(m.k, n, inputs=[ad.array(x, device=dev), ad.array(y, device=dev)],
                  outputs=[out])
        return out.numpy()

    np.testing.assert_allclose(f(X0, Y0), reference(X0, Y0), rtol=1e-12, atol=1e-12)

    x = ad.array(X0, requires_grad=True, device=dev)
    y = ad.array(Y0, requires_grad=True, device=dev)
    out = ad.zeros(n, requires_grad=True, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(m.k, n, inputs=[x, y], outputs=[out])
    tape.backward(grads={out: w})
    np.testing.assert_allclose(x.grad.numpy(), central_fd(lambda v: w @ f(v, Y0), X0),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(y.grad.numpy(), central_fd(lambda v: w @ f(X0, v), Y0),
                               rtol=1e-6, atol=1e-7)

    dx, dy = np.array([1.0, -0.5, 0.3, 2.0, -1.0]), np.array([-0.4, 1.0, 0.8, -1.2, 0.5])
    dots = ad.launch(m.k, n, inputs=[ad.array(X0, device=dev), ad.array(Y0, device=dev)],
                     outputs=[ad.zeros(n, device=dev)],
                     tangents={"x": ad.array(dx, device=dev), "y": ad.array(dy, device=dev)})
    h = 1e-6
    fd = (f(X0 + h * dx, Y0 + h * dy) - f(X0 - h * dx, Y0 - h * dy)) / (2 * h)
    np.testing.assert_allclose(dots["out"].numpy(), fd, rtol=1e-6, atol=1e-7)


# -- the derivatives the rules choose, at the kinks ------------------------------------

KINKS = """
    @ad.kernel
    def kinks(x: ad.array(dtype=float), y: ad.array(dtype=float),
              out: ad.array(dtype=float, ndim=2)):
        i = ad.tid()
        a = x[i]
        b = y[i]
        out[0, i] = ad.sign(a) + ad.step(a) + ad.round(a) + ad.rint(a) + ad.trunc(a) + ad.frac(a)
        out[1, i] = math.copysign(a, b)
        out[2, i] = ad.smoothstep(0.0, 1.0, a)
        out[3, i] = ad.smoothstep(b, b, a)


    @ad.kernel
    def roots(x: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        out[i] = math.cbrt(x[i])
"""

XK = np.array([0.0, -0.0, 0.5, -2.5, 1.0, 3.0, 8.0, -1.5])
YK = np.array([1.0, 1.0, -1.0, -1.0, 1.0, -0.0, 0.0, -1.5])
ROWS = 4


def _row_vjp(kernel, row, dev):
    """(adjoint of x, adjoint of y) for the seed 1 on every element of ``out[row]``."""
    seed = np.zeros((ROWS, len(XK)))
    seed[row] = 1.0
    adj_x, adj_y = ad.zeros(len(XK), device=dev), ad.zeros(len(XK), device=dev)
    ad.launch(kernel, len(XK), inputs=[ad.array(XK, device=dev), ad.array(YK, device=dev)],
              outputs=[ad.zeros((ROWS, len(XK)), device=dev)], adjoint=True,
              adj_inputs=[adj_x, adj_y], adj_outputs=[ad.array(seed, device=dev)])
    return adj_x.numpy(), adj_y.numpy()


def test_derivatives_at_the_kinks_are_the_documented_ones(backend, kernel_module):
    m = kernel_module(KINKS)
    dev = "cuda" if backend == "cuda" else "cpu"
    out = ad.zeros((ROWS, len(XK)), device=dev)
    ad.launch(m.kinks, len(XK), inputs=[ad.array(XK, device=dev), ad.array(YK, device=dev)],
              outputs=[out])
    out = out.numpy()
    # sign + step + round + rint + trunc + frac; at 0.5: 1 + 0 + 1 + 0 + 0 + 0.5 (round's
    # ties go away from zero, rint's to even); sign(-0.0) is 1
    #   x:                          0   -0   0.5  -2.5   1    3     8   -1.5
    np.testing.assert_array_equal(out[0], [1.0, 1.0, 2.5, -7.5, 4.0, 10.0, 25.0, -5.5])
    np.testing.assert_array_equal(np.signbit(out[1]), [0, 0, 1, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(out[3], [0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0])

    # the jumps of sign, step, round, rint, trunc have derivative 0 (frac's is 1)
    gx, gy = _row_vjp(m.kinks, 0, dev)
    np.testing.assert_array_equal(gx, np.ones(len(XK)))
    np.testing.assert_array_equal(gy, np.zeros(len(XK)))
    # copysign: +1 where the sign bits of x and y agree, -1 where not (at ±0 too); 0 for y
    gx, gy = _row_vjp(m.kinks, 1, dev)
    np.testing.assert_array_equal(gx, [1.0, -1.0, -1.0, 1.0, 1.0, -1.0, 1.0, 1.0])
    np.testing.assert_array_equal(gy, np.zeros(len(XK)))
    # smoothstep(0, 1, x): 6 x (1 - x) inside, 0 at the edges and outside
    gx, _ = _row_vjp(m.kinks, 2, dev)
    np.testing.assert_array_equal(gx, [0.0, 0.0, 1.5, 0.0, 0.0, 0.0, 0.0, 0.0])
    # edges that meet: a step, derivative 0 for every operand
    gx, gy = _row_vjp(m.kinks, 3, dev)
    assert not gx.any() and not gy.any()

    # cbrt: 1 / (3 cbrt(x)^2), +inf at ±0 (seeded with 1; a seed of 0 there gives nan,
    # as sqrt's does at 0: docs/language.md)
    x = ad.array(XK, requires_grad=True, device=dev)
    out = ad.zeros(len(XK), requires_grad=True, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(m.roots, len(XK), inputs=[x], outputs=[out])
    tape.backward(grads={out: np.ones(len(XK))})
    gx = x.grad.numpy()
    assert gx[0] == INF and gx[1] == INF and gx[6] == 1.0 / 12.0
    np.testing.assert_allclose(gx[2:], 1.0 / (3.0 * np.cbrt(XK[2:]) ** 2), rtol=1e-15)


TRUNC = """
    @ad.kernel
    def k(x: ad.array(dtype=float), table: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        out[i] = table[math.trunc(x[i])] * ad.trunc(x[i]) + math.trunc(x[i]) / 4
"""


def test_math_trunc_is_pythons_int_and_ad_trunc_warps_float(backend, kernel_module):
    m = kernel_module(TRUNC)
    forward = ad.source(m.k, "forward")
    assert "rt.to_int(" in forward and "rt.trunc(" in forward
    dev = "cuda" if backend == "cuda" else "cpu"
    x0, t0 = np.array([2.7, 0.2, 1.99]), np.array([10.0, 20.0, 30.0])
    x, table = ad.array(x0, device=dev), ad.array(t0, requires_grad=True, device=dev)
    out = ad.zeros(3, requires_grad=True, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(m.k, 3, inputs=[x, table], outputs=[out])
    np.testing.assert_array_equal(out.numpy(), [30.0 * 2 + 0.5, 0.0, 20.0 + 0.25])
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_array_equal(table.grad.numpy(), [0.0, 1.0, 2.0])    # ad.trunc(x)


# -- the runtime functions at their edges --------------------------------------------

EDGES = [0.0, -0.0, 0.3, -0.3, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.7, -3.7,
         0.49999999999999994, -0.49999999999999994, 2.0 ** 52 - 0.5, 2.0 ** 52 + 1,
         -2.0 ** 52 - 1, 2.0 ** 23 - 0.5, 2.0 ** 23 + 1, 1e30, -1e-30, INF, -INF, NAN]
EDGES32 = [np.float32(v) for v in EDGES] + [np.nextafter(np.float32(0.5), np.float32(0))]


def _half_away(v):
    """``v`` rounded to an integer, ties away from zero, exactly (decimal arithmetic)."""
    if not math.isfinite(v):
        return v
    exact = decimal.Context(prec=400, rounding=decimal.ROUND_HALF_UP)
    r = float(decimal.Decimal(float(v)).quantize(decimal.Decimal(1), context=exact))
    return math.copysign(r, v)


EXPECTED = {
    "round": lambda v: v.dtype.type(_half_away(v)),
    "rint": np.rint,
    "trunc": np.trunc,
    "frac": lambda v: v - np.trunc(v),
    "sign": lambda v: v.dtype.type(-1.0 if v < 0 else 1.0),
    "step": lambda v: v.dtype.type(1.0 if v < 0 else 0.0),
}


def same(x, y):
    """Bit for bit (the sign of zero counts), any nan equal to any nan."""
    x, y = np.float64(x), np.float64(y)
    return bool((math.isnan(x) and math.isnan(y)) or
                (x == y and np.signbit(x) == np.signbit(y)))


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_runtime_functions_at_the_edges(name, dtype):
    """Python's meaning (the Python backend, CUDA's simulator) against NumPy or exact
    rounding, of the operand's type, and numba's spelling bit for bit against it."""
    py, nb = getattr(backend_python, name), getattr(backend_numba, name)
    values = [np.float64(v) for v in EDGES] if dtype == np.float64 else EDGES32
    with np.errstate(all="ignore"):
        for v in values:
            got, want = py(v), EXPECTED[name](v)
            assert isinstance(got, (float, np.floating)) and \
                np.asarray(got).dtype == np.dtype(dtype), f"{name}({v!r}) is {got!r}"
            assert same(got, want), f"{name}({v!r}): {got!r}, expected {want!r}"
            assert same(nb(v), got), f"numba {name}({v!r}): {nb(v)!r} != {got!r}"
    assert py(-3) == (-1 if name == "sign" else 1 if name == "step" else
                      0.0 if name == "frac" else -3.0)


def test_c_math_functions_at_the_edges():
    """Where Python's math raises, C's answer (NumPy's too), on Python and numba."""
    rows = [("log2", [0.0, -0.0, -1.0, -INF, INF, NAN, 8.0], np.log2),
            ("log10", [0.0, -0.0, -1.0, -INF, INF, NAN, 1000.0], np.log10),
            ("cbrt", [0.0, -0.0, -8.0, INF, -INF, NAN], np.cbrt),
            ("erf", [INF, -INF, NAN, 0.0, -0.0], np.vectorize(math.erf)),
            ("erfc", [INF, -INF, NAN], np.vectorize(math.erfc)),
            ("degrees", [1e308, -1e308, INF, NAN, -0.0], np.degrees),
            ("radians", [INF, -INF, NAN, -0.0], np.radians)]
    with np.errstate(all="ignore"):
        for name, values, ref in rows:
            for v in values:
                want = ref(np.float64(v))
                for fn in (getattr(backend_python, name), getattr(backend_numba, name)):
                    assert same(fn(v), want), f"{name}({v!r}): {fn(v)!r}, expected {want!r}"
                    assert same(fn(np.float32(v)), np.float32(want)), f"{name}({v!r}) float32"


def test_lerp_and_smoothstep_values():
    f, nb = backend_python, backend_numba
    assert f.lerp(2.0, 6.0, 0.0) == 2.0 and f.lerp(2.0, 6.0, 1.0) == 6.0
    assert f.lerp(2.0, 6.0, 0.25) == 3.0 and f.lerp(2.0, 6.0, 1.5) == 8.0    # extrapolates
    assert isinstance(f.lerp(*map(np.float32, (1, 2, 0.5))), np.float32)
    rows = [(0.0, 1.0, -0.5, 0.0), (0.0, 1.0, 0.5, 0.5), (0.0, 1.0, 2.0, 1.0),
            (0.0, 2.0, 0.5, 0.15625), (1.0, 0.0, 0.25, 0.84375),       # reversed edges
            (1.0, 1.0, 0.5, 0.0), (1.0, 1.0, 1.0, 1.0), (1.0, 1.0, 2.0, 1.0),  # a step
            (0.0, 1.0, NAN, NAN), (1.0, 1.0, NAN, NAN), (NAN, 1.0, 0.5, NAN),
            (0.0, 1.0, INF, 1.0), (0.0, 1.0, -INF, 0.0)]
    with np.errstate(all="ignore"):
        for e0, e1, x, want in rows:
            for fn in (f.smoothstep, nb.smoothstep):
                assert same(fn(e0, e1, x), want), (fn, e0, e1, x)
            got32 = f.smoothstep(*map(np.float32, (e0, e1, x)))
            assert isinstance(got32, np.float32) and same(got32, np.float32(want))
    assert same(nb.lerp(1.0, 3.0, 0.5), 2.0) and ad.lerp is f.lerp and ad.smoothstep(0, 2, 1) == 0.5


def test_cuda_cbrt_is_within_an_ulp_of_the_exact_cube_root():
    """numba.cuda has no cbrt of its own: its spelling (ieee_compiled.cbrt_device), run
    here under numba's CPU compiler, is within 1 ulp of the exact cube root in float64 (2 in
    float32), and exact at the edges. The reference is the cube root in 40-digit decimals,
    not the C library's ``cbrt``: glibc's is itself up to about 1.5 ulp off (its cube root of
    -1.9825385399294708e49 is 1.46 ulp from the exact one, cbrt_device's 0.54)."""
    dev = numba.njit(error_model="numpy")(ieee_compiled.cbrt_device)
    rng = np.random.default_rng(3)
    ctx = decimal.Context(prec=40)
    third = ctx.divide(decimal.Decimal(1), decimal.Decimal(3))
    for dtype, lo, hi, ulps in ((np.float64, -300, 300, 1), (np.float32, -44, 38, 2)):
        xs = (10.0 ** rng.uniform(lo, hi, 3000) * rng.choice([-1.0, 1.0], 3000)).astype(dtype)
        xs = np.concatenate([xs, np.array([8.0, -27.0, 1.0, 2.0, 1e-40], dtype=dtype)])
        for v in xs:
            got = dtype(dev(v))
            exact = ctx.power(abs(decimal.Decimal(float(v))), third).copy_sign(
                decimal.Decimal(float(v)))
            ulp = decimal.Decimal(float(np.spacing(abs(dtype(float(exact))))))
            assert abs(decimal.Decimal(float(got)) - exact) <= ulps * ulp, (dtype, v, got)
        for v in (0.0, -0.0, INF, -INF, NAN):
            assert same(dev(dtype(v)), np.cbrt(dtype(v)))
    assert dev(np.int64(-8)) == -2.0
    assert dev(np.float64(-27.0)) == -3.0 and dev(np.float32(8.0)) == np.float32(2.0)


def test_star_import_keeps_pythons_builtins():
    """``from adjoint import *`` must not change plain Python: ``round`` and ``pow`` stay
    Python's (``ad.round`` rounds halves away from zero and returns a float)."""
    ns = {}
    exec("from adjoint import *", ns)
    assert "round" not in ns and "pow" not in ns
    exec("r = round(2.5); p = pow(2, 3)", ns)
    assert ns["r"] == 2 and type(ns["r"]) is int and ns["p"] == 8 and type(ns["p"]) is int
    assert ad.round(2.5) == 3.0 and "sin" in ns and "lerp" in ns
