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
decided when compiling, so each call compiles to one branch.
"""
import math

INT64_MIN = -9223372036854775808


def div(x, y):
    return x / y


def floordiv(x, y):
    return x // y


def mod(x, y):
    return x % y


def power(x, y):
    if isinstance(x, int) and isinstance(y, int):
        if y >= 0:
            return x ** y
        if x == 1:
            return 1
        if x == -1:
            return 1 if y % 2 == 0 else -1
        return 0
    if isinstance(y, int):
        return math.pow(x, float(y))
    return math.pow(x, y)


def pow(x, y):  # noqa: A001 - the name generated code calls (rt.pow)
    if isinstance(y, int):
        return math.pow(x, float(y))
    return math.pow(x, y)


def atan2(y, x):
    return math.atan2(y, x)


def floor(x):
    if isinstance(x, int):
        return x
    if -9.223372036854775808e18 <= x < 9.223372036854775808e18:
        return math.floor(x)
    return INT64_MIN


def ceil(x):
    if isinstance(x, int):
        return x
    if -9.223372036854775808e18 <= x < 9.223372036854775808e18:
        return math.ceil(x)
    return INT64_MIN


def to_int(x):
    if isinstance(x, int):
        return x
    if -9.223372036854775808e18 <= x < 9.223372036854775808e18:
        return int(x)
    return INT64_MIN
