"""Every name generated code reads from the runtime, written down in one place.

A generated module binds ``rt`` to a backend module -- ``adjoint.runtime.backend()``
(python or numba) in a CPU module, ``adjoint.runtime.backend("cuda")`` in a CUDA
module -- and calls ``rt.<name>`` for whatever it does not spell as plain Python
or numba.cuda. ``RT`` lists each such name, the targets whose modules use it and
what it is; a backend provides every name of its target (``required``). The
runtime builtins (``rt.div``, ``rt.sin``, ...: runtime/ieee.py ``BUILTINS``)
are used by both targets. Generated modules also build their specs from the
classes ``adjoint.runtime.<name>`` in ``MODULE``.

tests/runtime/test_runtime_names.py checks both directions: every backend (python,
numba, the CUDA simulator) provides each name of its target, and every
``rt.<name>`` and ``adjoint.runtime.<name>`` in generated modules is listed
here. A new helper in emitted code is one line here plus its definition in the
backends of its targets.
"""
from dataclasses import dataclass

from .all_builtins import BUILTINS
from .targets import View

CPU, CUDA = "cpu", "cuda"
BOTH = (CPU, CUDA)

# which code each backend serves (runtime/targets.py), as registered
BACKEND_TARGET = View(lambda t: t.code.name)


@dataclass(frozen=True)
class Needed:
    """An ``rt.<name>`` of generated code: the targets using it, and what it is."""
    targets: tuple
    what: str


HELPERS = {
    # compiling (a CUDA module decorates with numba.cuda.jit itself)
    "jit": Needed((CPU,), "decorator of a func's functions: numba.njit, or none (python)"),
    "jit_inline": Needed((CPU,), "decorator of a kernel's thread functions: inlined"),
    "jit_grid": Needed((CPU,), "decorator of a kernel's grid functions: njit(parallel=True)"),
    "jit_small": Needed((CPU,), "decorator of a kernel's serial loops for small launches"),
    # the CPU grid loop and its parallel plans (emit/module.py)
    "prange": Needed((CPU,), "the grid loop's range (numba.prange)"),
    "signed": Needed((CPU,), "a prange index as a signed int"),
    "by_size": Needed((CPU,), "a part's launchable function: its serial loop for a launch "
                       "of less work than PARALLEL_MIN_THREADS threads, else its parallel plan"),
    "chunk_count": Needed((CPU,), "how many chunks a parallel backward splits the grid into"),
    "chunk_start": Needed((CPU,), "the first thread of a chunk or block"),
    "private_copies": Needed((CPU,), "a chunk's own copies of an adjoint array"),
    "add_chunks": Needed((CPU,), "the chunks' copies summed into the adjoint array"),
    "chunk_sums": Needed((CPU,), "a zeroed partial sum per chunk of an element kept in a local"),
    "zero_of": Needed((CPU,), "a zero of an array's dtype: a small launch's partial sum"),
    "add_sums": Needed((CPU,), "an element plus the chunks' partial sums, in chunk order"),
    "SUM_BLOCK": Needed((CPU,), "threads per block of a chunk whose sums are kept in lanes"),
    "lane_block": Needed((CPU,), "room for a block's values of a sum kept in lanes"),
    "block_size": Needed((CPU,), "threads in a block of a row whose sums are kept in lanes"),
    "zero_lanes": Needed((CPU,), "a chunk's zeroed lanes (partial sums) of a sum"),
    "add_lanes": Needed((CPU,), "a block's values added to the lanes, value k to lane k % 8"),
    "lanes_total": Needed((CPU,), "a partial sum plus its lanes, in lane order"),
    "accumulate": Needed((CPU,), "a local partial sum plus a value, in the sum's dtype"),
    "block_count": Needed((CPU,), "how many blocks a stencil backward runs (even, then odd)"),
    "zero_fill": Needed((CPU,), "zero a gathered array before a clean gathered backward "
                        "falls back to the plan's grid (emit/grid.py choose)"),
    # loop stacks (derive/loops.py; a CUDA thread keeps its own in local arrays)
    "trip_count": Needed(BOTH, "iterations of range(start, stop, step): a stack's size, and "
                         "a stored loop's count (optimize/store.py)"),
    "stack_new_float": Needed((CPU,), "a float64 loop stack"),
    "stack_new_float32": Needed((CPU,), "a float32 loop stack (float32 kernels)"),
    "stack_new_int": Needed((CPU,), "an int64 loop stack"),
    "stack_new_bool": Needed((CPU,), "a bool loop stack"),
    "stack_push": Needed((CPU,), "push onto a loop stack, growing it when full"),
    # bounds checks (derive/bounds.py, emit/bounds.py, runtime/bounds.py)
    "checked": Needed((CPU,), "a grid function behind its launch's bounds checks"),
    "range_outside": Needed(BOTH, "whether a loop's range leaves an array axis"),
    "index_outside_loop": Needed(BOTH, "whether a loop-invariant index is out of bounds "
                                       "while the loop runs"),
    "fault": Needed(BOTH, "a thread's record of its out-of-bounds index"),
    # precision (emit/precision.py)
    "float32": Needed(BOTH, "a float32 kernel's literals and int-to-float conversions"),
    # the parts of a KernelSpec (emit/spec.py)
    "unavailable": Needed(BOTH, "a part a kernel lacks (a JVP, a backward), with the reason"),
    "launcher": Needed((CUDA,), "a @cuda.jit grid kernel as a launchable function"),
    "refused": Needed((CUDA,), "a CUDA backward that says why the kernel has none"),
    # pass warp_sums (emit/warp.py)
    "warp_add1": Needed((CUDA,), "an atomic add into arr[i] summed across a warp whose lanes "
                                 "all add there, one atomic a warp"),
    "warp_add2": Needed((CUDA,), "warp_add1 for arr[i, j]"),
}

RT = {**HELPERS,
      **{name: Needed(BOTH, "a runtime builtin (runtime/ieee.py)") for name in BUILTINS}}

# adjoint.runtime.<name> in generated modules (the specs they export, the backend they bind)
MODULE = ("backend", "Bounds", "FuncSpec", "KernelSpec", "ParamSpec", "Site")


def required(target):
    """The sorted ``rt.<name>`` names a backend serving ``target`` ("cpu", "cuda") provides."""
    return sorted(name for name, need in RT.items() if target in need.targets)
