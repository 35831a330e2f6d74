"""The plain-Python backend: generated code runs as ordinary, debuggable Python."""
from .helpers import (add_chunks, block_count, chunk_start, clamp, float32,  # noqa: F401
                      private_copies, stack_new_bool, stack_new_float, stack_new_float32,
                      stack_new_int, stack_push, trip_count)
from .ieee import (acos, asin, atan, atan2, ceil, cos, cosh, div, exp, floor,  # noqa: F401
                   floordiv, log, log1p, mod, pow, power, sin, sinh, sqrt, tan, tanh, to_int)

PARALLEL_MIN_THREADS = 2048  # smaller grids run serially: thread start-up costs more
NAME = "python"
prange = range


def jit(fn):
    return fn


def jit_inline(fn):
    return fn


def jit_grid(fn):
    return fn


def chunk_count(n):
    return 1
