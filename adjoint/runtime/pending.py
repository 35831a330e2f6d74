"""Faults of asynchronous CUDA launches, reported where the host next waits for the GPU.

A CUDA kernel that checks indices where it uses them, or keeps loop stacks, cannot
raise: a thread that fails writes the fault into a small status row on the device
(the layout of runtime/bounds.py) and stops. Its launch does not wait to read it back.
``backend_cuda.launcher`` takes a zeroed row from this module's pool (``take``),
launches the kernel with it, registers the launch as *pending* (``register``) and
returns at once, so checked launches queue on the GPU as unchecked ones do.

Guarantees: ``check(where)`` reads the rows of every pending launch in one
device-to-host copy and raises the fault of the first pending launch, in launch order,
that faulted (the ``BoundsError`` or loop-capacity ``AdjointError`` a launch that
waited would have raised, with a last line naming that launch and where the fault was
found). Every pending launch it read is forgotten and the rows that faulted are zeroed
again; later launches that faulted too are counted, not reported.

``check`` runs wherever adjoint hands device values to the host or waits for the GPU
(``Array.numpy()`` and what reads through it, adjoint's own device-to-host copies, the
end of ``Tape.backward``, ``adjoint.torch`` on CUDA tensors, a kernel that prints,
``ad.synchronize()``), so a fault is raised before any value computed after it reaches
the host through adjoint. When every row of the pool is pending (``SLOTS``), the next
checked launch checks first. Values read by other means (numba's ``copy_to_host`` of
``Array.data``, a wrapped tensor) bypass adjoint: call ``ad.synchronize()`` first.

The registry is one per process, as the GPU's launch order is: a check on any thread
reports the first fault of a launch made on any thread. The CPU backends never come
here: their launches raise at the launch. See docs/backends.md, "The CUDA backend".
"""
import heapq
import sys
import threading

import numpy as np

from ..errors import LIBRARY_DIRS, PACKAGE_DIR, user_frames
from .bounds import STATUS_SIZE

SLOTS = 256                     # status rows: checked launches pending at once

_LOCK = threading.Lock()        # the pool of rows and the pending list
_CHECKING = threading.Lock()    # one check at a time: a second waits for the first's verdict
_pending = []                   # [(row, report, args, name, site)], in launch order
_free = []                      # a heap of free row numbers (the lowest is taken first)
_rows = []                      # [the (SLOTS, STATUS_SIZE) device array, its rows]
_unread = []                    # [the status array of kernels that never write one]
cuda_used = False               # a CUDA array was made in this process (backend_cuda)
fill = [None]                   # [backend_cuda.fill], set by backend_cuda as it loads (the
#                                 runtime's zero-fill kernel; this module is below it)


def pending():
    """How many launches are pending (not yet checked)."""
    return len(_pending)


def take():
    """``(number, row)``: a zeroed status row of the pool for one launch; when every row
    is pending, the pending launches are checked first (which may raise their fault)."""
    while True:
        with _LOCK:
            if not _rows:
                _allocate()
            if _free:
                k = heapq.heappop(_free)
                return k, _rows[1][k]
        check(f"a CUDA launch ({SLOTS} checked launches were pending)")


def _allocate():
    from numba import cuda

    status = cuda.device_array((SLOTS, STATUS_SIZE), np.int64)
    fill[0](status.reshape(SLOTS * STATUS_SIZE), np.int64(0))
    _rows[:] = [status, [status[k] for k in range(SLOTS)]]
    _free[:] = range(SLOTS)         # (sorted: a heap)


def register(number, report, args, name, site):
    """Launch ``name`` (a grid kernel's name), made at ``site`` (``(file, line)`` or None)
    with status row ``number`` and arguments ``args``, is pending: ``report(flags,
    args)`` returns the error of its row ``flags`` when a thread faulted."""
    with _LOCK:
        _pending.append((number, report, args, name, site))


def discard(number):
    """Put row ``number`` back, zeroed, for a launch that raised before it was queued
    (or, in the simulator, while its threads ran)."""
    fill[0](_rows[1][number], np.int64(0))
    with _LOCK:
        heapq.heappush(_free, number)


def unread():
    """The zeroed status array passed to kernels that never write theirs (a backward
    with no loop stacks and no index checks): never read, shared by all of them."""
    if not _unread:
        from numba import cuda

        status = cuda.device_array(STATUS_SIZE, np.int64)
        fill[0](status, np.int64(0))
        _unread.append(status)
    return _unread[0]


def caller():
    """``(file, line)`` of the innermost frame outside adjoint's package and below it the
    libraries it calls (the user's line that launched, directly or through a tape,
    ``adjoint.torch`` or a library such as PyTorch's autograd), or None."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(PACKAGE_DIR) or name.startswith(LIBRARY_DIRS) or
                name.startswith("<frozen")):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


def check(where):
    """Raise the fault of the first pending launch that faulted (see the module doc);
    ``where``: the call that found it, named in the error. Nothing to do (and no wait)
    when no launch is pending."""
    if not _pending:
        return
    with _CHECKING:
        with _LOCK:
            entries = list(_pending)
        if not entries:             # (another thread's check took them)
            return
        flags = _rows[0][:max(e[0] for e in entries) + 1].copy_to_host()    # waits for the GPU
        faulted = [e for e in entries if flags[e[0], 0] or flags[e[0], 1]]
        if faulted:
            for e in faulted:
                fill[0](_rows[1][e[0]], np.int64(0))
        with _LOCK:
            del _pending[:len(entries)]     # (launches only append: these are the first)
            for e in entries:
                heapq.heappush(_free, e[0])
    if faulted:
        raise _error(faulted[0], flags[faulted[0][0]], where, len(faulted) - 1)


def _error(entry, flags, where, more):
    _, report, args, name, site = entry
    exc = report(flags, args)
    at = f" at {site[0]}:{site[1]}" if site else ""
    note = (f"(found by {where}: CUDA launches run asynchronously; the launch that faulted "
            f"is that of {name}{at}")
    if more:
        note += f"; {more} later launch(es) faulted too, not reported"
    exc.args = (f"{exc.args[0] if exc.args else ''}\n{note})", *exc.args[1:])
    return exc


@user_frames
def synchronize():
    """Wait for every CUDA launch to finish, then raise the fault of the first launch that
    faulted since the last check (``check``); nothing on the CPU backends, whose launches
    raise at the launch."""
    if cuda_used:
        from numba import cuda
        cuda.synchronize()
    check("ad.synchronize()")
