"""``rt.div``, ``rt.sin``, ... spelled for numba and numba.cuda (see ieee.py).

``backend_numba`` compiles these with ``njit(error_model="numpy")`` and
``backend_cuda`` as device functions (numba.cuda uses the numpy error model
too): with it, numba's own ``/``, ``//``, ``%`` and ``math`` functions already
follow IEEE arithmetic, so most of these are the operation itself, and a
unary ``math`` function needs none here (ieee.py's ``math_function`` compiles
a call of it). What they add is what numba does not define: a float to an int
power (numba multiplies repeatedly and raises for ``0.0 ** -1``; C's ``pow`` is
what Python and NumPy compute), an int to a negative int power, and floats out
of the int64 range made ints (which LLVM leaves undefined). ``isinstance`` on a numba type is
decided when compiling, so each call compiles to one branch; numba's ``isinstance(x, int)``
holds for an int64 alone, so an int is ``isinstance(x, (int, np.int32))`` (int32: an int32
array's element, Warp's ``int``).

Warp's scalar builtins (``ad.sign``, ``ad.lerp``, ``ad.round``, ...) are written
here from operations numba and numba.cuda both compile: a float32 operand (every
operand, for the functions of several) computes in float32 with float32
constants (the ``isinstance(x, np.float32)`` branches), as numba types a bare
``1.0`` as a float64 that would widen it. ``round``, ``rint`` and ``trunc`` round
with the float's own addition: for ``0 <= a < 2**52`` (``2**23`` in float32),
``(a + 2**52) - 2**52`` is ``a`` rounded to an integer, ties to even; larger
floats are integers already.
"""
import math

import numpy as np

INT64_MIN = -9223372036854775808


def div(x, y):
    return x / y


def floordiv(x, y):
    return x // y


def mod(x, y):
    return x % y


def power(x, y):
    if isinstance(x, (int, np.int32)) and isinstance(y, (int, np.int32)):
        if y >= 0:
            return x ** y
        if x == 1:
            return 1
        if x == -1:
            return 1 if y % 2 == 0 else -1
        return 0
    if isinstance(y, (int, np.int32)):
        return math.pow(x, float(y))
    return math.pow(x, y)


def pow(x, y):  # noqa: A001 - the name generated code calls (rt.pow)
    if isinstance(y, (int, np.int32)):
        return math.pow(x, float(y))
    return math.pow(x, y)


def atan2(y, x):
    return math.atan2(y, x)


def floor(x):
    if isinstance(x, (int, np.int32)):
        return x
    if -9.223372036854775808e18 <= x < 9.223372036854775808e18:
        return math.floor(x)
    return INT64_MIN


def ceil(x):
    if isinstance(x, (int, np.int32)):
        return x
    if -9.223372036854775808e18 <= x < 9.223372036854775808e18:
        return math.ceil(x)
    return INT64_MIN


def to_float(x):
    """numba has no ``float()`` of a bool (a comparison, ``math.isnan``)."""
    if isinstance(x, bool):
        return 1.0 if x else 0.0
    return float(x)


def to_float_device(x):
    """``to_float`` for numba.cuda, which types ``float(x)`` of a bool even in a branch
    ``isinstance`` rules out: a product with 1.0 is exact (-0.0 stays -0.0) and takes a
    bool, an int or a float."""
    return x * 1.0


def to_int(x):
    if isinstance(x, (int, np.int32)):
        return x
    if -9.223372036854775808e18 <= x < 9.223372036854775808e18:
        return int(x)
    return INT64_MIN


def copysign(x, y):
    return math.copysign(x, y)


def hypot(x, y):
    return math.hypot(x, y)


def fmod(x, y):
    """numba CPU has no ``math.fmod``; NumPy's ``fmod`` is C's (a float, as Python's
    ``math.fmod``, also of two ints: NumPy's would be an int)."""
    if isinstance(x, (int, np.int32)) and isinstance(y, (int, np.int32)):
        return np.fmod(float(x), float(y))
    return np.fmod(x, y)


def fmod_device(x, y):
    """numba.cuda has ``math.fmod`` (CUDA's ``fmod``), not NumPy's."""
    if isinstance(x, (int, np.int32)) and isinstance(y, (int, np.int32)):
        return math.fmod(float(x), float(y))
    return math.fmod(x, y)


def cbrt(x):
    """The C library's ``cbrt`` (what ``math.cbrt`` calls): numba CPU compiles NumPy's."""
    return np.cbrt(x)


def cbrt_device(x):
    """``cbrt`` for numba.cuda, which has neither ``math.cbrt`` nor ``np.cbrt``: ``|x| ** (1/3)``
    and one Newton step, with the sign of ``x`` (within 1 ulp of the exact cube root in float64,
    2 in float32; tests/rules/test_warp_builtins.py)."""
    if isinstance(x, np.float32):
        third = np.float32(0.3333333333333333)
    else:
        third = 0.3333333333333333
    if isinstance(x, (int, np.int32)):
        a = abs(float(x))
    else:
        a = abs(x)
    y = math.pow(a, third)
    if y > 0 and y < math.inf:
        y = y - (y - a / (y * y)) * third
    return math.copysign(y, x)


def sign(x):
    if isinstance(x, (int, np.int32)):
        return -1 if x < 0 else 1
    if isinstance(x, np.float32):
        return np.float32(-1.0) if x < 0 else np.float32(1.0)
    return -1.0 if x < 0 else 1.0


def step(x):
    if isinstance(x, (int, np.int32)):
        return 1 if x < 0 else 0
    if isinstance(x, np.float32):
        return np.float32(1.0) if x < 0 else np.float32(0.0)
    return 1.0 if x < 0 else 0.0


def lerp(a, b, t):
    if isinstance(a, np.float32) and isinstance(b, np.float32) and isinstance(t, np.float32):
        one = np.float32(1.0)
    else:
        one = 1.0
    return a * (one - t) + b * t


def smoothstep(e0, e1, x):
    if isinstance(e0, np.float32) and isinstance(e1, np.float32) and isinstance(x, np.float32):
        zero, one, two, three = np.float32(0.0), np.float32(1.0), np.float32(2.0), np.float32(3.0)
    else:
        zero, one, two, three = 0.0, 1.0, 2.0, 3.0
    w = e1 - e0
    if w == 0:
        if x < e0:
            return zero
        if x >= e0:
            return one
        return x + zero
    t = (x - e0) / w
    if t <= 0:
        return zero
    if t >= 1:
        return one
    return t * t * (three - two * t)


def rint(x):
    if isinstance(x, (int, np.int32)):
        return float(x)
    if isinstance(x, np.float32):
        big = np.float32(8388608.0)
    else:
        big = 4503599627370496.0
    a = abs(x)
    if not a < big:
        return x
    return math.copysign((a + big) - big, x)


def trunc(x):
    if isinstance(x, (int, np.int32)):
        return float(x)
    if isinstance(x, np.float32):
        big, one = np.float32(8388608.0), np.float32(1.0)
    else:
        big, one = 4503599627370496.0, 1.0
    a = abs(x)
    if not a < big:
        return x
    r = (a + big) - big
    if r > a:
        r = r - one
    return math.copysign(r, x)


def round(x):  # noqa: A001 - the name generated code calls (rt.round)
    if isinstance(x, (int, np.int32)):
        return float(x)
    if isinstance(x, np.float32):
        big, one, half = np.float32(8388608.0), np.float32(1.0), np.float32(0.5)
    else:
        big, one, half = 4503599627370496.0, 1.0, 0.5
    a = abs(x)
    if not a < big:
        return x
    r = (a + big) - big
    if r > a:
        r = r - one
    if a - r >= half:
        r = r + one
    return math.copysign(r, x)


def frac(x):
    if isinstance(x, (int, np.int32)):
        return 0.0
    if isinstance(x, np.float32):
        big, one = np.float32(8388608.0), np.float32(1.0)
    else:
        big, one = 4503599627370496.0, 1.0
    a = abs(x)
    if not a < big:
        return x - x
    r = (a + big) - big
    if r > a:
        r = r - one
    return x - math.copysign(r, x)
