"""Warp's ``/``, ``//`` and ``%`` (C's arithmetic): ``rt.trunc_div``, ``rt.div_floor``,
``rt.trunc_mod``.

A kernel of ``import adjoint.warp as wp`` spells its operators with these
(runtime/dialect.py; pass normalize writes the calls), where NVIDIA Warp's meaning
differs from Python's; they are also ``ad.trunc_div`` etc. for any kernel:

* ``trunc_div(x, y)``: two ints, the quotient rounded towards zero (C's ``x / y``:
  ``-7 / 2`` is -3, an int); otherwise ``x / y``;
* ``div_floor(x, y)``: two ints, ``x // y`` (the quotient rounded down, as Python and
  Warp both do); otherwise ``floor(x / y)``, a float (Warp's: ``1.0 // 0.1`` is 10.0,
  where Python's ``//`` gives 9.0 from the exact remainder);
* ``trunc_mod(x, y)``: two ints, C's ``x % y``, with the sign of ``x`` (``-7 % 2`` is
  -1; Python's is 1); otherwise C's ``fmod`` (``math.fmod``).

By zero they do what adjoint's operators do (runtime/ieee.py): a float ``x / 0`` is ±inf
or nan, ``fmod(x, 0)`` nan, and an int divided by 0 is 0 with remainder 0 (Warp's CPU
stops the process with a floating-point exception there). The quotient that overflows,
``-2**63 / -1``, is 0 too, as numba's ``//``. Each function here is its plain-Python
meaning; the ``_compiled`` ones are numba's and numba.cuda's spelling (a float32 operand
pair computes in float32, with float32 constants). Registered in ``BUILTINS`` (ieee.py
imports this module at its end); rules: rules/arith.py.
"""
import math

import numpy as np

from . import ieee
from .builtin_table import AD, builtin


# -- numba and numba.cuda ------------------------------------------------------------

# (numba's isinstance(x, int) holds for an int64 alone: Warp's ints are int32)

def _trunc_div(x, y):
    if isinstance(x, (int, np.int32)) and isinstance(y, (int, np.int32)):
        q = x // y                  # (0 by zero and for the overflow, error_model="numpy")
        if q < 0 and q * y != x:
            q += 1
        return q
    return x / y


def _div_floor(x, y):
    if isinstance(x, (int, np.int32)) and isinstance(y, (int, np.int32)):
        return x // y
    q = x / y
    if isinstance(q, np.float32):
        big, one = np.float32(8388608.0), np.float32(1.0)
    else:
        big, one = 4503599627370496.0, 1.0
    a = abs(q)
    if not a < big:
        return q                    # inf, nan, or an integer already
    r = (a + big) - big             # |q| to the nearest integer, then truncated
    if r > a:
        r = r - one
    t = math.copysign(r, q)
    if t > q:
        t = t - one
    return t


def _trunc_mod(x, y):
    if isinstance(x, (int, np.int32)) and isinstance(y, (int, np.int32)):
        r = x % y                   # the sign of y (0 by zero, error_model="numpy")
        if r != 0 and (r < 0) != (x < 0):
            r -= y
        return r
    return np.fmod(x, y)


def _trunc_mod_device(x, y):
    """``_trunc_mod`` for numba.cuda (``math.fmod``: it has no ``np.fmod``)."""
    if isinstance(x, (int, np.int32)) and isinstance(y, (int, np.int32)):
        r = x % y
        if r != 0 and (r < 0) != (x < 0):
            r -= y
        return r
    return math.fmod(x, y)


# -- plain Python -----------------------------------------------------------------------

def _ints(x, y):
    return isinstance(x, (int, np.integer)) and isinstance(y, (int, np.integer))


@builtin(_trunc_div, user=AD)
def trunc_div(x, y):
    """``ad.trunc_div(x, y)``: Warp's (C's) ``x / y``: two ints' quotient rounded towards
    zero (an int), else ``x / y``."""
    if _ints(x, y):
        q = ieee.floordiv(int(x), int(y))
        return q + 1 if q < 0 and q * int(y) != int(x) else q
    return ieee.div(x, y)


@builtin(_div_floor, user=AD)
def div_floor(x, y):
    """``ad.div_floor(x, y)``: Warp's ``x // y``: two ints' ``x // y``, else
    ``floor(x / y)`` (a float)."""
    if _ints(x, y):
        return ieee.floordiv(int(x), int(y))
    q = ieee.div(x, y)
    if not math.isfinite(q) or q == 0:
        return q
    return type(q)(math.floor(q)) if isinstance(q, np.float32) else float(math.floor(q))


@builtin(_trunc_mod, user=AD, device=_trunc_mod_device)
def trunc_mod(x, y):
    """``ad.trunc_mod(x, y)``: Warp's (C's) ``x % y``: two ints' remainder with the sign of
    ``x``, else ``math.fmod(x, y)``."""
    if _ints(x, y):
        r = ieee.mod(int(x), int(y))
        return r - int(y) if r != 0 and (r < 0) != (int(x) < 0) else r
    return ieee.fmod(x, y)
