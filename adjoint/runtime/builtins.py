"""Functions usable inside kernels that have a plain-Python meaning too.

Inside a kernel they are recognised by the transformer (by identity); called
from plain Python they do the obvious thing, so funcs stay callable on CPU.
The math functions (``ad.sin`` is ``math.sin``, ``ad.clamp``, ...) are those
of the runtime builtins (runtime/ieee.py's ``BUILTINS``) that a user calls:
a builtin registered there is exported here, and as ``ad.<name>``.
"""
import builtins as _py

import numpy as _np

from . import helpers as _helpers
from .all_builtins import BUILTINS


def tid():
    """Thread index of the running kernel (only meaningful inside a kernel)."""
    raise RuntimeError("ad.tid() can only be called inside an @ad.kernel")


def _atomic(arr, args, update):
    """``arr[idx] = update(arr[idx], value)``; the element's old value (a copy of a row)."""
    *idx, value = args
    data = arr.numpy() if hasattr(arr, "numpy") else arr
    old = data[tuple(idx)]
    old = old.copy() if hasattr(old, "copy") and getattr(old, "ndim", 0) else old
    data[tuple(idx)] = update(old, value)
    return old


def atomic_add(arr, *args):
    """``arr[idx] += value`` as one atomic step: ``atomic_add(arr, i, [j, k,] value)``;
    returns the element's old value (Warp's)."""
    return _atomic(arr, args, lambda a, v: a + v)


def atomic_sub(arr, *args):
    """``arr[idx] -= value`` as one atomic step; returns the old value."""
    return _atomic(arr, args, lambda a, v: a - v)


def atomic_min(arr, *args):
    """``arr[idx] = min(arr[idx], value)`` as one atomic step: ``atomic_min(arr, i, [j, k,]
    value)``; returns the old value. Its gradient goes to ``value`` where it equals the
    element after the launch (Warp's rule; see docs/from-warp.md)."""
    return _atomic(arr, args, _py.min)


def atomic_max(arr, *args):
    """``arr[idx] = max(arr[idx], value)`` as one atomic step; returns the old value."""
    return _atomic(arr, args, _py.max)


def _atomic_bits(arr, args, op):
    *idx, value = args
    data = arr.numpy() if hasattr(arr, "numpy") else arr
    old = data[tuple(idx)]
    data[tuple(idx)] = op(old, data.dtype.type(value))
    return old


def atomic_and(arr, *args):
    """``arr[idx] &= value`` as one atomic step, of an int array; returns the element's old
    value (Warp's ``atomic_and``; no gradient: ints have none)."""
    return _atomic_bits(arr, args, lambda a, b: a & b)


def atomic_or(arr, *args):
    """``arr[idx] |= value`` as one atomic step; returns the old value."""
    return _atomic_bits(arr, args, lambda a, b: a | b)


def atomic_xor(arr, *args):
    """``arr[idx] ^= value`` as one atomic step; returns the old value."""
    return _atomic_bits(arr, args, lambda a, b: a ^ b)


def where(cond, value_if_true, value_if_false):
    """``value_if_true if cond else value_if_false`` (Warp's ``where``); in a kernel the
    parser writes it as that ternary (frontend/choose.py), whose derivative it has."""
    return value_if_true if cond else value_if_false


def select(cond, value_if_false, value_if_true):
    """``value_if_true if cond else value_if_false``: Warp's older ``select``, its
    arguments in the other order (false first)."""
    return value_if_true if cond else value_if_false


# Loop stacks, as a generated backward printed as user code spells them (emit/user.py):
# the transformer reads them as its stack nodes; plain Python runs them as the CPU does
# (a growable array per carried value).
stack_float, stack_int, stack_bool = (_helpers.stack_new_float, _helpers.stack_new_int,
                                      _helpers.stack_new_bool)
stack_push = _helpers.stack_push


def stack_read(stack, index):
    """Entry ``index`` of a loop stack."""
    return stack[index]


STACK = ("stack_float", "stack_int", "stack_bool", "stack_push", "stack_read")

# the dtypes, which a kernel calls as casts (rules/builtins_.py): ad.float32(x), ad.int8(x)
float32, float64, int8, int16, int32, int64 = (_np.float32, _np.float64, _np.int8, _np.int16,
                                               _np.int32, _np.int64)
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64

# Python's builtins, re-exported as ad.* (generated code calls them as they are)
abs, min, max = _py.abs, _py.min, _py.max  # noqa: A001

MATH = {name: b.user for name, b in sorted(BUILTINS.items()) if b.user is not None}
globals().update(MATH)

# ``from adjoint import *`` must not change what plain Python means: a math function
# named like a Python builtin it differs from (ad.round rounds halves away from zero and
# returns a float, ad.pow is math.pow) stays ad.<name> only
# (the loop stacks are ad.stack_* but stay out of the star import: no user writes them)
__all__ = ["tid", "atomic_add", "atomic_sub", "atomic_min", "atomic_max", "atomic_and",
           "atomic_or", "atomic_xor", "abs", "min", "max",
           "where", "select"] + [
    n for n, fn in MATH.items() if getattr(_py, n, fn) is fn]
