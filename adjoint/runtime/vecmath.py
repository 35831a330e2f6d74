"""The scalar builtins vector code is written with (``rt.length3``, ``rt.div_or_zero``).

frontend/scalarize.py turns ``ad.length(v)`` into ``rt.length3(v_x, v_y, v_z)`` and
``ad.normalize(v)`` into ``rt.div_or_zero(v_x, l)`` with ``l`` that length, so the
derivative at the zero vector is defined, as in Warp, instead of the nan that
``sqrt(x*x + y*y + z*z)`` and ``x / l`` give there:

* ``length2/3/4(x, ...)``: the Euclidean length; its partials are ``x / l``,
  and 0 at the origin (where the length has no derivative: 0 is the
  subgradient of least norm, and what Warp's adjoint gives);
* ``div_or_zero(x, y)``: ``x / y``, or 0 where ``y == 0``, with zero partials
  there: ``normalize(0)`` is 0 with a zero derivative (Warp's).

They are also ``ad.length3(x, y, z)`` etc. for kernels written in scalars.
Each function is its own numba spelling: a float32 operand stays float32
(float32 constants, no float64 literal widening it); the plain-Python version
rounds the square root of a float32 back to float32, as ``math_function`` does.
Registered in ``BUILTINS`` (builtin_table.py; ieee.py imports this module at its end); rules: rules/vectors.py.
"""
import math

import numpy as np

from .builtin_table import AD, builtin


def _length2(x, y):
    return math.sqrt(x * x + y * y)


def _length3(x, y, z):
    return math.sqrt(x * x + y * y + z * z)


def _length4(x, y, z, w):
    return math.sqrt(x * x + y * y + z * z + w * w)


def _div_or_zero(x, y):
    if y == 0:
        return y - y        # 0, in y's type
    return x / y


def _f32(s, r):
    return np.float32(r) if isinstance(s, np.float32) else r


@builtin(_length2, user=AD)
def length2(x, y):
    """``ad.length2(x, y)``: the length of the vector (x, y); derivative 0 at the origin."""
    s = x * x + y * y
    return _f32(s, math.sqrt(s))


@builtin(_length3, user=AD)
def length3(x, y, z):
    """``ad.length3(x, y, z)``: the length of (x, y, z); derivative 0 at the origin."""
    s = x * x + y * y + z * z
    return _f32(s, math.sqrt(s))


@builtin(_length4, user=AD)
def length4(x, y, z, w):
    """``ad.length4(x, y, z, w)``: the length of (x, y, z, w); derivative 0 at the origin."""
    s = x * x + y * y + z * z + w * w
    return _f32(s, math.sqrt(s))


@builtin(_div_or_zero, user=AD)
def div_or_zero(x, y):
    """``ad.div_or_zero(x, y)``: ``x / y``, or 0 where ``y == 0`` (derivative 0 there)."""
    return _div_or_zero(x, y)
