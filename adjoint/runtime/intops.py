"""Integer casts and bit operations: ``rt.to_int8`` ... ``rt.to_uint32``, ``rt.bit_and``,
``rt.bit_or``, ``rt.bit_xor``, ``rt.lshift``, ``rt.rshift``, ``rt.invert``, ``rt.nonzero``.

An int in a kernel is an int64 (numba's, and a Python int on the Python backend); these
functions give every backend the same int64 answer:

* ``to_uint64(x)``: the 64 bits of ``int(x)`` as an int64 (every uint64 in a kernel);
* ``to_int8(x)`` ... ``to_uint32(x)`` (``ad.int8(x)``, Warp's ``wp.uint32(x)``): ``x``
  truncated towards zero as ``int(x)`` does, then wrapped to the type's width, as C
  converts (``ad.uint8(300)`` is 44, ``ad.int8(200)`` is -56, ``ad.uint32(-1)`` is
  4294967295); the result is an int64 holding that value;
* ``x & y``, ``x | y``, ``x ^ y``, ``~x``: two's complement on int64 (a bool is 0 or 1);
  for operands of int32's range they are Warp's int32 answers;
* ``x << y``: the int64 product ``x * 2**y`` wrapped to int64, ``x >> y`` the arithmetic
  shift (rounding down); a count outside 0..63 shifts every bit out (0; ``x >> y`` of a
  negative ``x`` is -1), where C leaves it undefined;
* ``nonzero(x)``: 1 where ``x != 0``, else 0 (Warp's), an int for an int and a float for
  a float.

Each function is its plain-Python meaning; the one of its name with a leading underscore
is the spelling numba (njit and cuda) compiles: operands go through ``np.int64`` first, so
an int32 or uint8 meeting an int64 never becomes a float (numba's uint64 and int64 meet
as float64). Registered in ``BUILTINS`` (ieee.py imports this module at its end);
rules: rules/bits.py and rules/builtins_.py.
"""
import numpy as np

from .builtin_table import AD, builtin
from .ieee import to_int

_M64 = 1 << 64
_R = 9.223372036854775808e18        # 2**63: int(x) of a float beyond it is -2**63 (ieee.py)


def _wrap64(v):
    """A Python int wrapped to int64."""
    v &= _M64 - 1
    return v - _M64 if v >> 63 else v


def _wrap(v, bits, signed):
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >> (bits - 1) else v


def _bits(x):
    """An operand of a bit operation as a Python int (a bool is 0 or 1)."""
    return int(x)


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


def _to_uint64(x):
    if isinstance(x, (float, np.float32)) and not -_R <= x < _R:
        return np.int64(-9223372036854775808)       # int(x)'s (ieee.py), all 64 bits kept
    return np.int64(x)      # (a uint64's bits, unchanged: numba casts without a check)


@builtin(_to_uint64)
def to_uint64(x):
    """``ad.uint64(x)``: the 64 bits of ``int(x)`` held in an int64 (a uint64 from 2**63
    on reads as negative); an ``np.int64``, so that it is stored into a uint64 array
    wrapped as numba stores it, and wraps as numba's does where it overflows."""
    return np.int64(_wrap64(to_int(x)))


# -- bit operations --------------------------------------------------------------------

def _bit_and(x, y):
    return np.int64(x) & np.int64(y)


def _bit_or(x, y):
    return np.int64(x) | np.int64(y)


def _bit_xor(x, y):
    return np.int64(x) ^ np.int64(y)


def _invert(x):
    return ~np.int64(x)


def _lshift(x, y):
    a, n = np.int64(x), np.int64(y)
    if n < 0 or n > 63:
        return a - a
    return a << n


def _rshift(x, y):
    a, n = np.int64(x), np.int64(y)
    if n < 0 or n > 63:
        return a >> np.int64(63)
    return a >> n


def _nonzero(x):
    if isinstance(x, float):
        return 1.0 if x != 0 else 0.0
    if isinstance(x, np.float32):
        return np.float32(1.0) if x != 0 else np.float32(0.0)
    return 1 if x != 0 else 0


@builtin(_bit_and, user=AD)
def bit_and(x, y):
    """``x & y`` (Warp's ``wp.bit_and``) of two ints."""
    return _bits(x) & _bits(y)


@builtin(_bit_or, user=AD)
def bit_or(x, y):
    """``x | y`` (Warp's ``wp.bit_or``) of two ints."""
    return _bits(x) | _bits(y)


@builtin(_bit_xor, user=AD)
def bit_xor(x, y):
    """``x ^ y`` (Warp's ``wp.bit_xor``) of two ints."""
    return _bits(x) ^ _bits(y)


@builtin(_invert, user=AD)
def invert(x):
    """``~x`` (Warp's ``wp.invert``): ``-x - 1``."""
    return ~_bits(x)


@builtin(_lshift, user=AD)
def lshift(x, y):
    """``x << y`` (Warp's ``wp.lshift``), wrapped to int64; 0 for a count outside 0..63."""
    a, n = _bits(x), _bits(y)
    return _wrap64(_wrap64(a) << n) if 0 <= n <= 63 else 0


@builtin(_rshift, user=AD)
def rshift(x, y):
    """``x >> y`` (Warp's ``wp.rshift``), the arithmetic shift; a count outside 0..63
    shifts every bit out (0, or -1 for a negative ``x``)."""
    a, n = _wrap64(_bits(x)), _bits(y)
    return a >> n if 0 <= n <= 63 else a >> 63


@builtin(_nonzero, user=AD)
def nonzero(x):
    """``ad.nonzero(x)`` (Warp's): 1 where ``x != 0``, else 0, of ``x``'s kind."""
    if isinstance(x, np.float32):
        return np.float32(1.0 if x != 0 else 0.0)
    if isinstance(x, (float, np.floating)):
        return 1.0 if x != 0 else 0.0
    return 1 if x != 0 else 0
