"""IEEE arithmetic in plain Python: what ``rt.div``, ``rt.sin``, ... mean.

Python raises where IEEE arithmetic has an answer (``1.0 / 0.0``, ``math.sqrt(-1.0)``),
so generated code spells those operations as calls of ``rt`` (``x / y`` is
``rt.div(x, y)``; the rule registry, ``adjoint/rules``, says which is which). This
module is their meaning in plain Python (the Python backend, ``ADJOINT_JIT=0``, and
CUDA's simulator); numba and numba.cuda compile ``ieee_compiled.py``, which gives the
same results.

Guarantees: the meaning is numba's with ``error_model="numpy"``, which is also the
GPU's and, where NumPy defines one, NumPy's: no exception, no warning; a division by
±0 is ±inf or nan, float ``//`` and ``%`` follow Python's sign rule in the operands'
precision, ints by 0 give 0, ``**`` is C's ``pow``, ``math.*`` are C's functions (nan
outside the domain, ±inf at a pole or on overflow), and ``floor``, ``ceil`` and
``int()`` of nan, ±inf or a float outside the int64 range give ``-2**63``. Warp's
scalar builtins (``ad.sign``, ``step``, ``lerp``, ``smoothstep``, ``round``, ``rint``,
``trunc``, ``frac``, ...) mean what Warp's do. Each edge case is in the table of
docs/semantics.md ("Floating point") and docs/language.md ("Warp's scalar builtins").
A float32 operand stays float32 (results that overflow float32 are inf in both
backends); the Python backend computes a float32 ``math`` function in float64 and
rounds, where numba calls the float32 C function: they can differ in the last bit
(never at the edges, whose results are exact).

Every such function is registered here once (``BUILTINS``, builtin_table.py): its
plain-Python meaning, its spelling for numba (``ieee_compiled.py``, or ``math.<name>``)
and what a user calls in a kernel (``math.sin``, exported as ``ad.sin``). The backends,
the ``ad.*`` exports (runtime/builtins.py) and the CUDA device functions iterate
``BUILTINS``: a new math function is its rule (adjoint/rules/mathfns.py) plus one line
here. tests/rules/test_rule_table.py checks that the two sides match.
"""
import builtins
import math

import numpy as np

from . import ieee_compiled
from .builtin_table import AD, builtin
from .builtin_table import register as _register

INF, NAN = math.inf, math.nan
INT64_MIN = -2 ** 63
_INT_RANGE = 2.0 ** 63


def math_function(fn, edge):
    """Register ``rt.<name>`` for the unary ``math`` function ``fn``: ``fn`` with
    ``edge(x)`` where Python raises, in plain Python; ``fn`` itself under numba (C's
    function, IEEE already); ``ad.<name>`` is ``fn``."""
    def call(x):
        try:
            r = fn(x)
        except (ValueError, OverflowError):
            r = edge(float(x))
        return np.float32(r) if isinstance(x, np.float32) else r
    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = f"``math.{fn.__name__}(x)``, IEEE at the edges."
    return _register(fn.__name__, call, _compiled_call(fn), fn)


def _compiled_call(fn):
    """``fn(x)`` as a Python function numba can compile (as njit or a CUDA device function;
    named as ``fn``, so each has its own entry in numba's cache)."""
    def call(x):
        return fn(x)
    call.__name__ = call.__qualname__ = fn.__name__
    return call


# -- operators ------------------------------------------------------------------

@builtin(ieee_compiled.div)
def div(x, y):
    """``x / y``."""
    try:
        return x / y     # numpy scalars divide by 0 as IEEE says (warnings are off in launches)
    except ZeroDivisionError:
        if x != x or x == 0:
            return NAN
        return math.copysign(INF, x) * math.copysign(1.0, y)


@builtin(ieee_compiled.floordiv)
def floordiv(x, y):
    """``x // y``."""
    if _is_int(x) and _is_int(y):
        return _int_divmod(int(x), int(y))[0]
    return _float_divmod(x, y)[0]


@builtin(ieee_compiled.mod)
def mod(x, y):
    """``x % y``."""
    if _is_int(x) and _is_int(y):
        return _int_divmod(int(x), int(y))[1]
    return _float_divmod(x, y)[1]


@builtin(ieee_compiled.power)
def power(x, y):
    """``x ** y``: an int for two ints, else C's ``pow``."""
    if _is_int(x) and _is_int(y):
        return _int_power(int(x), int(y))
    return pow(x, y)


# -- math functions -------------------------------------------------------------

@builtin(ieee_compiled.pow, user=math.pow)
def pow(x, y):  # noqa: A001 - the name generated code calls (rt.pow)
    """``math.pow(x, y)``: C's ``pow``, a float."""
    try:
        r = math.pow(x, y)
    except (ValueError, OverflowError):
        r = _pow_edge(float(x), float(y))
    return _typed(r, x, y)


def _nan(x):
    return NAN


sin = math_function(math.sin, _nan)                 # sin, cos, tan: nan at ±inf
cos = math_function(math.cos, _nan)
tan = math_function(math.tan, _nan)
asin = math_function(math.asin, _nan)               # asin, acos: nan outside [-1, 1]
acos = math_function(math.acos, _nan)
atan = math_function(math.atan, _nan)
sinh = math_function(math.sinh, lambda x: math.copysign(INF, x))
cosh = math_function(math.cosh, lambda x: INF)
tanh = math_function(math.tanh, _nan)
exp = math_function(math.exp, lambda x: INF)
expm1 = math_function(math.expm1, lambda x: INF)
log = math_function(math.log, lambda x: -INF if x == 0 else NAN)
log1p = math_function(math.log1p, lambda x: -INF if x == -1 else NAN)
sqrt = math_function(math.sqrt, _nan)
log2 = math_function(math.log2, lambda x: -INF if x == 0 else NAN)
log10 = math_function(math.log10, lambda x: -INF if x == 0 else NAN)
erf = math_function(math.erf, _nan)                 # erf, erfc, degrees, radians never raise
erfc = math_function(math.erfc, _nan)
degrees = math_function(math.degrees, lambda x: math.copysign(INF, x))
radians = math_function(math.radians, lambda x: math.copysign(INF, x))
asinh = math_function(math.asinh, lambda x: x)      # never raises (asinh(±inf) is ±inf)
acosh = math_function(math.acosh, lambda x: INF if x == INF else NAN)    # nan below 1
atanh = math_function(math.atanh, lambda x: math.copysign(INF, x) if abs(x) == 1 else NAN)


@builtin(ieee_compiled.hypot, user=math.hypot)
def hypot(x, y):
    """``math.hypot(x, y)``: ``sqrt(x*x + y*y)`` without overflow or underflow in
    between (C's ``hypot``: inf if either is ±inf, even with a nan)."""
    try:
        r = math.hypot(x, y)
    except OverflowError:
        r = INF
    return _typed(r, x, y)


@builtin(ieee_compiled.fmod, user=math.fmod, device=ieee_compiled.fmod_device)
def fmod(x, y):
    """``math.fmod(x, y)``: C's ``fmod``, ``x - trunc(x / y) * y`` computed exactly, with
    the sign of ``x`` (Python's ``%`` has the sign of ``y``); nan for ``y = 0`` or
    ``x = ±inf``."""
    try:
        r = math.fmod(x, y)
    except ValueError:
        r = NAN
    return _typed(r, x, y)


def _bool_test(fn):
    """``math.isnan``, ``isinf``, ``isfinite``: a bool, for an int too (numba's)."""
    def call(x):
        return bool(fn(x))
    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = f"``math.{fn.__name__}(x)``: a bool."
    return _register(fn.__name__, call, _compiled_call(fn), fn)


isnan = _bool_test(math.isnan)
isinf = _bool_test(math.isinf)
isfinite = _bool_test(math.isfinite)


@builtin(ieee_compiled.cbrt, user=math.cbrt, device=ieee_compiled.cbrt_device)
def cbrt(x):
    """``math.cbrt(x)``: C's ``cbrt`` (numba.cuda: ``|x| ** (1/3)`` refined, see
    ieee_compiled.cbrt_device)."""
    return _typed(math.cbrt(x), x)


@builtin(ieee_compiled.copysign, user=math.copysign)
def copysign(x, y):
    """``math.copysign(x, y)``: the magnitude of ``x``, the sign (bit) of ``y``."""
    return _typed(math.copysign(x, y), x, y)


@builtin(ieee_compiled.atan2, user=math.atan2)
def atan2(y, x):
    """``math.atan2(y, x)`` (it never raises: C's special values)."""
    return _typed(math.atan2(y, x), y, x)


@builtin(ieee_compiled.floor, user=math.floor)
def floor(x):
    """``math.floor(x)``: an int; ``-2**63`` for nan, ±inf and floats out of int64 range."""
    if _is_int(x):
        return int(x)
    return math.floor(x) if -_INT_RANGE <= x < _INT_RANGE else INT64_MIN


@builtin(ieee_compiled.ceil, user=math.ceil)
def ceil(x):
    """``math.ceil(x)``, as ``floor``."""
    if _is_int(x):
        return int(x)
    return math.ceil(x) if -_INT_RANGE <= x < _INT_RANGE else INT64_MIN


@builtin(ieee_compiled.to_float, device=ieee_compiled.to_float_device)
def to_float(x):
    """``float(x)``: an int as a float, a bool as 1.0 or 0.0."""
    return float(x)


@builtin(ieee_compiled.to_int)
def to_int(x):
    """``int(x)``: truncation; ``-2**63`` for nan, ±inf and floats out of int64 range."""
    if _is_int(x):
        return int(x)
    return int(x) if -_INT_RANGE <= x < _INT_RANGE else INT64_MIN


# -- piecewise ------------------------------------------------------------------

def clamp(x, lo, hi):
    """``ad.clamp(x, lo, hi)``: ``lo`` if ``x < lo``, else ``hi`` if ``x > hi``, else ``x``
    (also when ``lo > hi``). Comparisons only: numba compiles this very function."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


_register("clamp", clamp, clamp, clamp)


# -- Warp's scalar builtins: ad.<name> (see the module docstring) -----------------------

@builtin(ieee_compiled.sign, user=AD)
def sign(x):
    """``ad.sign(x)``: -1 if ``x < 0``, else 1 (also at -0.0 and for nan)."""
    if _is_int(x):
        return -1 if x < 0 else 1
    return _typed(-1.0 if x < 0 else 1.0, x)


@builtin(ieee_compiled.step, user=AD)
def step(x):
    """``ad.step(x)``: 1 if ``x < 0``, else 0 (Warp's: the step *down* at 0)."""
    if _is_int(x):
        return 1 if x < 0 else 0
    return _typed(1.0 if x < 0 else 0.0, x)


@builtin(ieee_compiled.lerp, user=AD)
def lerp(a, b, t):
    """``ad.lerp(a, b, t)``: ``a * (1 - t) + b * t`` (``a`` at ``t = 0``, ``b`` at 1)."""
    one = _typed(1.0, a, b, t)
    return a * (one - t) + b * t


@builtin(ieee_compiled.smoothstep, user=AD)
def smoothstep(e0, e1, x):
    """``ad.smoothstep(e0, e1, x)``: 0 below ``e0``, 1 above ``e1``, the cubic
    ``3t^2 - 2t^3`` of ``t = (x - e0) / (e1 - e0)`` between; a step where ``e0 == e1``."""
    zero, one = _typed(0.0, e0, e1, x), _typed(1.0, e0, e1, x)
    w = e1 - e0
    if w == 0:
        if x < e0:
            return zero
        if x >= e0:
            return one
        return x + zero                         # nan
    t = (x - e0) / w
    if t <= 0:
        return zero
    if t >= 1:
        return one
    return t * t * (_typed(3.0, e0, e1, x) - _typed(2.0, e0, e1, x) * t)


def _integral(x, fn):
    """``fn(|x|)`` (an int: ``|x|`` rounded) as a float of ``x``'s type with the sign of
    ``x``; an int as a float; ±inf and nan as they are."""
    if _is_int(x):
        return float(x)
    if not math.isfinite(x):
        return x
    return _typed(math.copysign(float(fn(abs(float(x)))), x), x)


def _half_up(a):
    t = math.trunc(a)
    return t + 1 if a - t >= 0.5 else t


@builtin(ieee_compiled.round, user=AD)
def round(x):  # noqa: A001 - the name generated code calls (rt.round)
    """``ad.round(x)``: the nearest integer, ties away from zero (C's ``round``), a float."""
    return _integral(x, _half_up)


@builtin(ieee_compiled.rint, user=AD)
def rint(x):
    """``ad.rint(x)``: the nearest integer, ties to even (C's ``rint``), a float."""
    return _integral(x, builtins.round)


@builtin(ieee_compiled.trunc, user=AD)
def trunc(x):
    """``ad.trunc(x)``: ``x`` rounded towards zero, a float (``math.trunc`` is Python's:
    an int, like ``int(x)``)."""
    return _integral(x, math.trunc)


@builtin(ieee_compiled.frac, user=AD)
def frac(x):
    """``ad.frac(x)``: ``x - trunc(x)``, the fractional part with the sign of ``x``."""
    if _is_int(x):
        return 0.0
    return x - trunc(x)


# -- helpers --------------------------------------------------------------------

def _is_int(v):
    return isinstance(v, (int, np.integer))


def _typed(r, *operands):
    """``r`` as float32 when every operand is a float32 (numba's typing), else as it is."""
    return np.float32(r) if all(isinstance(v, np.float32) for v in operands) else r


def _int_divmod(a, b):
    if b == 0 or (a == INT64_MIN and b == -1):
        return 0, 0
    return a // b, a % b


def _float_divmod(x, y):
    """``(x // y, x % y)`` by numba's (and CPython's) algorithm, in the operands' precision:
    float32 when both are float32, else float64."""
    t = np.float32 if isinstance(x, np.float32) and isinstance(y, np.float32) else float
    x, y = t(x), t(y)
    if y == 0:
        return t(div(float(x), float(y))), t(NAN)
    m = t(NAN) if math.isinf(x) else t(math.fmod(x, y))   # fmod is exact
    q = (x - m) / y
    if m != 0:                                  # (true for nan, as in numba)
        if (y < 0) != (m < 0):
            m += y
            q -= 1
    else:
        m = t(-0.0) if y < 0 else t(0.0)
    if q != 0 and q == q:
        fq = t(math.floor(q)) if not math.isinf(q) else q
        if q - fq > 0.5:
            fq += 1
    else:
        q = q * q
        fq = q * x / y                          # a zero with the sign of x / y
    return fq, m


def _int_power(a, b):
    """``a ** b`` for int64s: wraps around on overflow, as numba's does."""
    if b >= 0:
        r = builtins.pow(a, b, 1 << 64)
        return r - (1 << 64) if r >= 1 << 63 else r
    if a == 1:
        return 1
    if a == -1:
        return 1 if b % 2 == 0 else -1
    return 0


def _pow_edge(x, y):
    """C's ``pow(x, y)`` where Python's ``math.pow`` raises: a zero to a negative power,
    a negative number to a fractional one, and overflow."""
    odd = math.isfinite(y) and abs(math.fmod(y, 2.0)) == 1.0
    if x == 0:
        return math.copysign(INF, x) if odd else INF
    if x < 0 and math.isfinite(y) and y != math.floor(y):
        return NAN
    return -INF if x < 0 and odd else INF
