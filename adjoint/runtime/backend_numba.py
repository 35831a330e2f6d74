"""The numba CPU backend: ``numba.njit`` with on-disk caching.

Thread functions are compiled with ``njit``; grid functions with
``njit(parallel=True)`` so their ``prange`` loops run on all cores.

numba's on-disk cache of a function is found by the function's file and code; what
it holds also has the runtime helpers the function calls compiled in (``add_chunks``,
``block_count``, ``signed``, ...), whose change numba does not notice. Every function
compiled here is therefore cached under a key that also holds ``RUNTIME_FINGERPRINT``,
a hash of the runtime's source: a changed runtime compiles again.
"""
import glob
import hashlib
import os
import types
import warnings

import numba
import numba.core.extending
import numpy as np
from numba.core import types as nb_types
from numba.core.caching import FunctionCache
from numba.core.errors import NumbaPerformanceWarning
from numba.core.typing import templates
from numba.extending import overload

from . import helpers, load, simd
from .bounds import checked  # noqa: F401
from .all_builtins import BUILTINS
from .spec import unavailable  # noqa: F401

PARALLEL_MIN_THREADS = 2048  # smaller grids run serially: thread start-up costs more
NAME = "numba"


def _parallel_min_threads():
    load.govern()       # (each launch's part asks: numba's threads for the load now)
    return PARALLEL_MIN_THREADS


def by_size(small, grid, ndims, trips=()):
    """helpers.by_size: below ``PARALLEL_MIN_THREADS`` threads' worth, the serial ``small``."""
    return helpers.by_size(small, grid, ndims, _parallel_min_threads, trips)
prange = numba.prange


def _fingerprint():
    """sha256 of the source of every module of the runtime (this folder) and of numba's
    thread count."""
    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "*.py"))):
        digest.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as fh:
            digest.update(fh.read())
    # compiled in as constants: the chunks of a privatize grid, one per thread (MAX_CHUNKS)
    digest.update(f"threads={numba.config.NUMBA_NUM_THREADS}".encode())
    # which vector math functions the math builtins call (simd.py), if any
    digest.update(f"simd={simd.MODE}".encode())
    return digest.hexdigest()[:16]


RUNTIME_FINGERPRINT = _fingerprint()


class RuntimeKeyedCache(FunctionCache):
    """numba's cache of one function, its entries keyed also by ``RUNTIME_FINGERPRINT``
    (read when the key is made: numba's own key is the function's code only)."""

    def _index_key(self, sig, codegen):
        return super()._index_key(sig, codegen) + (RUNTIME_FINGERPRINT,)


def njit(**options):
    """``numba.njit(cache=True, **options)``, cached under the runtime's fingerprint."""
    def compile_(fn):
        dispatcher = numba.njit(cache=True, **options)(fn)
        dispatcher._cache = RuntimeKeyedCache(dispatcher.py_func)
        return dispatcher
    return compile_


def jit(fn):
    return njit()(fn)


def _stub(fn):
    """A copy of function ``fn`` (a numba overload is registered on the copy)."""
    stub = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    stub.__doc__, stub.__qualname__ = fn.__doc__, fn.__qualname__
    return stub


def jit_helper(fn, inline=False):
    """A runtime helper only generated code calls (``rt.fault``, ``rt.trip_count``,
    ``rt.stack_push``, ...): compiled into each function that calls it, typed on the plain
    types of its arguments, without a CPython wrapper.

    A numba dispatcher called from compiled code is compiled again for every integer
    *literal* it is passed: ``rt.fault(rt_status, 9, i, 0, 0)`` and
    ``rt.fault(rt_status, 10, i, 0, 0)`` were two compilations (one per bounds-check
    site: eight of ``fault`` for the springs example's first gradient, 0.6 s cold), and
    each built a CPython wrapper nobody called (half of a small function's compile
    time). A numba ``overload`` is typed on non-literal types first and has no wrapper.
    The returned function is a copy of ``fn`` (plain Python when called from Python; the
    overload is registered on the copy, for the CPU target only, so ``fn`` itself stays
    free for the CUDA backend). A function that calls it is cached as a whole, helper
    included (``njit``: keyed by ``RUNTIME_FINGERPRINT`` too). It is compiled once per
    argument types for every caller (``_overload_shared``), with
    ``error_model="numpy"`` (no helper divides by zero). ``inline``: with numba's
    ``forceinline`` too, so that LLVM inlines it into every caller (``add_lanes``: the
    lanes a grid carries stay in registers instead of passing through memory on every
    call, about 8% of a blocked loop of threads that does not vectorize)."""
    stub = _stub(fn)

    def typer(*args, **kwargs):
        return fn
    _overload_shared(stub, typer, {"error_model": "numpy", **({"forceinline": True} if inline
                                                                else {})})
    return stub


# whether this numba's overload templates have what _overload_shared relies on
SHARED_OVERLOADS = hasattr(numba.core.extending, "_overload_default_jit_options") and all(
    hasattr(getattr(templates, "_OverloadFunctionTemplate", None), a)
    for a in ("_get_impl", "_build_impl"))


def _overload_shared(stub, typer, jit_options):
    """``numba.extending.overload(stub, jit_options=jit_options)(typer)``, but each
    implementation compiled once per argument types, for every caller.

    numba keys an overload's implementations by the argument types *and the caller's
    compile flags*; the flags of a grid function, of each of its parallel regions
    (``noalias``, ``enable_ssa``, ``error_model``: numba compiles a region as a function
    of its own) and of a backward's regions differ, so each helper was compiled two or
    three times per process: 0.5 s of the springs workload's 4.3 s of cold compiles. Of
    those flags, an implementation's compilation depends only on the ones numba lets a
    callee inherit (``error_model``, ``fastmath``, ``nrt``, ``forceinline``): the
    helpers set ``error_model`` in ``jit_options``, and generated code sets none of the
    others, so one compiled implementation serves every caller. Where this numba's
    templates lack what this relies on, a plain ``overload`` (correct, compiled per
    flags)."""
    options = dict(jit_options)
    if not SHARED_OVERLOADS:
        overload(stub, jit_options=options, strict=False, target="cpu")(typer)
        return
    defaults = numba.core.extending._overload_default_jit_options
    made = templates.make_overload_template(stub, typer, dict(defaults, **options), False,
                                            "never", target="cpu")

    class Shared(made):
        def _get_impl(self, args, kws):
            key = (self.context, tuple(args), tuple(kws.items()))
            if key in self._impl_cache:
                return self._impl_cache[key]
            return self._build_impl(key, args, kws)

    Shared.__name__ = made.__name__
    templates.infer(Shared)
    templates.infer_global(stub, nb_types.Function(Shared))


def jit_inline(fn):
    """Thread functions: inlined into their grid loop at numba-IR level."""
    return njit(inline="always")(fn)


def jit_ieee(fn):
    """rt.div, rt.sin, ...: IEEE arithmetic (runtime/ieee.py), no ZeroDivisionError."""
    return njit(error_model="numpy")(fn)


def jit_grid(fn):
    return njit(parallel=True)(fn)


def jit_small(fn):
    """A kernel part's serial loop for small launches (``<kernel>_<part>_small``). Compiled
    with ``parallel=True`` although it has no ``prange``: numba's plain pipeline leaves an
    increment and a decrement of reference counts per thread (atomics) where bounds checks
    return early, the parallel one does not (the springs backward's loop: 27 vs 14 ns a
    thread); the compile time is the same. numba's warning that nothing was parallelized
    is expected there and silenced for these functions only (``_small``)."""
    return njit(parallel=True)(fn)


warnings.filterwarnings(
    "ignore", category=NumbaPerformanceWarning,
    message=r"(?s).*'parallel=True' was specified but no transformation"
            r".*(@rt\.jit_small|def \w+_small\()")


MAX_CHUNKS = numba.config.NUMBA_NUM_THREADS   # a constant, so grid functions stay cacheable


def _chunk_count(n):
    """``max(1, min(MAX_CHUNKS, n))``, spelled with tests: numba's typing of the builtin
    ``min``/``max`` took about 0.15 s of each cold compile of a privatize grid."""
    if n < 1:
        return 1
    if n > MAX_CHUNKS:
        return MAX_CHUNKS
    return n


chunk_count = jit_helper(_chunk_count)
trip_count = jit_helper(helpers.trip_count)
stack_new_float = jit_helper(helpers.stack_new_float)
stack_new_float32 = jit_helper(helpers.stack_new_float32)
float32 = helpers.float32
stack_new_int = jit_helper(helpers.stack_new_int)
stack_new_bool = jit_helper(helpers.stack_new_bool)
stack_push = jit_helper(helpers.stack_push)
chunk_start = jit_helper(helpers.chunk_start)


NON_NEGATIVE = np.int64(0x7FFF_FFFF_FFFF_FFFF)


@njit(inline="always")
def signed(i):
    """helpers.signed: prange's unsigned index as int64 (int() keeps it unsigned), with
    its sign bit masked off (a thread index is below 2**31): that tells LLVM the index
    is not negative, so the wraparound numba adds to every signed index folds away.
    Without it, ``out[i, j]`` stored in both branches of an ``if`` got two different
    addresses (wrapped in one, proven positive in the other), and LLVM vectorized the
    store as a scatter: the heat stencil's forward ran 3x slower than with prange's
    unsigned index."""
    return np.int64(i) & NON_NEGATIVE


private_copies = jit_helper(helpers.private_copies)
chunk_sums = jit_helper(helpers.chunk_sums)
zero_of = jit_helper(helpers.zero_of)
add_sums = jit_helper(helpers.add_sums)
SUM_BLOCK = helpers.SUM_BLOCK
lane_block = jit_helper(helpers.lane_block)
block_size = jit_helper(helpers.block_size)
zero_lanes = jit_helper(helpers.zero_lanes)
add_lanes = jit_helper(helpers.add_lanes, inline=True)
lanes_total = jit_helper(helpers.lanes_total)


def _accumulate_typer(acc, v):
    """helpers.accumulate: ``acc + v`` converted to ``acc``'s numba type (a no-op where
    the sum has that type already)."""
    kind = acc

    def impl(acc, v):
        return kind(acc + v)
    return impl


accumulate = _stub(helpers.accumulate)
overload(accumulate, strict=False, target="cpu")(_accumulate_typer)
range_outside = jit_helper(helpers.range_outside)
index_outside_loop = jit_helper(helpers.index_outside_loop)
fault = jit_helper(helpers.fault)


SERIAL_ADD_MAX = 16384   # elements: adding fewer in parallel costs more than it saves
SERIAL_FOLD_CHUNKS = 4   # up to this many chunk copies are summed in the calling thread


@njit(parallel=True)
def _add_chunks_parallel(arr, copies):
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


def _add_chunks_serial(arr, copies):
    """``arr += sum(copies)`` in the calling thread, one copy after another: a loop over
    contiguous memory that LLVM vectorizes (the same sums, in the same order, as
    ``_add_chunks_parallel``). With two copies of springs' 200k x 3 gradient it took
    0.12 ms where the parallel fold took 0.17 on two cores, and it compiles in half the
    time (no parallel region: the parallel fold was 0.74 s of the springs backward's
    cold compile). It indexes ``.flat`` rather than a ``reshape(-1)`` view: numba
    compiles that in a third of the time (the springs backward: 0.2 s less cold), and
    it runs as fast on contiguous arrays."""
    n = arr.size
    for c in range(copies.shape[0]):
        part = copies[c]
        for e in range(n):
            arr.flat[e] += part.flat[e]


# the copies summed at the end of a privatize grid: in this thread up to SERIAL_FOLD_CHUNKS
# of them (one per core: MAX_CHUNKS; RUNTIME_FINGERPRINT holds it), else in parallel
add_chunks = jit_helper(_add_chunks_serial) if MAX_CHUNKS <= SERIAL_FOLD_CHUNKS \
    else _add_chunks_parallel
block_count = jit_helper(helpers.block_count)
zero_fill = helpers.zero_fill     # called from plain Python (a gathered backward's choice)


def jit_builtin(fn):
    """rt.div, rt.sin, ...: for generated code, a numba overload of ``fn`` compiled with
    ``jit_ieee``'s options into each function that calls it (as ``jit_helper``: no
    compile per integer literal, no CPython wrapper: about half of the 40-60 ms each
    builtin took to compile cold); called from Python, ``fn`` compiled by ``jit_ieee``
    (so the tests compare numba's arithmetic with Python's, bit for bit)."""
    compiled = jit_ieee(fn)

    def call(*args):
        return compiled(*args)
    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = fn.__doc__

    def typer(*args, **kwargs):
        return fn
    _overload_shared(call, typer, {"error_model": "numpy"})
    return call


# rt.div, rt.sin, rt.clamp, ...: every runtime builtin, compiled (runtime/ieee.py; the math
# functions as their vectorizable C functions, simd.py)
globals().update({name: jit_builtin(simd.spelling(b)) for name, b in BUILTINS.items()})
