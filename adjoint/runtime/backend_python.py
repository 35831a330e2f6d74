"""The plain-Python backend: generated code runs as ordinary, debuggable Python."""
from .helpers import (add_chunks, chunk_start, clamp, private_copies, stack_new,  # noqa: F401
                      stack_push, trip_count)

NAME = "python"
prange = range


def jit(fn):
    return fn


def jit_grid(fn):
    return fn


def chunk_count(n):
    return 1
