"""Integer casts: ``rt.to_int8`` ... ``rt.to_uint32``.

An int in a kernel is an int64 (numba's, and a Python int on the Python backend); these
functions give every backend the same int64 answer:

* ``to_int8(x)`` ... ``to_uint32(x)`` (``ad.int8(x)``, Warp's ``wp.uint32(x)``): ``x``
  truncated towards zero as ``int(x)`` does, then wrapped to the type's width, as C
  converts (``ad.uint8(300)`` is 44, ``ad.int8(200)`` is -56, ``ad.uint32(-1)`` is
  4294967295); the result is an int64 holding that value.

Each function is its plain-Python meaning; the one of its name with a leading underscore
is the spelling numba (njit and cuda) compiles: operands go through ``np.int64`` first, so
an int32 or uint8 meeting an int64 never becomes a float (numba's uint64 and int64 meet
as float64). Registered in ``BUILTINS`` (ieee.py imports this module at its end);
rules: rules/builtins_.py.
"""
import numpy as np

from .builtin_table import builtin
from .ieee import to_int

_R = 9.223372036854775808e18        # 2**63: int(x) of a float beyond it is -2**63 (ieee.py)


def _wrap(v, bits, signed):
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >> (bits - 1) else v


# -- casts ---------------------------------------------------------------------------

# (numba compiles each function alone: int(x)'s truncation is written out in each)

def _to_int8(x):
    if isinstance(x, (float, np.float32)) and not -_R <= x < _R:
        return np.int64(0)
    return np.int64(np.int8(np.int64(x)))


def _to_int16(x):
    if isinstance(x, (float, np.float32)) and not -_R <= x < _R:
        return np.int64(0)
    return np.int64(np.int16(np.int64(x)))


def _to_int32(x):
    if isinstance(x, (float, np.float32)) and not -_R <= x < _R:
        return np.int64(0)
    return np.int64(np.int32(np.int64(x)))


def _to_uint8(x):
    if isinstance(x, (float, np.float32)) and not -_R <= x < _R:
        return np.int64(0)
    return np.int64(np.uint8(np.int64(x)))


def _to_uint16(x):
    if isinstance(x, (float, np.float32)) and not -_R <= x < _R:
        return np.int64(0)
    return np.int64(np.uint16(np.int64(x)))


def _to_uint32(x):
    if isinstance(x, (float, np.float32)) and not -_R <= x < _R:
        return np.int64(0)
    return np.int64(np.uint32(np.int64(x)))


@builtin(_to_int8)
def to_int8(x):
    """``ad.int8(x)``: ``int(x)`` wrapped to -128..127."""
    return _wrap(to_int(x), 8, True)


@builtin(_to_int16)
def to_int16(x):
    """``ad.int16(x)``: ``int(x)`` wrapped to int16."""
    return _wrap(to_int(x), 16, True)


@builtin(_to_int32)
def to_int32(x):
    """``ad.int32(x)``: ``int(x)`` wrapped to int32."""
    return _wrap(to_int(x), 32, True)


@builtin(_to_uint8)
def to_uint8(x):
    """``ad.uint8(x)``: ``int(x)`` wrapped to 0..255."""
    return _wrap(to_int(x), 8, False)


@builtin(_to_uint16)
def to_uint16(x):
    """``ad.uint16(x)``: ``int(x)`` wrapped to uint16."""
    return _wrap(to_int(x), 16, False)


@builtin(_to_uint32)
def to_uint32(x):
    """``ad.uint32(x)``: ``int(x)`` wrapped to uint32."""
    return _wrap(to_int(x), 32, False)
