"""The plain-Python backend: generated code runs as ordinary, debuggable Python.

Under race checking (``adjoint/runtime/racecheck.py``) its grid functions record
which concurrently running unit touches which element, and every launch takes its
parallel path: ``PARALLEL_MIN_THREADS`` reads 0 then.
"""
from . import helpers, racecheck
from .bounds import checked  # noqa: F401
from .spec import unavailable  # noqa: F401
from .helpers import (accumulate, add_chunks, add_sums, chunk_start, chunk_sums, zero_of,  # noqa: F401
                      fault, float32, zero_fill, SUM_BLOCK, lane_block, block_size, zero_lanes,
                      add_lanes, lanes_total,
                      index_outside_loop, private_copies, range_outside, signed, stack_new_bool,
                      stack_new_float, stack_new_float32, stack_new_int, stack_push, trip_count)
from .all_builtins import BUILTINS
from .racecheck import chunk_count, prange  # noqa: F401  (range and 1 when not checking)

# rt.div, rt.sin, rt.clamp, ...: their plain-Python meaning (runtime/ieee.py)
globals().update({name: b.python for name, b in BUILTINS.items()})

SERIAL_BELOW = 2048  # smaller grids run serially: thread start-up costs more
NAME = "python"


def __getattr__(name):
    # read at every launch (PEP 562): it changes when race checking is switched
    if name == "PARALLEL_MIN_THREADS":
        return 0 if racecheck.enabled() else SERIAL_BELOW
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parallel_min_threads():
    return 0 if racecheck.enabled() else SERIAL_BELOW


def by_size(small, grid, ndims, trips=()):
    """helpers.by_size; under race checking every launch runs the parallel plan."""
    return helpers.by_size(small, grid, ndims, _parallel_min_threads, trips)


def jit(fn):
    return fn


def jit_inline(fn):
    return fn


def jit_small(fn):
    return fn


def jit_grid(fn):
    """The grid function itself; it checks its plan for races under race checking."""
    return racecheck.grid(fn)


def block_count(n, radius):
    return racecheck.note_blocks(helpers.block_count(n, radius), radius)
