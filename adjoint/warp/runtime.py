"""The runtime calls of a Warp program's ``__main__``, on adjoint's devices: ``wp.launch``,
``wp.init``, ``wp.get_device``, ``wp.ScopedDevice``, ``wp.ScopedTimer``,
``wp.synchronize``, ``wp.config``, the memory-pool queries.

Where Warp's CPU device has an answer, these give it: a timer times and prints as Warp's
(``name took 1.23 ms``), a synchronize waits for what is pending (nothing on the CPU), the
memory-pool queries answer False or raise Warp's ``ValueError`` on the CPU. A device is
"cpu" or "cuda" (numba.cuda, when a GPU or numba's simulator is there); selecting one
selects adjoint's backend: ``wp.set_device`` for the process (``ad.use_backend``),
``wp.ScopedDevice`` for a block in one thread or task (``ad.backend_scope``).
"""
import inspect
import sys
import time

import numpy as np

from ..runtime import backend_cuda
from ..runtime import config as _ad_config
from ..runtime.array import Array, default_device
from ..runtime.jit import backend_scope, cpu_backend_name, use_backend
from ..runtime.launch import launch as _ad_launch
from ..runtime.pending import synchronize
from ..runtime.vectypes import VectorType
from .arrays import device_of
from .errors import refuse


# -- launches -------------------------------------------------------------------------

def launch(kernel, dim, inputs=(), outputs=(), adj_inputs=None, adj_outputs=None,
           device=None, stream=None, adjoint=False, record_tape=True, record_cmd=False,
           max_blocks=0, block_dim=256):
    """``wp.launch`` with Warp's arguments: ``ad.launch``'s, ``device`` a Warp device,
    empty ``adj_inputs``/``adj_outputs`` meaning none given. ``stream``, ``max_blocks`` and
    ``block_dim`` have no effect (adjoint's launches choose their own); ``record_cmd``
    (a launch object replayed later) is refused."""
    if record_cmd:
        raise refuse("wp.launch(record_cmd=True)", "a launch runs when it is called; there "
                     "is no launch object to replay")
    device = device_of(device)
    inputs, outputs = _vectors(kernel, list(inputs), list(outputs), device)
    return _ad_launch(kernel, tuple(dim) if isinstance(dim, list) else dim, inputs, outputs,
                      device=device, adjoint=adjoint,
                      adj_inputs=adj_inputs or None, adj_outputs=adj_outputs or None,
                      record_tape=record_tape)


def _vectors(kernel, inputs, outputs, device):
    """``inputs``, ``outputs`` with a tuple or list given for a vector parameter (``wp.vec3``)
    made that vector, as Warp takes ``(1.0, 2.0, 3.0)`` there; on a CUDA launch such a
    value (or a ``wp.vec3(...)``, a numpy array) is copied to the device."""
    args = inputs + outputs
    if not any(isinstance(a, (tuple, list, np.ndarray)) for a in args):
        return inputs, outputs
    params = list(inspect.signature(kernel.pyfunc).parameters.values())
    where = device or next((a.device for a in args if isinstance(a, Array)), None) or \
        default_device()
    for k, (p, a) in enumerate(zip(params, args)):
        vt = p.annotation
        if isinstance(vt, VectorType) and isinstance(a, (tuple, list, np.ndarray)):
            value = np.asarray(a, dtype=vt.dtype)
            value = value.reshape(vt.shape) if value.size == vt.size else value
            args[k] = value if str(where) == "cpu" else Array(value, device=where)
    return args[:len(inputs)], args[len(inputs):]


# -- devices --------------------------------------------------------------------------

class Device:
    """A device as Warp describes one: ``alias`` ("cpu", "cuda:0"), ``is_cpu``, ``is_cuda``."""

    def __init__(self, alias):
        self.alias = "cuda:0" if alias == "cuda" else alias
        self.is_cpu = self.alias == "cpu"
        self.is_cuda = not self.is_cpu
        self.ordinal = -1 if self.is_cpu else int(self.alias.partition(":")[2] or 0)
        self.name = "CPU" if self.is_cpu else "CUDA (numba.cuda)"
        self.is_uva = False
        self.is_mempool_supported = False
        self.is_mempool_enabled = False

    def __str__(self):
        return self.alias

    def __repr__(self):
        return f"'{self.alias}'"

    def __eq__(self, other):
        return str(other) in (self.alias, "cuda" if self.is_cuda else "cpu")

    def __hash__(self):
        return hash(self.alias)

    def __enter__(self):            # (Warp's devices are context managers too)
        self._scope = ScopedDevice(self)
        return self._scope.__enter__()

    def __exit__(self, *exc):
        self._scope.__exit__(*exc)


def init():
    """``wp.init()``: nothing to initialize (adjoint is ready once imported)."""


def get_device(ident=None):
    """The device ``ident`` names, or the current one (where arrays and launches go)."""
    if isinstance(ident, Device):
        return ident
    alias = device_of(ident) or default_device()
    if alias != "cpu" and not backend_cuda.available():
        backend_cuda.require_cuda()             # (raises, naming what is missing)
    return Device(alias)


def _backend_of(device):
    """adjoint's backend for a Warp device: cuda, or the CPU backend (numba, or python
    under ``ADJOINT_JIT=0``)."""
    return cpu_backend_name() if get_device(device).is_cpu else "cuda"


def set_device(ident):
    """Make ``ident`` the current device of the process (``ad.use_backend``): "cuda"
    selects adjoint's cuda backend, "cpu" the CPU backend."""
    use_backend(_backend_of(ident))


class ScopedDevice:
    """``with wp.ScopedDevice("cpu"):`` the current device for a block, in this thread or
    task only (``ad.backend_scope``)."""

    def __init__(self, device):
        self.device = get_device(device)

    def __enter__(self):
        self._scope = backend_scope(_backend_of(self.device))
        self._scope.__enter__()
        return self.device

    def __exit__(self, *exc):
        return self._scope.__exit__(*exc)


def is_cpu_available():
    return True


def is_cuda_available():
    return backend_cuda.available()


def get_cuda_device_count():
    if not backend_cuda.available():
        return 0
    from numba import cuda
    return len(cuda.gpus)


def get_cuda_devices():
    return [Device(f"cuda:{k}") for k in range(get_cuda_device_count())]


def get_devices():
    return [Device("cpu")] + get_cuda_devices()


def get_preferred_device():
    return Device("cuda:0") if is_cuda_available() else Device("cpu")


def is_device_available(device):
    d = device_of(device)
    return d == "cpu" or (is_cuda_available() and d.partition(":")[0] == "cuda")


def synchronize_device(device=None):
    """Wait for the launches on ``device`` (adjoint waits for all of them)."""
    synchronize()


# -- memory pools: Warp's answers on the CPU --------------------------------------------

def _pool_device(device, call):
    if get_device(device).is_cpu:
        raise ValueError("Memory pools are only supported on CUDA devices")
    raise refuse(f"wp.{call} on a CUDA device", "adjoint's CUDA arrays are numba's; it "
                 "controls no memory pool", depth=2)


def is_mempool_supported(device):
    return False


def is_mempool_enabled(device):
    return False


def set_mempool_enabled(device, enable):
    if enable:
        _pool_device(device, "set_mempool_enabled")


def get_mempool_release_threshold(device=None):
    _pool_device(device, "get_mempool_release_threshold")


def set_mempool_release_threshold(device, threshold):
    _pool_device(device, "set_mempool_release_threshold")


def get_mempool_used_mem_current(device=None):
    _pool_device(device, "get_mempool_used_mem_current")


def get_mempool_used_mem_high(device=None):
    _pool_device(device, "get_mempool_used_mem_high")


def is_mempool_access_supported(target_device, peer_device):
    return False


def is_mempool_access_enabled(target_device, peer_device):
    return False


# -- timing ---------------------------------------------------------------------------

class ScopedTimer:
    """``with wp.ScopedTimer("step"):`` times the block and prints ``step took 1.23 ms``
    (indented by nesting, as Warp's); ``.elapsed`` is the time in milliseconds, ``dict``
    collects it under ``name``; ``synchronize=True`` waits for pending launches at both
    ends; ``active=False`` does nothing. Warp's CUDA activity timing is not there."""

    indent = -1

    def __init__(self, name, active=True, print=True, detailed=False, dict=None,  # noqa: A002
                 use_nvtx=False, color="rapids", synchronize=False, cuda_filter=0,
                 report_func=None, skip_tape=False):
        self.name, self.active, self.print = name, active, print
        self.dict, self.synchronize, self.report_func = dict, synchronize, report_func
        self.elapsed = 0.0
        if dict is not None:
            dict.setdefault(name, [])

    def __enter__(self):
        if self.active:
            if self.synchronize:
                synchronize()
            ScopedTimer.indent += 1
            self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if not self.active:
            return
        if self.synchronize:
            synchronize()
        self.elapsed = (time.perf_counter() - self._start) * 1000.0
        if self.dict is not None:
            self.dict[self.name].append(self.elapsed)
        if self.report_func is not None:
            self.report_func([], "")
        if self.print:
            print(f"{'  ' * ScopedTimer.indent}{self.name} took {self.elapsed:.2f} ms",
                  file=sys.stdout)
        ScopedTimer.indent -= 1


# -- config ---------------------------------------------------------------------------

class Config:
    """``wp.config``: Warp's flags. ``verify_fp`` is adjoint's own (``ad.config.verify_fp``:
    a launch writing an inf or nan raises ``ad.NonFiniteError``); ``enable_backward``
    is the default of kernels decorated after it is set; the others (``mode``,
    ``verbose``, ``quiet``, ``max_unroll``, ...) are kept and change nothing (adjoint
    checks array bounds in every mode)."""

    def __init__(self):
        vars(self).update(mode="release", verbose=False, quiet=False, enable_backward=True,
                          max_unroll=16, cache_kernels=True, kernel_cache_dir=None,
                          print_launches=False, verify_cuda=False, lineinfo=False,
                          version="adjoint")

    @property
    def verify_fp(self):
        return _ad_config.verify_fp

    @verify_fp.setter
    def verify_fp(self, value):
        _ad_config.verify_fp = bool(value)

    def __repr__(self):
        return f"wp.config({', '.join(f'{k}={v!r}' for k, v in sorted(vars(self).items()))})"


config = Config()
