"""Functions usable inside kernels that have a plain-Python meaning too.

Inside a kernel they are recognised by the transformer (by identity); called
from plain Python they do the obvious thing, so funcs stay callable on CPU.
"""
import math

__all__ = ["tid", "atomic_add", "atomic_sub", "clamp", "sin", "cos", "tan", "asin",
           "acos", "atan", "atan2", "sinh", "cosh", "tanh", "exp", "log", "log1p",
           "sqrt", "pow", "abs", "min", "max", "floor", "ceil"]


def tid():
    """Thread index of the running kernel (only meaningful inside a kernel)."""
    raise RuntimeError("ad.tid() can only be called inside an @ad.kernel")


def atomic_add(arr, *args):
    """``arr[idx] += value`` as one atomic step: ``atomic_add(arr, i, [j, k,] value)``."""
    *idx, value = args
    data = arr.numpy() if hasattr(arr, "numpy") else arr
    data[tuple(idx)] += value


def atomic_sub(arr, *args):
    """``arr[idx] -= value`` as one atomic step."""
    *idx, value = args
    data = arr.numpy() if hasattr(arr, "numpy") else arr
    data[tuple(idx)] -= value


def clamp(x, lo, hi):
    """``lo`` if ``x < lo``, else ``hi`` if ``x > hi``, else ``x``."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


sin, cos, tan = math.sin, math.cos, math.tan
asin, acos, atan, atan2 = math.asin, math.acos, math.atan, math.atan2
sinh, cosh, tanh = math.sinh, math.cosh, math.tanh
exp, log, log1p, sqrt, pow = math.exp, math.log, math.log1p, math.sqrt, math.pow
floor, ceil = math.floor, math.ceil
abs, min, max = abs, min, max  # noqa: A001 - the builtins, re-exported as ad.*
