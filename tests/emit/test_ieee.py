"""Same arithmetic everywhere: IEEE results (inf, nan), never an exception or a warning.

The table below holds, per operation, inputs at and beyond the edges of its
domain: division by ±0, 0 ** -1, a negative base to a fractional power,
overflow, asin(1.5), log(0), sin(inf), floor(nan), int division by zero, and
the adjoint rules' own divisions there (the backward of sqrt, log, asin, acos
at the edge). Each row becomes one line of one kernel; the kernel runs forward
and backward on the Python backend, numba and the CUDA simulator, in float64
and in float32, and the outputs and the gradients must agree bit for bit (any
nan equals any nan; -0.0 differs from 0.0). Where NumPy defines the operation,
the outputs must also equal NumPy's. runtime/ieee.py states the rules.
"""
import inspect
import itertools
import math
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import adjoint as ad
from adjoint.rules import RULES
from adjoint.runtime import backend_numba, backend_python, ieee, simd
from adjoint.runtime.all_builtins import BUILTINS

INF, NAN = math.inf, math.nan
BIG = 9.3e18      # just outside int64

# (expression of a and b as a user writes it, [(a, b), ...], numpy reference or None)
TABLE = [
    ("a / b", [(1, 0), (-1, 0), (0, 0), (1, -0.0), (-0.0, -0.0), (INF, INF), (NAN, 0),
               (INF, 0), (1e308, 1e-10), (3, 2)], np.true_divide),
    ("a / 2.0", [(INF, 0), (NAN, 0), (-0.0, 0), (1e308, 0), (3, 0)], lambda a, b: a / 2),
    ("a // b", [(1, 0), (-1, 0), (0, 0), (1, -0.0), (INF, 2), (-5, INF), (5, INF),
                (7.5, -2), (-0.0, 3), (0, -3), (1e308, 1e-10)], np.floor_divide),
    ("a % b", [(1, 0), (0, 0), (INF, 0), (5, INF), (-5, INF), (INF, 2), (-0.0, 3), (0, -3),
               (7.5, -2), (-7.5, 2), (NAN, 2)], np.remainder),
    ("a % 2.0", [(INF, 0), (-0.0, 0), (-7.5, 0), (NAN, 0)], lambda a, b: np.remainder(a, 2)),
    ("a ** b", [(0, -1), (-0.0, -1), (-0.0, -2), (-8, 1 / 3), (10, 400), (-10, 401),
                (0, 0), (NAN, 0), (1, NAN), (0, 0.5), (-1, INF), (0, -INF), (2, -1)],
     np.power),
    ("a ** 2", [(0, 0), (1e200, 0), (-1e200, 0), (NAN, 0), (-INF, 0), (1.7, 0)],
     lambda a, b: np.power(a, 2)),
    ("a ** 3", [(0, 0), (-0.0, 0), (1e200, 0), (-1e200, 0), (-INF, 0)],
     lambda a, b: np.power(a, 3)),
    ("a ** -1", [(0, 0), (-0.0, 0), (INF, 0), (4, 0)], lambda a, b: np.power(a, -1.0)),
    ("math.pow(a, b)", [(0, -1), (-0.0, -1), (-8, 1 / 3), (10, 400), (-10, 401), (0, 0.5)],
     np.power),
    ("math.sqrt(a)", [(0, 0), (-0.0, 0), (-1, 0), (-INF, 0), (INF, 0), (NAN, 0), (4, 0)],
     lambda a, b: np.sqrt(a)),
    ("math.log(a)", [(0, 0), (-0.0, 0), (-1, 0), (-INF, 0), (INF, 0), (NAN, 0), (1, 0)],
     lambda a, b: np.log(a)),
    ("math.log1p(a)", [(-1, 0), (-2, 0), (-INF, 0), (INF, 0), (0, 0), (-0.0, 0)],
     lambda a, b: np.log1p(a)),
    ("math.exp(a)", [(1000, 0), (-1000, 0), (INF, 0), (-INF, 0), (NAN, 0), (0, 0)],
     lambda a, b: np.exp(a)),
    ("math.asin(a)", [(1.5, 0), (-1.5, 0), (1, 0), (-1, 0), (INF, 0), (NAN, 0), (0, 0)],
     lambda a, b: np.arcsin(a)),
    ("math.acos(a)", [(1.5, 0), (-1.5, 0), (1, 0), (-1, 0), (INF, 0), (NAN, 0)],
     lambda a, b: np.arccos(a)),
    ("math.atan(a)", [(INF, 0), (-INF, 0), (NAN, 0), (0, 0)], lambda a, b: np.arctan(a)),
    ("math.atan2(a, b)", [(0, 0), (-0.0, 0), (0, -0.0), (-0.0, -0.0), (INF, INF),
                          (-INF, -INF), (NAN, 1), (1, 0)], np.arctan2),
    ("math.sin(a)", [(INF, 0), (-INF, 0), (NAN, 0), (0, 0), (-0.0, 0)],
     lambda a, b: np.sin(a)),
    ("math.cos(a)", [(INF, 0), (-INF, 0), (NAN, 0), (0, 0)], lambda a, b: np.cos(a)),
    ("math.tan(a)", [(INF, 0), (-INF, 0), (NAN, 0), (-0.0, 0)], lambda a, b: np.tan(a)),
    ("math.sinh(a)", [(1000, 0), (-1000, 0), (INF, 0), (NAN, 0)], lambda a, b: np.sinh(a)),
    ("math.cosh(a)", [(1000, 0), (-1000, 0), (-INF, 0), (NAN, 0)], lambda a, b: np.cosh(a)),
    ("math.tanh(a)", [(INF, 0), (-INF, 0), (NAN, 0), (1000, 0)], lambda a, b: np.tanh(a)),
    # an int from nan, ±inf or a float outside int64: -2**63 (see runtime/ieee.py)
    ("float(math.floor(a))", [(NAN, 0), (INF, 0), (-INF, 0), (BIG, 0), (-BIG, 0), (-2.5, 0),
                              (-0.0, 0)], None),
    ("float(math.ceil(a))", [(NAN, 0), (INF, 0), (-INF, 0), (BIG, 0), (-2.5, 0)], None),
    ("float(int(a))", [(NAN, 0), (INF, 0), (-INF, 0), (BIG, 0), (-BIG, 0), (-2.5, 0)], None),
    ("a * b", [(1e200, 1e200), (INF, 0), (-0.0, 0)], np.multiply),
    ("a - b", [(INF, INF), (-0.0, 0)], np.subtract),
]
COLUMNS = max(len(pairs) for _, pairs, _ in TABLE)

# int operands: (expression, [(n, m)]); no numpy reference (NumPy raises or warns)
INT_TABLE = [
    ("float(n // m)", [(1, 0), (-1, 0), (0, 0), (-2 ** 63, -1), (7, -2), (-7, 2)]),
    ("float(n % m)", [(1, 0), (-1, 0), (0, 0), (-2 ** 63, -1), (7, -2), (-7, 2)]),
    ("n / m", [(1, 0), (-1, 0), (0, 0), (7, 2)]),
    ("float(n ** m)", [(2, -1), (0, -1), (1, -5), (-1, -3), (-1, -4), (-2, -2), (3, 40),
                       (2, 63), (0, 0)]),
    ("math.sqrt(n)", [(-4, 0), (0, 0)]),
    ("float(math.floor(n))", [(2 ** 63 - 1, 0), (-2 ** 63, 0)]),
]
EXPECTED_INT = {   # the rules of runtime/ieee.py, written out
    "float(n // m)": [0, 0, 0, 0, -4, -4],
    "float(n % m)": [0, 0, 0, 0, -1, 1],
    "n / m": [INF, -INF, NAN, 3.5],
    "float(n ** m)": [0, 0, 1, -1, 1, 0, float(3 ** 40 - 2 ** 64), float(-2 ** 63), 1],
    "math.sqrt(n)": [NAN, 0.0],
    "float(math.floor(n))": [float(2 ** 63 - 1), float(-2 ** 63)],
}


def _source(dtype):
    T = "ad.float32" if dtype == np.float32 else "float"
    lines = ["@ad.kernel",
             f"def edges(a: ad.array(dtype={T}, ndim=2), b: ad.array(dtype={T}, ndim=2),",
             f"          out: ad.array(dtype={T}, ndim=2)):",
             "    i = ad.tid()"]
    for r, (expr, _, _) in enumerate(TABLE):
        body = re.sub(r"\bb\b", f"B{r}", re.sub(r"\ba\b", f"A{r}", expr))
        lines += [f"    A{r} = a[{r}, i]", f"    B{r} = b[{r}, i]", f"    out[{r}, i] = {body}"]
    lines += ["", "", "@ad.kernel",
              "def int_edges(n: ad.array(dtype=ad.int64, ndim=2),",
              "              m: ad.array(dtype=ad.int64, ndim=2),",
              "              out: ad.array(dtype=float, ndim=2)):",
              "    i = ad.tid()"]
    for r, (expr, _) in enumerate(INT_TABLE):
        body = re.sub(r"\bm\b", f"M{r}", re.sub(r"\bn\b", f"N{r}", expr))
        lines += [f"    N{r} = n[{r}, i]", f"    M{r} = m[{r}, i]", f"    out[{r}, i] = {body}"]
    return "\n".join(lines) + "\n"


def _inputs(dtype):
    a = np.ones((len(TABLE), COLUMNS))
    b = np.ones((len(TABLE), COLUMNS))
    for r, (_, pairs, _) in enumerate(TABLE):
        for c in range(COLUMNS):
            a[r, c], b[r, c] = pairs[c % len(pairs)]
    with np.errstate(over="ignore"):      # 1e308 is inf in float32
        return a.astype(dtype), b.astype(dtype)


def _int_inputs():
    cols = max(len(p) for _, p in INT_TABLE)
    n = np.zeros((len(INT_TABLE), cols), np.int64)
    m = np.ones((len(INT_TABLE), cols), np.int64)
    for r, (_, pairs) in enumerate(INT_TABLE):
        for c in range(cols):
            n[r, c], m[r, c] = pairs[c % len(pairs)]
    return n, m


_kernels = {}


def _kernel_module(kernel_module, dtype):
    key = np.dtype(dtype).name
    if key not in _kernels:
        _kernels[key] = kernel_module(_source(dtype))
    return _kernels[key]


def _run(mod, backend, dtype):
    """(out, a.grad, b.grad, int out) of the edge kernels on ``backend``, with every
    RuntimeWarning an error."""
    a0, b0 = _inputs(dtype)
    with ad.backend_scope(backend), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        a = ad.array(a0, requires_grad=True)
        b = ad.array(b0, requires_grad=True)
        out = ad.zeros(a0.shape, dtype=dtype, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(mod.edges, COLUMNS, inputs=[a, b], outputs=[out])
        tape.backward(grads={out: np.ones(a0.shape, dtype)})
        n0, m0 = _int_inputs()
        iout = ad.zeros(n0.shape)
        ad.launch(mod.int_edges, n0.shape[1], inputs=[ad.array(n0), ad.array(m0)],
                  outputs=[iout])
        return out.numpy(), a.grad.numpy(), b.grad.numpy(), iout.numpy()


def same(x, y):
    """Bit for bit, except that any nan equals any nan."""
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return np.zeros(x.shape, bool)
    bits = x.view(np.uint64 if x.itemsize == 8 else np.uint32)
    ybits = y.view(bits.dtype)
    return (np.isnan(x) & np.isnan(y)) | (bits == ybits)


def _report(label, x, y, ok):
    bad = np.argwhere(~ok)
    rows = sorted({int(r) for r, _ in bad})
    lines = [f"{label}: {TABLE[r][0] if r < len(TABLE) else r}: "
             f"{[(float(x[r, c]), float(y[r, c])) for rr, c in bad if rr == r][:4]}"
             for r in rows]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return {}


def _results(results, kernel_module, dtype):
    key = np.dtype(dtype).name
    if key not in results:
        mod = _kernel_module(kernel_module, dtype)
        results[key] = {be: _run(mod, be, dtype) for be in ("python", "numba", "cuda")}
    return results[key]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_every_backend_gives_the_same_bits(results, kernel_module, dtype):
    """Outputs and gradients at the edges: python == numba == cuda simulator, bit for bit,
    with no exception and no RuntimeWarning (forward and backward)."""
    res = _results(results, kernel_module, dtype)
    for other in ("numba", "cuda"):
        for what, x, y in zip(("output", "a.grad", "b.grad", "int output"),
                              res["python"], res[other]):
            ok = same(x, y)
            assert ok.all(), _report(f"python vs {other}, {what}", x, y, ok)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_outputs_match_numpy(results, kernel_module, dtype):
    """Where NumPy defines the operation, its answer (its float ufuncs follow IEEE too)."""
    out = _results(results, kernel_module, dtype)["python"][0]
    a, b = _inputs(dtype)
    for r, (expr, pairs, ref) in enumerate(TABLE):
        if ref is None:
            continue
        with np.errstate(all="ignore"):
            want = np.asarray(ref(a[r], b[r]), dtype=dtype)
        ok = same(out[r], want)
        assert ok.all(), f"{expr} at {[(a[r, c], b[r, c]) for c in np.flatnonzero(~ok)]}: " \
            f"got {out[r][~ok]}, numpy {want[~ok]}"


def test_edge_values_are_the_documented_ones(results, kernel_module):
    """A few answers written out, independently of any backend and of NumPy."""
    out, ga, gb, iout = _results(results, kernel_module, np.float64)["python"]
    row = {expr: r for r, (expr, _, _) in enumerate(TABLE)}
    assert list(out[row["a / b"], :4]) == [INF, -INF, pytest.approx(NAN, nan_ok=True), -INF]
    assert list(out[row["a ** b"], :3]) == [INF, -INF, INF] and np.isnan(out[row["a ** b"], 3])
    assert math.isnan(out[row["math.asin(a)"], 0]) and math.isnan(out[row["math.sin(a)"], 0])
    assert out[row["math.log(a)"], 0] == -INF and math.isnan(out[row["math.log(a)"], 2])
    assert out[row["math.exp(a)"], 0] == INF
    assert list(out[row["float(math.floor(a))"], :5]) == [float(-2 ** 63)] * 5
    # the backward of sqrt and log at 0, of asin and acos at ±1: 1/0 = inf, not an exception
    assert ga[row["math.sqrt(a)"], 0] == INF and ga[row["math.log(a)"], 0] == INF
    assert ga[row["math.asin(a)"], 2] == INF and ga[row["math.acos(a)"], 2] == -INF
    assert ga[row["a / b"], 0] == INF and gb[row["a / b"], 0] == -INF    # d(1/b)/db at b = 0
    for r, (expr, _) in enumerate(INT_TABLE):
        want = np.array(EXPECTED_INT[expr], dtype=np.float64)
        got = iout[r, :len(want)]
        assert same(got, want).all(), f"{expr}: {got} != {want}"


# -- the runtime functions themselves ---------------------------------------------

INT_ONLY = {r.runtime for r in RULES.values() if r.integer}
F64 = [0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.0, 3.0, 1 / 3, 7.5, -7.5, 400.0, 401.0, 1000.0,
       -1000.0, 1e308, 1e-310, INF, -INF, NAN, BIG, -BIG]
I64 = [0, 1, -1, 2, -3, 7, 2 ** 62, -2 ** 63, 2 ** 63 - 1]


def arity(fn):
    return len(inspect.signature(fn).parameters)


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_python_and_numba_functions_agree(name):
    """ieee.py (Python backend, simulator) against ieee_compiled.py under numba, over
    float64 and int64 edges: bit for bit, never an exception. (Launches run them with
    numpy's warnings off: the kernel table above checks that nothing warns.) A math
    function numba computes with glibc's vector variant (runtime/simd.py) agrees bit for
    bit where the argument or the result is zero, infinite or nan, and within glibc's
    4 ulp elsewhere; bit for bit everywhere under ``ADJOINT_VECTOR_MATH=0`` (the next
    test)."""
    py, nb = getattr(backend_python, name), getattr(backend_numba, name)
    n = arity(BUILTINS[name].compiled)
    vector = name in simd.FUNCTIONS and name in simd.VARIANTS
    # (a bit operation takes ints alone: pass types refuses a float operand)
    kinds = ([np.int64(v) for v in I64],) if name in INT_ONLY else \
        (F64, [np.int64(v) for v in I64], F64[:6] + I64[:4])
    cases = [args for vals in kinds for args in (itertools.product(vals, repeat=n))]
    with np.errstate(all="ignore"):
        for args in cases:
            if name == "power" and all(isinstance(v, np.integer) for v in args) and args[1] > 64:
                args = (args[0], np.int64(63))
            want = nb(*args)
            got = py(*args)
            if vector and all(math.isfinite(v) and v != 0 for v in (float(args[0]), got)):
                assert abs(got - want) <= 4 * np.spacing(abs(got)), f"{name}{args}: {got!r}, {want!r}"
                continue
            assert same(np.float64(got), np.float64(want)), f"{name}{args}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_int32_operands_give_what_int64_ones_give(name):
    """An int32 (an int32 array's element; Warp's ``int``) is an int to numba's spelling as
    an int64 is: numba's ``isinstance(x, int)`` holds for an int64 alone, so
    ``rt.power(int32, int32)`` and ``rt.sign(int32)`` were floats. Each builtin gives on
    int32 operands what it gives on the same int64 ones, an int where that is one."""
    nb = getattr(backend_numba, name)
    n = arity(BUILTINS[name].compiled)
    with np.errstate(all="ignore"):
        for args in itertools.product((-7, -1, 0, 2, 3), repeat=n):
            want = nb(*[np.int64(v) for v in args])
            got = nb(*[np.int32(v) for v in args])
            assert isinstance(got, (int, np.integer)) == isinstance(want, (int, np.integer)), \
                f"{name}{args}: {got!r} (int32), {want!r} (int64)"
            assert same(np.float64(got), np.float64(want)), f"{name}{args}: {got!r} != {want!r}"


def test_without_vector_math_python_and_numba_functions_agree_bit_for_bit():
    """The math functions of runtime/simd.py with ``ADJOINT_VECTOR_MATH=0``: numba's
    C functions, bit for bit the Python backend's over the edges above."""
    if not simd.VARIANTS:
        pytest.skip("no vector math here: the test above compares them bit for bit")
    names = " or ".join(f"[{name}]" for name in simd.FUNCTIONS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{__file__}::test_python_and_numba_functions_agree", "-k", names],
                          env={**os.environ, "ADJOINT_VECTOR_MATH": "0"}, capture_output=True,
                          text=True)
    assert done.returncode == 0 and f"{len(simd.FUNCTIONS)} passed" in done.stdout, done.stdout


def test_every_runtime_name_exists_on_every_backend():
    """The rule registry's runtime column is the one table: each name is an rt function of
    the Python, numba and CUDA backends."""
    from adjoint.runtime import backend_cuda
    names = {r.runtime for r in RULES.values() if r.runtime}
    assert names == set(BUILTINS)
    for name in names:
        for be in (backend_python, backend_numba, backend_cuda):
            assert callable(getattr(be, name)), (be.NAME, name)


def test_a_division_by_a_positive_literal_stays_an_operator(kernel_module):
    m = kernel_module('''
        @ad.kernel
        def k(x: ad.array(dtype=float), n: ad.array(dtype=ad.int64), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = x[i] / 2.0 + x[i] / x[i] + float(n[i] % 2) + float(n[i] // n[i]) + x[i] ** 2
        ''')
    text = ad.source(m.k, "forward")
    assert "/ 2.0" in text and "% 2" in text
    assert "rt.div(" in text and "rt.floordiv(" in text and "rt.power(" in text
    assert "math." not in ad.source(m.k, "backward")


# -- verify_fp ------------------------------------------------------------------------

VERIFY = '''
@ad.kernel
def recip(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = 1.0 / x[i]


@ad.kernel
def root(x: ad.array(dtype=float, ndim=2), y: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    y[i, j] = math.sqrt(x[i, j])
'''


@pytest.fixture
def verify_fp():
    old = ad.config.verify_fp
    ad.config.verify_fp = True
    yield
    ad.config.verify_fp = old


def test_verify_fp_names_the_kernel_launch_array_and_element(backend, kernel_module, verify_fp):
    m = kernel_module(VERIFY)
    x = ad.array(np.array([1.0, 2.0, 0.0, 4.0, 0.0]))
    y = ad.zeros(5)
    with pytest.raises(ad.NonFiniteError) as e:
        ad.launch(m.recip, 5, inputs=[x], outputs=[y])
    msg = str(e.value)
    path = m.__file__
    line = open(path).read().splitlines().index("def recip(x: ad.array(dtype=float), "
                                                 "y: ad.array(dtype=float)):") + 1
    assert f"kernel 'recip' ({os.path.basename(path)}:{line})" in msg, msg
    assert "forward" in msg and "'y'" in msg and "y[2] = inf" in msg and "first of 2" in msg, msg
    assert isinstance(e.value, FloatingPointError)


def test_verify_fp_checks_gradients_after_the_backward(backend, kernel_module, verify_fp):
    m = kernel_module(VERIFY)
    x0 = np.ones((2, 3))
    x0[1, 2] = 0.0                       # sqrt is finite at 0, its derivative is not
    x = ad.array(x0, requires_grad=True)
    y = ad.zeros((2, 3), requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.root, (2, 3), inputs=[x], outputs=[y])
    with pytest.raises(ad.NonFiniteError) as e:
        tape.backward(grads={y: np.ones((2, 3))})
    msg = str(e.value)
    assert "kernel 'root'" in msg and "backward" in msg and "adj_x[1, 2] = inf" in msg, msg
    # the low-level adjoint launch is checked too
    with pytest.raises(ad.NonFiniteError, match=r"backward .*adj_x\[1, 2\] = inf"):
        ad.launch(m.root, (2, 3), inputs=[x], outputs=[y], adjoint=True,
                  adj_inputs=[ad.zeros((2, 3))], adj_outputs=[ad.ones((2, 3))])


def test_verify_fp_is_off_by_default_and_read_from_the_environment(kernel_module):
    m = kernel_module(VERIFY)
    assert ad.config.verify_fp is False
    y = ad.zeros(2)
    ad.launch(m.recip, 2, inputs=[ad.array(np.zeros(2))], outputs=[y])   # no error
    assert list(y.numpy()) == [INF, INF]
    code = "import adjoint as ad; print(ad.config.verify_fp)"
    for value, want in (("1", "True"), ("0", "False")):
        env = {**os.environ, "ADJOINT_VERIFY_FP": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.stdout.strip() == want, out.stderr
