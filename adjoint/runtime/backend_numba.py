"""The numba CPU backend: ``numba.njit`` with on-disk caching.

Thread functions are compiled with ``njit``; grid functions with
``njit(parallel=True)`` so their ``prange`` loops run on all cores.
"""
import numba
import numpy as np

from . import helpers
from .bounds import checked  # noqa: F401
from .ieee import BUILTINS
from .spec import unavailable  # noqa: F401

PARALLEL_MIN_THREADS = 2048  # smaller grids run serially: thread start-up costs more
NAME = "numba"
prange = numba.prange


def jit(fn):
    return numba.njit(cache=True)(fn)


def jit_inline(fn):
    """Thread functions: inlined into their grid loop at numba-IR level."""
    return numba.njit(cache=True, inline="always")(fn)


def jit_ieee(fn):
    """rt.div, rt.sin, ...: IEEE arithmetic (runtime/ieee.py), no ZeroDivisionError."""
    return numba.njit(cache=True, error_model="numpy")(fn)


def jit_grid(fn):
    return numba.njit(cache=True, parallel=True)(fn)


MAX_CHUNKS = numba.config.NUMBA_NUM_THREADS   # a constant, so grid functions stay cacheable


@numba.njit(cache=True)
def chunk_count(n):
    return max(1, min(MAX_CHUNKS, n))


trip_count = jit(helpers.trip_count)
stack_new_float = jit(helpers.stack_new_float)
stack_new_float32 = jit(helpers.stack_new_float32)
float32 = helpers.float32
stack_new_int = jit(helpers.stack_new_int)
stack_new_bool = jit(helpers.stack_new_bool)
stack_push = jit(helpers.stack_push)
chunk_start = jit(helpers.chunk_start)


@numba.njit(cache=True, inline="always")
def signed(i):
    """helpers.signed: prange's unsigned index as int64 (int() keeps it unsigned)."""
    return np.int64(i)


private_copies = jit(helpers.private_copies)
range_outside = jit(helpers.range_outside)
index_outside_loop = jit(helpers.index_outside_loop)
fault = jit(helpers.fault)


SERIAL_ADD_MAX = 16384   # elements: adding fewer in parallel costs more than it saves


@numba.njit(cache=True, parallel=True)
def add_chunks(arr, copies):
    """``arr += sum(copies)`` (arrays are C-contiguous): in parallel over the elements, or
    in this thread for a small array (a loss of one element: no second parallel region
    per launch, whose start costs more than the adding)."""
    flat = arr.reshape(-1)
    parts = copies.reshape(copies.shape[0], -1)
    if flat.size <= SERIAL_ADD_MAX:
        for e in range(flat.size):
            total = flat[e]
            for c in range(parts.shape[0]):
                total += parts[c, e]
            flat[e] = total
        return
    for e in numba.prange(flat.size):
        total = flat[e]
        for c in range(parts.shape[0]):
            total += parts[c, e]
        flat[e] = total
block_count = jit(helpers.block_count)

# rt.div, rt.sin, rt.clamp, ...: every runtime builtin, compiled (runtime/ieee.py)
globals().update({name: jit_ieee(b.compiled) for name, b in BUILTINS.items()})
