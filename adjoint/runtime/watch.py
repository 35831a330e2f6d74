"""Which tapes watch which memory: every write adjoint performs is announced here first.

A tape watches the memory its recorded launches read (``watch``). Before adjoint
writes to memory -- a launch (recorded on any tape, or on none), an adjoint
launch, ``copy``/``clone``/``assign``, ``fill_``/``zero_``, a tape's seeds and
the backward of its steps (which write gradients) -- it calls ``before_write``,
and every tape watching that memory is told who is about to write it, while the
old values are still there: it keeps a copy of what its launches read, or notes
(or refuses) the overwrite.

Memory is named by its allocation (``memory_key``): a numpy array by the root of
its ``.base`` chain, so views, an ``Array`` and its ``numpy()`` all name the same
memory; a simulated CUDA array by the numpy array inside it; a real device array
by its device pointer. Writes adjoint does not perform (``a.numpy()[...] = v``,
in-place PyTorch operations on shared memory) are not seen.

Tapes are held weakly: a tape that is garbage collected stops watching. One lock
serializes watching and announcing (tapes on several threads stay consistent) and
guards the clean device memory's spans.

Clean memory: ``mark_clean(buf, owner)`` notes that an allocation adjoint zeroed (a new
gradient, ``zero_()``) holds only zeros; ``before_write`` and ``mark_dirty`` (memory
handed to the user: ``Array.numpy()``, ``.data``) forget it, and ``is_clean`` asks. A
backward adds into a clean gradient by storing (optimize/once.py). An entry lives as
long as the object holding the allocation, so freed memory reused is never clean.

``observe_writes(fn)`` also tells ``fn(buf, writer)`` about every write made on the
calling thread, watched or not, while it is in effect: a checkpointed segment uses it
to keep the values its writes replace (``adjoint/tapes/checkpoint.py``).
"""
import bisect
import threading
import weakref

import numpy as np

from . import buffers, devices

LOCK = threading.RLock()
_watchers = {}      # memory key -> {id(watcher): weakref.ref(watcher)}


class _ThreadState(threading.local):
    observers = ()      # (fn(buf, writer), ...) told of this thread's writes


_thread = _ThreadState()


@devices.once_per_buffer
def memory_key(buf):
    """A hashable name for the allocation holding ``buf`` (shared by its views and aliases).
    Computed once per buffer object (reading a pointer costs more than a launch's checks)."""
    host = getattr(buf, "_ary", buf)          # numba's simulator: device memory is a numpy array
    if isinstance(host, np.ndarray):
        while isinstance(host.base, np.ndarray):
            host = host.base
        return ("host", host.__array_interface__["data"][0])
    return ("device", buffers.device_span(buf)[0])


def watch(buf, watcher):
    """Tell ``watcher.before_write(key, writer, by)`` about every later write to ``buf``'s
    memory, until ``unwatch`` or until the watcher is garbage collected; returns the key."""
    key, wid = memory_key(buf), id(watcher)
    with LOCK:
        refs = _watchers.setdefault(key, {})
        if refs.get(wid) is None or refs[wid]() is not watcher:
            refs[wid] = weakref.ref(watcher, lambda ref: _forget(key, wid, ref))
    return key


def unwatch(key, watcher):
    with LOCK:
        ref = _watchers.get(key, {}).get(id(watcher))
        if ref is not None:
            _forget(key, id(watcher), ref)


def _forget(key, wid, ref):
    with LOCK:
        refs = _watchers.get(key)
        if refs is not None and refs.get(wid) is ref:
            del refs[wid]
            if not refs:
                del _watchers[key]


def before_write(buf, writer, by=None):
    """Announce that ``writer`` (a label such as "launch #2 of kernel 'f' (k.py:7)", or a
    function returning one, called only when someone watches ``buf`` or observes writes)
    is about to write ``buf``; ``by`` is the tape recording that write, if any. A
    watcher may raise to refuse the write: nothing has been written yet."""
    observers = _thread.observers
    if observers:
        if callable(writer):
            writer = writer()
        for observe in observers:
            observe(buf, writer)
    key = memory_key(buf)
    if _spans:
        _forget_clean(key, buf)
    else:                               # (no clean device memory: only this key's entry)
        _clean.pop(key, None)
    if key not in _watchers:                  # the common case: nobody read this memory
        return
    if callable(writer):
        writer = writer()
    with LOCK:
        for ref in list(_watchers.get(key, {}).values()):
            watcher = ref()
            if watcher is not None:
                watcher.before_write(key, writer, by)


def before_writes(bufs, keys, writer):
    """``before_write(buf, writer)`` for each of ``bufs``, host buffers named ``keys`` (their
    ``memory_key``, computed once by the caller for many calls: a capture's replay). Where
    nobody observes writes and nobody watches any of them, forgetting that they are clean
    is all that does."""
    if _thread.observers or not _watchers.keys().isdisjoint(keys):
        for buf in bufs:
            before_write(buf, writer)
        return
    for key in keys:
        _clean.pop(key, None)


def clean_unwatched(keys):
    """Those of ``keys`` (host memory keys) whose allocations are clean and watched by
    nobody; none while anybody observes writes."""
    if _thread.observers:
        return set()
    out = set()
    for key in keys:
        ref = _clean.get(key)
        if ref is not None and ref() is not None and key not in _watchers:
            out.add(key)
    return out


def is_whole(buf):
    """Whether ``buf`` is the whole of an allocation adjoint may note clean (``mark_clean``
    notes nothing else)."""
    return _whole(buf) is not None


def forget_clean(keys):
    """Forget that the host allocations named by ``keys`` are clean."""
    for key in keys:
        _clean.pop(key, None)


_clean = {}         # memory key -> weakref.ref(the object holding that allocation)
_spans = {}         # device memory key in _clean -> (first byte, end byte)
_starts = []        # the first bytes of _spans' keys, sorted (some may be stale: forgotten)
_longest = [0]      # the longest span ever noted, in bytes


def mark_clean(buf):
    """Note that ``buf``, the whole of an allocation that nothing outside adjoint shares,
    holds only zeros (adjoint just zeroed it). A view of part of an allocation is not
    noted: the rest of it may hold anything."""
    owner = _whole(buf)
    if owner is None:
        return
    key = memory_key(buf)
    span = buffers.device_span(buf) if key[0] == "device" else None

    def forget(ref):
        # no lock: a collection may run this on a thread holding another of adjoint's
        # locks (the simulator's); each pop is atomic, and forgetting too much is safe
        if _clean.get(key) is ref:
            _clean.pop(key, None)
            _spans.pop(key, None)
    try:
        ref = weakref.ref(owner, forget)
    except TypeError:                         # not weakly referenceable: never clean
        return
    with LOCK:      # (another thread may be reading _spans: _forget_clean)
        _clean[key] = ref
        if span is not None:
            if not _spans:
                _starts.clear()         # (all stale: their owners were collected)
            _spans[key] = span
            k = bisect.bisect_left(_starts, span[0])
            if k == len(_starts) or _starts[k] != span[0]:
                _starts.insert(k, span[0])
            _longest[0] = max(_longest[0], span[1] - span[0])


def mark_dirty(buf):
    """Forget that ``buf``'s allocation is clean (its memory is handed out, or written)."""
    if _clean:
        _forget_clean(memory_key(buf), buf)


def _forget_clean(key, buf):
    """``buf`` (named ``key``) is written or handed out. A real device array is named by
    its first byte, so a view of part of a clean one has another name: every clean
    device allocation it overlaps is forgotten too."""
    _clean.pop(key, None)
    if key[0] == "device" and _spans:
        start, end = buffers.device_span(buf)
        # under the lock: threads marking and forgetting device memory at once would
        # change _spans while this reads it (a real GPU's launches, not the simulator's).
        # A clean span overlapping [start, end) starts before ``end`` and at most the
        # longest span before ``start``: a bisection of the sorted first bytes finds the
        # few to look at (a long tape holds a clean gradient per array it made)
        with LOCK:
            hi = bisect.bisect_right(_starts, max(end, start))
            lo = bisect.bisect_right(_starts, start - _longest[0], 0, hi)
            gone = []
            for first in _starts[lo:hi]:
                k = ("device", first)
                span = _spans.get(k)    # (None: its owner was collected, ``forget`` ran)
                if span is None or span[0] < end and start < span[1] or k == key:
                    _clean.pop(k, None)
                    _spans.pop(k, None)
                    gone.append(first)
            for first in gone:
                del _starts[bisect.bisect_left(_starts, first)]


def is_clean(buf):
    """Whether ``buf`` lies in an allocation that holds only zeros (``mark_clean``) and
    that nothing has written, or been handed to the user, since."""
    ref = _clean.get(memory_key(buf))
    return ref is not None and ref() is not None


def _whole(buf):
    """The object holding ``buf``'s allocation when ``buf`` spans all of it and it is not
    memory from outside numpy (a torch tensor's, a ctypes buffer: written behind adjoint's
    back); else None. A device array is its own holder."""
    if buffers.owns_memory(buf):
        return buf                            # the common case: an array owning its memory
    host = getattr(buf, "_ary", buf)          # numba's simulator: device memory is a numpy array
    if not isinstance(host, np.ndarray):
        return buf
    root = host
    while isinstance(root.base, np.ndarray):
        root = root.base
    whole = root.base is None and root.nbytes == host.nbytes and \
        root.__array_interface__["data"][0] == host.__array_interface__["data"][0]
    return root if whole else None


def watched():
    """How many allocations are watched (for tests: a forgotten tape leaves none)."""
    with LOCK:
        return len(_watchers)


class observe_writes:
    """``with observe_writes(fn):`` calls ``fn(buf, writer)`` before every write adjoint
    makes on this thread (before the watchers are told), until the block ends."""

    def __init__(self, fn):
        self.fn = fn

    def __enter__(self):
        _thread.observers = _thread.observers + (self.fn,)
        return self

    def __exit__(self, *exc):
        _thread.observers = tuple(f for f in _thread.observers if f is not self.fn)
        return False
