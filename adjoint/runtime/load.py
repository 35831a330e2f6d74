"""Fewer threads on a busy machine: numba's parallel regions on the cores others leave free.

A parallel region splits its work among numba's threads and ends when the last of
them is done. Beside a process busy on one of two cores, one of the two threads is
descheduled for a time slice at a time and the region waits for it: the stencil's
fwd+bwd went from 11.4 ms quiet to 23.3 ms, where the same code on one thread took
18.5 ms, as the hand-written serial pair did (issue 39).

``govern()`` runs before each launch's kernel part on the numba backend
(``backend_numba.by_size``) and each replay of a capture. At most every
``INTERVAL`` seconds it reads how many tasks the machine is running
(``/proc/loadavg``'s fourth field, less this process's own running threads), keeps a
running mean of it (``SMOOTHING``; a core counts as taken from ``1 - FULL``) and sets
the calling thread's numba thread count (``numba.set_num_threads``) to the cores that
leaves, at least 1 and at most ``NUMBA_NUM_THREADS``.

Results do not change: the chunks a privatized sum is split into are fixed by
``NUMBA_NUM_THREADS`` (``backend_numba.MAX_CHUNKS``), not by the threads running them.
A thread whose count the user set (``numba.set_num_threads``) is left alone from then
on; ``ADJOINT_LOAD_GOVERNOR=0`` (``ad.config.load_governor``) turns it off. Where
``/proc/loadavg`` cannot be read (not Linux) it does nothing.
"""
import os
import threading
import time

from . import config

INTERVAL = 0.05         # seconds between two readings of the load
SMOOTHING = 0.5         # weight of a new reading in the running mean
FULL = 0.25             # a core counts as taken from a mean of 0.75 tasks on
_local = threading.local()
_cores = []             # the cores this process may run on (read once)


def others():
    """The tasks the machine is running now besides this process's own threads (numba's
    workers finishing a region count as ours), or None where that cannot be read. Where
    the machine runs one task, the caller, nothing else is read (the common quiet case:
    reading each of a process's threads' state costs about 18 us a thread with Python's
    files, and a process with JAX and Warp loaded has 19)."""
    try:
        running = int(_read("/proc/loadavg").split()[3].split(b"/")[0])
        return 0 if running <= 1 else max(0, running - _own_running())
    except (OSError, ValueError, IndexError):
        return None


def _read(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _own_running():
    """This process's threads running or runnable now (state R), at least 1 (the caller)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = _read(f"/proc/self/task/{tid}/stat")
        except OSError:
            continue                # (a thread that ended)
        end = stat.rindex(b")")
        n += stat[end + 2:end + 3] == b"R"
    return max(n, 1)


def cores():
    if not _cores:
        _cores.append(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else (os.cpu_count() or 1))
    return _cores[0]


def threads_for(busy, most):
    """The threads to run on with ``busy`` cores' worth of other work: the rest, at least
    1 and at most ``most``."""
    return max(1, min(most, cores() - int(busy + FULL)))


def govern():
    """Set the calling thread's numba thread count for the load now (see the module doc)."""
    st = _local.__dict__
    now = time.monotonic()
    if now < st.get("next", 0.0) or not config.load_governor:
        return
    st["next"] = now + INTERVAL
    if st.get("user"):
        return
    import numba
    most = numba.config.NUMBA_NUM_THREADS
    current = numba.get_num_threads()
    if current != st.get("set", most):
        st["user"] = True       # (the user set it: theirs from now on)
        return
    seen = others()
    if seen is None:
        st["next"] = float("inf")
        return
    busy = st["busy"] = SMOOTHING * seen + (1 - SMOOTHING) * st.get("busy", seen)
    want = threads_for(busy, most)
    if want != current:
        numba.set_num_threads(want)
        st["set"] = want


def release():
    """In the calling thread: numba's threads back to ``NUMBA_NUM_THREADS`` if the
    governor lowered them, and the load seen forgotten (the next ``govern`` reads it
    afresh). For a benchmark that times numba code of its own after adjoint's (numba's
    thread count is the calling thread's, for every parallel function it calls)."""
    st = _local.__dict__
    if "set" in st and not st.get("user"):
        import numba
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    st.clear()
