"""Where arrays live: each device declared once, as runtime/targets.py declares the
backends.

A ``Device`` is one kind of memory and its buffers: how they are allocated (zeroed or
not), filled, copied and added into on the device, how host values go in and come back,
what memory of another library it wraps without a copy, and the span a buffer covers.
``HOST`` holds numpy arrays (device "cpu"); ``CUDA`` numba device arrays (device "cuda": a
GPU's memory, or the host memory numba's simulator keeps behind the same interface). A
``Target`` names the device its arrays go to (``Target.device``); ``Array`` and
runtime/buffers.py ask the device and never branch on its name, so a new kind of memory
is one ``Device`` subclass and ``register``.

Expects: numba.cuda only once a CUDA buffer is made. Guarantees: ``of(buf)`` is the
device holding ``buf``; ``named(device)`` is the device a string names ("cpu", "cuda",
"cuda:0"), or a ``ValueError`` naming the choices.
"""
import abc
import weakref

import numpy as np

from . import backend_cuda, pending


class Device(abc.ABC):
    """One kind of memory (see the module docstring). ``host``: its buffers are numpy
    arrays CPU code reads in place (``Array.numpy()`` returns the buffer itself). A
    subclass defines every abstract method (Python refuses to make one that does not);
    ``accepts``, ``check``, ``zeros`` and ``wrap`` have defaults."""
    name = None
    host = False

    def accepts(self, device):
        """Whether the string ``device`` names this device."""
        return device == self.name

    def check(self):
        """Raise where this device cannot be used here (no driver, no simulator)."""

    @abc.abstractmethod
    def holds(self, buf):
        """Whether ``buf`` is a buffer of this device."""

    @abc.abstractmethod
    def empty(self, shape, dtype):
        """A new buffer, its values unset."""

    def zeros(self, shape, dtype):
        buf = self.empty(shape, dtype)
        self.fill(buf, 0)
        return buf

    @abc.abstractmethod
    def from_host(self, values):
        """A new buffer holding the host array ``values``."""

    @abc.abstractmethod
    def to_host(self, buf, why="a copy of a device array to the host"):
        """The buffer's values as a host array (``why``: what asked, for a fault's message)."""

    @abc.abstractmethod
    def write(self, dst, values):
        """``dst[...] = values`` for host ``values`` of ``dst``'s size."""

    @abc.abstractmethod
    def fill(self, buf, value):
        """``buf[...] = value`` for a scalar ``value``."""

    @abc.abstractmethod
    def copy(self, dst, src):
        """``dst[...] = src`` for two buffers of this device, of one size."""

    @abc.abstractmethod
    def add(self, dst, src):
        """``dst += src`` for two flat buffers of this device, of one size and dtype."""

    def wrap(self, obj):
        """A buffer over the memory of ``obj`` (another library's array), without a copy;
        None when ``obj`` is not in this device's memory."""
        return None

    @abc.abstractmethod
    def may_alias(self, a, b):
        """Whether two buffers of this device may share memory."""

    @abc.abstractmethod
    def span(self, buf):
        """``(first byte, end byte)`` of a buffer's memory (watch.py names device memory by
        its first byte: one address space for the devices other than the host)."""


class Host(Device):
    """numpy arrays in host memory."""
    name = "cpu"
    host = True

    def holds(self, buf):
        return isinstance(buf, np.ndarray)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype)

    def from_host(self, values):
        return values

    def to_host(self, buf, why=None):
        return buf

    def write(self, dst, values):
        dst.reshape(-1)[...] = values.reshape(-1)

    def fill(self, buf, value):
        buf[...] = value

    copy = write

    def add(self, dst, src):
        dst += src.reshape(dst.shape)

    def may_alias(self, a, b):
        return np.may_share_memory(a, b)

    def span(self, buf):
        start = buf.__array_interface__["data"][0]
        return start, start + buf.nbytes


class Cuda(Device):
    """numba device arrays: a GPU's memory, or the simulator's (host memory behind the
    same interface). Fills, copies and adds run the runtime's kernels (backend_cuda.py):
    nothing moves a whole array through host memory when both ends are on the device."""
    name = "cuda"

    def accepts(self, device):
        return device == "cuda" or device.startswith("cuda:")

    def check(self):
        backend_cuda.require_cuda()

    def holds(self, buf):
        return hasattr(buf, "copy_to_host") and hasattr(buf, "copy_to_device")

    def empty(self, shape, dtype):
        from numba import cuda
        return cuda.device_array(shape, dtype)

    def from_host(self, values):
        from numba import cuda
        return cuda.to_device(np.ascontiguousarray(values))

    def to_host(self, buf, why="a copy of a device array to the host"):
        pending.check(why)      # the fault of a CUDA launch not yet checked (pending.py)
        return buf.copy_to_host()

    def write(self, dst, values):
        dst.copy_to_device(np.ascontiguousarray(values, dtype=dst.dtype).reshape(dst.shape))

    def fill(self, buf, value):
        backend_cuda.fill(_flat(buf), np.dtype(buf.dtype).type(value))

    def copy(self, dst, src):
        if np.dtype(src.dtype) == np.dtype(dst.dtype) or \
                np.dtype(src.dtype).kind == np.dtype(dst.dtype).kind == "f":
            # the runtime's copy kernel (a cast between float dtypes: to nearest, ties to
            # even): numba's copy_to_device calls the driver's cuMemcpyDtoD, which makes
            # the host wait for the copy
            backend_cuda.copy(_flat(dst), _flat(src))
        else:
            self.write(dst, self.to_host(src).astype(dst.dtype))

    def add(self, dst, src):
        backend_cuda.add(dst, src)

    def wrap(self, obj):
        if self.holds(obj):
            return obj
        if hasattr(obj, "__cuda_array_interface__"):
            return _wrap_cuda_interface(obj)
        return None

    def may_alias(self, a, b):
        if hasattr(a, "_ary") and hasattr(b, "_ary"):   # numba's simulator: host memory inside
            return np.may_share_memory(a._ary, b._ary)
        (s1, e1), (s2, e2) = span(a), span(b)
        return s1 < e2 and s2 < e1

    def span(self, buf):
        return span(buf)


def _flat(buf):
    return buf.reshape(_size(buf))


def _size(buf):
    n = getattr(buf, "size", None)
    return n if type(n) is int else int(np.prod(buf.shape))


def once_per_buffer(fn):
    """``fn(buf)`` computed once per buffer object while the object lives (cached under its
    id with a weak reference, so a collected buffer leaves nothing and a new object at its
    id is not mistaken for it; an object that cannot be weakly referenced is not cached)."""
    cache = {}      # id(buffer) -> (weakref.ref(buffer), fn(buffer))

    def cached(buf):
        hit = cache.get(id(buf))
        if hit is not None and hit[0]() is buf:
            return hit[1]
        value, key = fn(buf), id(buf)

        def forget(ref):
            if cache.get(key, (None,))[0] is ref:
                cache.pop(key, None)
        try:
            cache[key] = (weakref.ref(buf, forget), value)
        except TypeError:
            pass
        return value
    cached.__doc__, cached.__name__, cached.cache = fn.__doc__, fn.__name__, cache
    return cached


@once_per_buffer
def span(buf):
    """``(first byte, end byte)`` of a device buffer's memory, computed once per buffer
    object (numba builds a device array's ``__cuda_array_interface__`` anew each time it is
    read, and the alias checks of every launch ask for each argument's span)."""
    start = buf.__cuda_array_interface__["data"][0]
    return start, start + _size(buf) * np.dtype(buf.dtype).itemsize


def _wrap_cuda_interface(obj):
    """A numba device array over the memory of ``obj`` (``__cuda_array_interface__``),
    without a copy. Kernels index it as C-contiguous memory, so anything else is refused."""
    from ..errors import AdjointError
    from .types import as_dtype
    what = type(obj).__name__
    iface = obj.__cuda_array_interface__
    shape = tuple(int(n) for n in iface["shape"])
    dtype = np.dtype(iface["typestr"])
    try:
        as_dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise AdjointError(f"cannot wrap a {what} of dtype {dtype}: {exc}") from None
    if iface.get("mask") is not None:
        raise AdjointError(f"cannot wrap a {what} with a mask (__cuda_array_interface__ 'mask')")
    strides = iface.get("strides")
    if strides is not None and tuple(strides) != _c_strides(shape, dtype.itemsize) and \
            int(np.prod(shape)) > 1:
        raise AdjointError(f"cannot wrap a {what} with strides {tuple(strides)} (shape {shape}, "
                           f"{dtype}): kernels need C-contiguous memory; pass a contiguous copy "
                           "(e.g. tensor.contiguous())")
    if not backend_cuda.simulated():
        from numba import cuda
        return cuda.as_cuda_array(obj)
    # numba's simulator keeps "device" memory on the host: view it in place
    import ctypes
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    nbytes = int(np.prod(shape)) * dtype.itemsize
    ptr = iface["data"][0]
    if nbytes == 0:
        return FakeCUDAArray(np.empty(shape, dtype))
    raw = (ctypes.c_char * nbytes).from_address(ptr)
    return FakeCUDAArray(np.frombuffer(raw, dtype).reshape(shape))


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


HOST = Host()
CUDA = Cuda()
DEVICES = {m.name: m for m in (HOST, CUDA)}


def register(device):
    """Add a device (a ``Device`` whose ``name`` is new); returns it."""
    if device.name in DEVICES:
        raise ValueError(f"device {device.name!r} is already registered")
    DEVICES[device.name] = device
    return device


def unregister(name):
    """Remove device ``name`` (one ``register`` added; "cpu" and "cuda" stay)."""
    if name in ("cpu", "cuda"):
        raise ValueError(f"device {name!r} is built in")
    del DEVICES[name]


def named(device):
    """The device the string ``device`` names ("cpu", "cuda", "cuda:0", ...)."""
    hit = DEVICES.get(device)
    if hit is not None:
        return hit
    for m in DEVICES.values():
        if m.accepts(device):
            return m
    raise ValueError(f"unknown device {device!r}; use "
                     f"{' or '.join(repr(n) for n in DEVICES)}")


def of(buf):
    """The device holding buffer ``buf``."""
    if isinstance(buf, np.ndarray):
        return HOST
    for m in DEVICES.values():
        if m is not HOST and m.holds(buf):
            return m
    raise TypeError(f"not a buffer of any registered device: {type(buf).__name__}")
