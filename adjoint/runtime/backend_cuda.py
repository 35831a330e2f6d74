"""The CUDA backend: ``numba.cuda`` kernels, or numba's simulator under
``NUMBA_ENABLE_CUDASIM=1`` (how CI tests it on machines without a GPU).

Generated CUDA modules bind ``rt`` to this module: the runtime builtins
(``rt.div``, ``rt.sin``, ``rt.clamp``, ...: runtime/ieee.py) are device functions
(under the simulator, the plain-Python functions), and ``rt.launcher`` turns a
``@cuda.jit`` grid kernel into the ``forward``/``backward`` callables of a
``KernelSpec``.
"""
import threading
import warnings

import numpy as np

from ..errors import AdjointError
from . import helpers, pending
from .all_builtins import BUILTINS
from .spec import unavailable  # noqa: F401

NAME = "cuda"
float32 = np.float32      # rt.float32(c): a float32 kernel's literals (emit/precision.py)


def available():
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - any failure to load the driver means "no GPU"
        return False


def require_cuda():
    if not available():
        raise AdjointError("device='cuda' needs an NVIDIA GPU with a working CUDA driver, or "
                           "numba's simulator (set NUMBA_ENABLE_CUDASIM=1 before importing "
                           "adjoint); neither is available here. Use device='cpu'.")
    pending.cuda_used = True        # (ad.synchronize waits for the GPU from now on)


def simulated():
    import numba
    return bool(numba.config.ENABLE_CUDASIM)


_SIMULATOR = threading.RLock()   # re-entrant: a locked launch may zero a buffer (fill)
_CONFIGURING = threading.Lock()


def _configured(kernel, blocks, threads):
    """``kernel[blocks, threads]``, without numba's "Grid size N will likely result in GPU
    under-utilization" warning: adjoint's launches (its runtime's zeroing and copying
    kernels, and a kernel's grid, sized by the launch's ``dim``) would print it for every
    small array and launch. numba reads ``CUDA_LOW_OCCUPANCY_WARNINGS`` from its config
    module as it configures a launch, and has no per-kernel switch: it is off for this
    call only, under a lock, so that the user's own ``numba.cuda`` kernels still warn
    (one configured on another thread at this very moment would not)."""
    config = _numba_config()
    with _CONFIGURING:
        before = config.CUDA_LOW_OCCUPANCY_WARNINGS
        config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
        try:
            return kernel[blocks, threads]
        finally:
            config.CUDA_LOW_OCCUPANCY_WARNINGS = before


def _numba_config():
    if not _config:
        try:
            from numba.cuda.core import config      # numba-cuda (numba's own config module)
        except ImportError:                         # numba's built-in numba.cuda
            from numba.core import config
        _config.append(config)
    return _config[0]


_config = []


def _threads(ndim):
    if simulated():
        return {1: (32,), 2: (8, 4), 3: (4, 4, 2)}[ndim]
    return {1: (256,), 2: (16, 16), 3: (8, 8, 4)}[ndim]


def launcher(kernel, ndim, status=False, check=True, bounds=None, prints=False):
    """A callable ``(*dims, *args)`` launching ``kernel`` over ``dims`` threads.

    ``status``: the kernel takes a status array last (see runtime/bounds.py), where a
    thread whose loop overflows its stack writes the loop's line and one whose index
    is out of bounds the check's site. With ``check`` the launch is given a zeroed row
    of runtime/pending.py's pool and registered as pending: it does not wait for the
    kernel; the row is read, and a fault raised, where the host next waits for the GPU
    (``Array.numpy()``, the end of ``Tape.backward``, ``ad.synchronize()``, ...).
    Without ``check`` (a backward with no loop stacks and no index checks, which never
    writes it) a zeroed array made once is passed and never read. ``bounds`` (the
    kernel's ``Bounds``): checked before the launch, and names a reported fault.
    ``prints``: the kernel (or a func it calls) prints, and a GPU writes its threads'
    prints out only when the host waits for it: the launch waits (``_printed``), so
    that they appear after what Python printed before it and before what it prints
    next, and then reports a fault at once."""
    name = getattr(getattr(kernel, "py_func", kernel), "__name__", "kernel")

    def report(flags, args):
        """The error of a pending launch's status row ``flags`` (``args``: its arguments)."""
        if flags[1] and bounds is not None:
            return bounds.fault_error(flags, args)
        line = int(flags[0])
        if line:
            return AdjointError(f"{name}: the loop on line {line} ran more iterations in one "
                                "GPU thread than its stack holds; raise the bound with "
                                "@ad.kernel(loop_capacity=N)")
        return AdjointError(f"{name}: a GPU thread reported the fault {list(flags)}")

    def run(*args):
        dims, rest = args[:ndim], args[ndim:]
        if any(d == 0 for d in dims):
            return
        if bounds is not None:
            bounds.check_launch(dims, rest)
        threads = _threads(ndim)
        blocks = tuple((d + t - 1) // t for d, t in zip(dims, threads))
        if not status:
            go(blocks, threads, dims, rest)
        elif not check:
            go(blocks, threads, dims, (*rest, pending.unread()))
        else:
            # (the pool and the registry outside the simulator's lock: see pending.py)
            number, row = pending.take()
            try:
                go(blocks, threads, dims, (*rest, row))
            except BaseException:
                pending.discard(number)
                raise
            pending.register(number, report, rest, name, pending.caller())
            if prints:
                pending.check("the launch of a kernel that prints (it waits for the GPU)")

    def go(blocks, threads, dims, rest):
        if simulated():
            # the simulator runs each GPU thread as a Python thread on numpy scalars:
            # an overflow or inf - inf is IEEE there too, but numpy would warn. Warning
            # filters are process-wide, hence the lock (the simulator, which swaps the
            # ``cuda`` global of the kernel's module while it runs, is not thread-safe either)
            with _SIMULATOR, warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                _configured(kernel, blocks, threads)(*dims, *rest)
        elif prints:
            _printed(lambda: _configured(kernel, blocks, threads)(*dims, *rest))
        else:
            _configured(kernel, blocks, threads)(*dims, *rest)
    return run


def _printed(launch, *args):
    """``launch(*args)`` of a kernel that prints, on a GPU: Python's buffered output goes
    out first, and the device's after the kernel has run (``cuda.synchronize`` has the
    driver write it through C's ``stdout``, which is then flushed too)."""
    import sys
    from numba import cuda
    sys.stdout.flush()
    try:
        launch(*args)
    finally:            # (a fault's report too: what the threads printed before it)
        try:
            cuda.synchronize()
        finally:
            _flush_c_stdout()


def _flush_c_stdout():
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):   # no C library to ask (Windows): as it is
        pass


def refused(reason):
    """A backward that explains why this kernel has none on CUDA."""
    def run(*args):
        raise AdjointError(f"this kernel has no CUDA backward: {reason}; on a GPU the thread "
                           "whose value survived a colliding store is unknown. Accumulate "
                           "with += / ad.atomic_add, or run it on device='cpu'")
    return run


def _flat_grid(n):
    threads = _threads(1)[0]
    return (n + threads - 1) // threads, threads


def _flat_launch(name, out, *args):
    """Run the runtime's grid kernel ``name`` over the elements of flat ``out`` (in the
    simulator, which runs one kernel at a time, under its lock)."""
    if out.size:
        blocks, threads = _flat_grid(out.size)
        kernel = _configured(_kernels()[name], blocks, threads)
        if simulated():
            with _SIMULATOR:
                kernel(out, *args)
        else:
            kernel(out, *args)


def fill(out, value):
    """``out[:] = value`` on the device, for a flat device array."""
    _flat_launch("fill", out, value)


pending.fill[0] = fill          # (pending.py zeroes its status rows with it)


def add(out, src):
    """``out += src`` on the device, for flat device arrays of one size and dtype."""
    _flat_launch("add", out, src)


def copy(out, src):
    """``out[:] = src`` on the device, for flat device arrays of one size and dtype (a
    launch: the host does not wait, as it would for the driver's copy)."""
    _flat_launch("copy", out, src)


_compiled = {}
cuda = None     # numba.cuda, bound on first use (importing it here would cost every CPU user)


def _kernels():
    """The runtime's own grid kernels (compiled on first use, per dtype)."""
    global cuda
    if not _compiled:
        # a module global, so the simulator can swap in its fake ``cuda`` while they run
        import numba.cuda
        cuda = numba.cuda

        @cuda.jit
        def fill_kernel(out, value):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = value

        @cuda.jit
        def add_kernel(out, src):
            i = cuda.grid(1)
            if i < out.size:
                out[i] += src[i]

        @cuda.jit
        def copy_kernel(out, src):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = src[i]

        _compiled.update(fill=fill_kernel, add=add_kernel, copy=copy_kernel)
    return _compiled


def _fault(status, site, a, b, c):
    """``helpers.fault`` for GPU threads: the first to fail claims the record
    atomically, so its site and values are reported together."""
    if cuda.atomic.cas(status, 1, 0, site) == 0:
        if a > 9223372036854775807:      # the simulator's int(1e30) is a Python int
            a = 9223372036854775807
        elif a < -9223372036854775807:
            a = -9223372036854775807
        status[2] = a
        status[3] = b
        status[4] = c


FULL_WARP = 0xFFFFFFFF


def _warp_add1(arr, i, value):
    """``cuda.atomic.add(arr, i, value)``, with one atomic a warp where it can: when all 32
    lanes of the warp are here at once with the same index ``i``, their values are summed
    across the warp (five shuffles) and lane 0 adds the sum; otherwise each lane adds its
    own. The element gets the same terms, added in another order. (``match_any_sync``
    returns an int32, ``activemask`` a uint32: the mask keeps the comparison unsigned.)"""
    mask = cuda.activemask()
    if mask == FULL_WARP and (cuda.match_any_sync(mask, i) & FULL_WARP) == mask:
        value += cuda.shfl_xor_sync(mask, value, 16)
        value += cuda.shfl_xor_sync(mask, value, 8)
        value += cuda.shfl_xor_sync(mask, value, 4)
        value += cuda.shfl_xor_sync(mask, value, 2)
        value += cuda.shfl_xor_sync(mask, value, 1)
        if cuda.laneid == 0:
            cuda.atomic.add(arr, i, value)
    else:
        cuda.atomic.add(arr, i, value)


def _warp_add2(arr, i, j, value):
    """``_warp_add1`` for a 2-D element ``arr[i, j]``."""
    mask = cuda.activemask()
    if mask == FULL_WARP and (cuda.match_any_sync(mask, i) & FULL_WARP) == mask and \
            (cuda.match_any_sync(mask, j) & FULL_WARP) == mask:
        value += cuda.shfl_xor_sync(mask, value, 16)
        value += cuda.shfl_xor_sync(mask, value, 8)
        value += cuda.shfl_xor_sync(mask, value, 4)
        value += cuda.shfl_xor_sync(mask, value, 2)
        value += cuda.shfl_xor_sync(mask, value, 1)
        if cuda.laneid == 0:
            cuda.atomic.add(arr, (i, j), value)
    else:
        cuda.atomic.add(arr, (i, j), value)


def _lane_add1(arr, i, value):
    """``_warp_add1`` in the simulator (no warp intrinsics there): each thread's own add."""
    cuda.atomic.add(arr, i, value)


def _lane_add2(arr, i, j, value):
    cuda.atomic.add(arr, (i, j), value)


_DEVICE = {"range_outside": helpers.range_outside, "trip_count": helpers.trip_count,
           "index_outside_loop": helpers.index_outside_loop, "fault": _fault,
           "warp_add1": _warp_add1, "warp_add2": _warp_add2}
_SIMULATED = {"warp_add1": _lane_add1, "warp_add2": _lane_add2}


def _device_function(attr):
    """``rt.<attr>`` of generated CUDA code: a device function compiled on first use
    (under the simulator, which runs kernels as Python, a runtime builtin is its
    plain-Python meaning: runtime/ieee.py)."""
    if attr in BUILTINS:
        if simulated():
            return BUILTINS[attr].python
        fn = BUILTINS[attr].cuda
    elif attr in _DEVICE:
        fn = _SIMULATED.get(attr, _DEVICE[attr]) if simulated() else _DEVICE[attr]
    else:
        return None
    global cuda
    import numba.cuda
    cuda = numba.cuda       # _fault and the warp adds read cuda.* when they are compiled
    return cuda.jit(device=True)(fn)


def __getattr__(attr):
    """The device functions generated CUDA code calls as ``rt.<name>``, compiled on first use."""
    value = _device_function(attr)
    if value is None:
        raise AttributeError(attr)
    globals()[attr] = value
    return value
