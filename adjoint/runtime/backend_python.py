"""The plain-Python backend: generated code runs as ordinary, debuggable Python."""
from .bounds import checked  # noqa: F401
from .helpers import (add_chunks, block_count, chunk_start, clamp, fault, float32,  # noqa: F401
                      index_outside_loop, private_copies, range_outside, stack_new_bool,
                      stack_new_float, stack_new_float32, stack_new_int, stack_push, trip_count)

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
