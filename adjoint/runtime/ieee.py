"""IEEE arithmetic in plain Python: what ``rt.div``, ``rt.sin``, ... mean.

Python raises where IEEE arithmetic has an answer: ``1.0 / 0.0`` is a
``ZeroDivisionError``, ``math.sqrt(-1.0)`` and ``math.sin(math.inf)`` are
``ValueError``s, ``math.exp(1000.0)`` is an ``OverflowError`` and
``(-8.0) ** (1 / 3)`` is a complex number. Generated code therefore spells
those operations as calls of the backend it binds to ``rt``: ``x / y`` is
``rt.div(x, y)``, ``math.sin(x)`` is ``rt.sin(x)`` (the rule registry,
``adjoint/rules``, says which operation is which function). This module is
their meaning, in plain Python: the Python backend (``ADJOINT_JIT=0``) and
CUDA's simulator call these functions; numba and numba.cuda compile the
spellings in ``ieee_compiled.py``, which give the same results.

The meaning is numba's with ``error_model="numpy"``, which is also the GPU's
and, where NumPy defines one, NumPy's: no exception, no warning, and

* ``x / y`` by ±0: ±inf (sign of x times sign of y), nan for 0/0 and nan/0;
  an int over an int is a float, so ``1 / 0`` is inf too;
* ``x // y`` and ``x % y`` for floats: Python's rule (the result of ``%`` has
  the sign of ``y``) computed in the operands' precision; by ±0, ``x // 0`` is
  ``x / 0`` and ``x % 0`` is nan. For ints by 0: 0 (NumPy's answer), and the
  one quotient that overflows, ``-2**63 // -1``, is 0 too (numba's);
* ``x ** y`` and ``pow(x, y)``: C's ``pow`` (``0.0 ** -1`` is inf, a negative
  base to a fractional power is nan, overflow is ±inf); an int to an int is
  an int: a negative power is 0 except for 1 and -1, and ``0 ** -1`` is 0;
* ``math.*``: C's functions: nan outside the domain (``asin(1.5)``,
  ``log(-1)``, ``sqrt(-1)``, ``sin(inf)``), ±inf at a pole or on overflow
  (``log(0)``, ``log1p(-1)``, ``exp(1000)``);
* ``floor``, ``ceil`` and ``int()`` of nan, ±inf or a float outside the
  int64 range: ``-2**63`` (what x86 CPUs give; an index made from it is out
  of bounds).

A float32 operand stays float32 (``rt.sin`` of a float32 is a float32, as in
numba): results that overflow float32 are inf in both backends. The Python
backend computes a float32 ``math`` function in float64 and rounds, where numba
calls the float32 C function: the two can differ in the last bit (never at the
edges above, whose results are exact).
"""
import builtins
import math

import numpy as np

INF, NAN = math.inf, math.nan
INT64_MIN = -2 ** 63
_INT_RANGE = 2.0 ** 63

__all__ = ["div", "floordiv", "mod", "power", "pow", "sin", "cos", "tan", "asin", "acos",
           "atan", "atan2", "sinh", "cosh", "tanh", "exp", "log", "log1p", "sqrt", "floor",
           "ceil", "to_int"]


# -- operators ------------------------------------------------------------------

def div(x, y):
    """``x / y``."""
    try:
        return x / y     # numpy scalars divide by 0 as IEEE says (warnings are off in launches)
    except ZeroDivisionError:
        if x != x or x == 0:
            return NAN
        return math.copysign(INF, x) * math.copysign(1.0, y)


def floordiv(x, y):
    """``x // y``."""
    if _is_int(x) and _is_int(y):
        return _int_divmod(int(x), int(y))[0]
    return _float_divmod(x, y)[0]


def mod(x, y):
    """``x % y``."""
    if _is_int(x) and _is_int(y):
        return _int_divmod(int(x), int(y))[1]
    return _float_divmod(x, y)[1]


def power(x, y):
    """``x ** y``: an int for two ints, else C's ``pow``."""
    if _is_int(x) and _is_int(y):
        return _int_power(int(x), int(y))
    return pow(x, y)


# -- math functions -------------------------------------------------------------

def pow(x, y):  # noqa: A001 - the name generated code calls (rt.pow)
    """``math.pow(x, y)``: C's ``pow``, a float."""
    try:
        r = math.pow(x, y)
    except (ValueError, OverflowError):
        r = _pow_edge(float(x), float(y))
    return _typed(r, x, y)


def _nan(x):
    return NAN


def _unary(fn, edge):
    """``fn`` (a ``math`` function) with ``edge(x)`` where Python raises."""
    def call(x):
        try:
            r = fn(x)
        except (ValueError, OverflowError):
            r = edge(float(x))
        return np.float32(r) if isinstance(x, np.float32) else r
    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = f"``math.{fn.__name__}(x)``, IEEE at the edges."
    return call


sin = _unary(math.sin, _nan)                 # sin, cos, tan: nan at ±inf
cos = _unary(math.cos, _nan)
tan = _unary(math.tan, _nan)
asin = _unary(math.asin, _nan)               # asin, acos: nan outside [-1, 1]
acos = _unary(math.acos, _nan)
atan = _unary(math.atan, _nan)
sinh = _unary(math.sinh, lambda x: math.copysign(INF, x))
cosh = _unary(math.cosh, lambda x: INF)
tanh = _unary(math.tanh, _nan)
exp = _unary(math.exp, lambda x: INF)
log = _unary(math.log, lambda x: -INF if x == 0 else NAN)
log1p = _unary(math.log1p, lambda x: -INF if x == -1 else NAN)
sqrt = _unary(math.sqrt, _nan)


def atan2(y, x):
    """``math.atan2(y, x)`` (it never raises: C's special values)."""
    return _typed(math.atan2(y, x), y, x)


def floor(x):
    """``math.floor(x)``: an int; ``-2**63`` for nan, ±inf and floats out of int64 range."""
    if _is_int(x):
        return int(x)
    return math.floor(x) if -_INT_RANGE <= x < _INT_RANGE else INT64_MIN


def ceil(x):
    """``math.ceil(x)``, as ``floor``."""
    if _is_int(x):
        return int(x)
    return math.ceil(x) if -_INT_RANGE <= x < _INT_RANGE else INT64_MIN


def to_int(x):
    """``int(x)``: truncation; ``-2**63`` for nan, ±inf and floats out of int64 range."""
    if _is_int(x):
        return int(x)
    return int(x) if -_INT_RANGE <= x < _INT_RANGE else INT64_MIN


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
