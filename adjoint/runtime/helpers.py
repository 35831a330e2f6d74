"""Small functions generated code calls: loop stacks, trip counts, parallel chunks.

Plain Python here; ``backend_numba`` compiles them with numba.
"""
import numpy as np


def trip_count(start, stop, step):
    """Number of iterations of ``range(start, stop, step)``."""
    if step > 0:
        n = (stop - start + step - 1) // step
    else:
        n = (start - stop - step - 1) // (-step)
    return n if n > 0 else 0


# The stacks are made with np.empty and filled, and grown by copying element by element:
# numba compiles np.full in about twice the time, and an array-to-slice assignment
# (``grown[:n] = stack[:n]``) with its shape-mismatch error message (string formatting) in
# 2-5 s, which every process's first loop stack paid (numba's cold start).

def stack_new_float(capacity, value):
    """A per-thread stack of float64 for one carried value, sized for ``capacity`` iterations."""
    stack = np.empty(capacity if capacity > 1 else 1, np.float64)
    stack[:] = value
    return stack


float32 = np.float32      # rt.float32(c): a float32 kernel's literals (emit/precision.py)


def stack_new_float32(capacity, value):
    """The same in float32: a float32 kernel's carried values (see emit/precision.py)."""
    stack = np.empty(capacity if capacity > 1 else 1, np.float32)
    stack[:] = value
    return stack


def stack_new_int(capacity, value):
    stack = np.empty(capacity if capacity > 1 else 1, np.int64)
    stack[:] = value
    return stack


def stack_new_bool(capacity, value):
    stack = np.empty(capacity if capacity > 1 else 1, np.bool_)
    stack[:] = value
    return stack


def stack_push(stack, n, value):
    """Store ``value`` as entry ``n``, growing the stack when it is full."""
    if n >= stack.shape[0]:
        grown = np.empty(2 * stack.shape[0], stack.dtype)
        for k in range(n):
            grown[k] = stack[k]
        stack = grown
    stack[n] = value
    return stack


def signed(i):
    """A parallel loop's thread index as a signed integer. numba types a ``prange``
    index as unsigned, and unsigned meeting signed integers is typed float64 (so
    ``j = i; if c: j = 0; x[j]`` would not compile); backend_numba spells it
    ``np.int64(i)``. In plain Python the index is already an int."""
    return i


def by_size(small, grid, ndims, below, trips=()):
    """A kernel part's launchable function: ``small`` (its threads one after another) for
    a launch of less work than ``below()`` threads' worth, else ``grid`` (the parallel
    plan); both take ``(dim0, ..., dim<ndims-1>, *arguments)``. The work is the number of
    threads times each trip count in ``trips`` (a thread's loops: emit/spec.py
    ``trips``): ``k`` is the ``k``-th argument's value (``for j in range(n)``), ``(k, d)``
    its ``shape[d]``. Each variant is compiled on its first call, so a process compiles
    only those its launches use."""
    work = _work(ndims, trips)
    if not trips and ndims == 1:
        def run(*args):
            (small if args[0] < below() else grid)(*args)
    else:
        def run(*args):
            (small if work(args) < below() else grid)(*args)
    run.__wrapped__ = grid
    run.by_size = (small, grid, below, work)    # (a capture picks the variant once: capture_code)
    return run


def _work(ndims, trips):
    """``work(args)``: threads times trip counts (see ``by_size``), from a launch's
    ``(dim0, ..., *arguments)``."""
    reads = [(lambda args, k=ndims + t: args[k]) if type(t) is int else
             (lambda args, k=ndims + t[0], d=t[1]: args[k].shape[d]) for t in trips]

    def work(args):
        w = args[0]
        for d in range(1, ndims):
            w *= args[d]
        for read in reads:
            w *= max(read(args), 1)
        return w
    return work


def chunk_start(n, chunks, c):
    """First index of chunk ``c`` when ``n`` threads are split into ``chunks`` runs."""
    return (n * c) // chunks


def private_copies(arr, chunks):
    """``chunks`` zeroed copies of ``arr``, one per chunk of threads."""
    return np.zeros((chunks,) + arr.shape, arr.dtype)


def add_chunks(arr, copies):
    """``arr += sum(copies)``: fold the per-chunk accumulations back."""
    for c in range(copies.shape[0]):
        arr += copies[c]


def chunk_sums(arr, chunks):
    """``chunks`` zeros of ``arr``'s dtype: one partial sum per chunk of threads of an
    element that a grid keeps in a local (emit/sums.py)."""
    return np.zeros(chunks, arr.dtype)


def zero_of(arr):
    """A zero of ``arr``'s dtype: the partial sum of an element a small launch's serial
    loop keeps in a local (emit/grid.py ``small``; no allocation, no reference counts)."""
    return arr.dtype.type(0)


def zero_fill(arr):
    """Zero ``arr`` in place: a clean gathered backward whose launch takes the plan's grid,
    which adds, writes the zeros a deferred zero owes (runtime/owed.py) first."""
    arr.fill(0)


def add_sums(total, sums):
    """``total`` plus every partial sum of ``sums``, added in order (as ``add_chunks``)."""
    for c in range(sums.shape[0]):
        total += sums[c]
    return total


# A chunk's sums kept in locals (emit/grid.py ``_in_lanes``): its threads run in blocks
# of SUM_BLOCK; each thread's value is stored in the block, and the block's values are
# added into SUM_LANES partial sums, value k into sum k % SUM_LANES, each in order.
# Both are fixed, so the order of the additions is the same on every machine and for
# every vector width (a forward and its JVP sum alike, bit for bit).
SUM_BLOCK = 256
SUM_LANES = 8


def lane_block(arr):
    """Room for a block's values of an element of ``arr`` (``SUM_BLOCK`` of its dtype)."""
    return np.empty(SUM_BLOCK, arr.dtype)


def block_size(first, end):
    """Threads in the block from ``first`` of a row ending at ``end``: ``min(end - first,
    SUM_BLOCK)``, spelled with a test (numba types the builtin ``min`` slowly)."""
    n = end - first
    if n > SUM_BLOCK:
        return SUM_BLOCK
    return n


def zero_lanes(arr):
    """``SUM_LANES`` zeros of ``arr``'s dtype: the partial sums of a chunk's lanes."""
    z = arr.dtype.type(0)
    return (z, z, z, z, z, z, z, z)


def add_lanes(lanes, block, count):
    """``lanes`` plus the first ``count`` values of ``block``: value ``k`` added to lane
    ``k % SUM_LANES``. The rest of the block is zeroed first (adding a zero changes no
    partial sum: none is ever -0.0, having started at +0.0). Eight independent chains of
    additions per block of SUM_BLOCK threads (LLVM keeps them scalar; they cost little
    beside the block's threads). Written out for ``SUM_LANES`` = 8 lanes."""
    for k in range(count, SUM_BLOCK):
        block[k] = 0
    a0, a1, a2, a3, a4, a5, a6, a7 = lanes
    for k in range(0, SUM_BLOCK, SUM_LANES):
        a0 += block[k]
        a1 += block[k + 1]
        a2 += block[k + 2]
        a3 += block[k + 3]
        a4 += block[k + 4]
        a5 += block[k + 5]
        a6 += block[k + 6]
        a7 += block[k + 7]
    return (a0, a1, a2, a3, a4, a5, a6, a7)


def lanes_total(total, lanes):
    """``total`` plus the lanes' partial sums, added in lane order."""
    for v in lanes:
        total += v
    return total


def accumulate(acc, v):
    """``acc + v`` in ``acc``'s type (numpy scalar): a sum kept in a local rounds after
    each addition as the store into its array did (emit/sums.py)."""
    return type(acc)(acc + v)


def block_count(n, radius):
    """Blocks of rows for two-phase (even/odd) execution: every block at least
    ``2 * radius`` rows high, enough blocks to keep every core busy, and an even
    number of them (or one), so that on a ring of rows (a periodic stencil,
    derive/parallel.py) the first and the last block run in different phases."""
    height = 2 * radius if radius > 0 else 1
    blocks = min(n // height, 64)
    if blocks < 2:
        return 1
    return blocks - blocks % 2


def range_outside(start, stop, step, size):
    """Whether ``range(start, stop, step)`` has a value outside ``[0, size)`` (a bounds
    check made once before a loop; written without min/max for numba's CUDA target)."""
    lo = start
    hi = start
    if step > 0:
        if stop <= start:
            return False
        hi = start + (stop - start - 1) // step * step
    elif step < 0:
        if stop >= start:
            return False
        lo = start - (start - stop - 1) // (-step) * (-step)
    else:
        return False
    return lo < 0 or hi >= size


def index_outside_loop(index, start, stop, step, size):
    """Whether a loop over ``range(start, stop, step)`` runs and ``index`` is outside
    ``[0, size)`` (a loop-invariant index, checked once before the loop)."""
    if index >= 0 and index < size:
        return False
    return (step > 0 and stop > start) or (step < 0 and stop < start)


def fault(status, site, a, b, c):
    """Record a failed bounds check (site number, index or loop range) unless one is
    recorded already; the launcher raises (see adjoint/runtime/bounds.py)."""
    if status[1] == 0:
        if a > INT64_MAX:        # plain Python's int(1e30) is exact; an int64 holds less
            a = INT64_MAX
        elif a < -INT64_MAX:
            a = -INT64_MAX
        status[1] = site
        status[2] = a
        status[3] = b
        status[4] = c


INT64_MAX = 9223372036854775807
