"""The plain-Python backend: generated code runs as ordinary, debuggable Python."""
from .helpers import (add_chunks, chunk_start, clamp, private_copies, stack_new,  # noqa: F401
                      stack_push, trip_count)

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
