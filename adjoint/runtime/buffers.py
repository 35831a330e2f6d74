"""Device-neutral operations on raw buffers: numpy arrays (cpu) or numba device
arrays (cuda), each operation asked of the device holding the buffer (devices.py).
``Array`` and the tape use these, so that on the GPU a zeroed gradient, a seed, a
copy or a copy's backward stays on the device: nothing here moves a whole array
through host memory when both ends are on the GPU.

Mixed pairs (a host source into a device buffer, or the reverse) go through
one host copy of the region involved, never of the whole array.
"""
import numpy as np

from . import devices


def refuse_complex(values, what):
    """``values`` unchanged, unless they are complex: a ``TypeError`` naming ``what``
    (adjoint arrays hold real numbers; a complex value is never cast to its real part)."""
    dtype = values.dtype if isinstance(values, np.ndarray) else np.asarray(values).dtype
    if dtype.kind == "c":
        raise TypeError(f"{what}: complex values ({dtype}) are not supported; adjoint arrays "
                        "hold float32, float64, int32 or int64: pass the real and imaginary "
                        "parts as two arrays")
    return values


def on_host(buf):
    return isinstance(buf, np.ndarray)


def owns_memory(buf):
    """Whether ``buf`` is a numpy array holding its own allocation (no view of another):
    two such arrays share memory only if they are one array."""
    return type(buf) is np.ndarray and buf.base is None


def size(buf):
    """How many elements ``buf`` holds (numpy and numba device arrays know it; ``np.prod``
    of a shape costs microseconds)."""
    n = getattr(buf, "size", None)
    return n if type(n) is int else int(np.prod(buf.shape))


def flat(buf, offset=0, count=None):
    """A view of elements ``[offset, offset + count)`` of the flattened buffer."""
    n = size(buf)
    count = n - offset if count is None else count
    view = buf.reshape(-1) if on_host(buf) else buf.reshape(n)
    return view[offset:offset + count]


def zeros(shape, dtype, device):
    """A zeroed buffer on ``device`` (on cuda, zeroed by a kernel: no host transfer)."""
    return devices.named(device).zeros(shape, dtype)


def empty(shape, dtype, device):
    """An uninitialised buffer on ``device``."""
    return devices.named(device).empty(shape, dtype)


def empty_like(buf):
    return np.empty_like(buf) if on_host(buf) else devices.of(buf).empty(buf.shape, buf.dtype)


def fill(buf, value):
    devices.of(buf).fill(buf, value)


def to_host(buf):
    """A host array holding the buffer's values (the buffer itself on the host); a device
    buffer's after the fault of any CUDA launch not yet checked is raised (pending.py)."""
    return buf if on_host(buf) else devices.of(buf).to_host(buf)


def clone(buf):
    """A copy on the buffer's own device."""
    out = empty_like(buf)
    copy_into(out, buf)
    return out


def copy_into(dst, src):
    """``dst[...] = src`` for buffers of one size, on either device (a mixed pair goes
    through the host values of the source)."""
    into, out_of = devices.of(dst), devices.of(src)
    if into is out_of and size(src) == size(dst):
        into.copy(dst, src)
    else:
        into.write(dst, out_of.to_host(src))


def add_into(dst, src):
    """``dst += src`` for flat buffers of one size, on either device."""
    into = devices.of(dst)
    if devices.of(src) is not into or \
            not into.host and np.dtype(src.dtype) != np.dtype(dst.dtype):
        src = into.from_host(np.ascontiguousarray(to_host(src), dtype=dst.dtype)
                             .reshape(dst.shape))
    into.add(dst, src)


def device_span(buf):
    """``(first byte, end byte)`` of a device buffer's memory (``Device.span``)."""
    return devices.of(buf).span(buf)


def may_alias(a, b):
    """Whether two buffers may share memory (one array, or views of one)."""
    if owns_memory(a) and owns_memory(b):
        return a is b       # host arrays owning their memory: two allocations, or one
    on = devices.of(a)
    return on is devices.of(b) and on.may_alias(a, b)


_NONE = frozenset()


def shared(bufs):
    """The positions in ``bufs`` of the buffers that may share memory with another of them
    (empty, and found at once, for distinct host arrays owning their memory)."""
    ids = set()
    for b in bufs:      # (a loop: this runs on every launch and every backward step)
        if type(b) is not np.ndarray or b.base is not None or id(b) in ids:
            break
        ids.add(id(b))
    else:
        return _NONE
    return frozenset(j for j, a in enumerate(bufs)
                     if any(may_alias(a, b) for m, b in enumerate(bufs) if m != j))


def call_unaliased(fn, head, adjs, alias=None, tail=()):
    """``fn(*head, *adjs, *tail)`` with adjoint buffers that never share memory.

    Generated backward passes treat each adjoint parameter as its own array: a
    parallel plan reasons about each one separately, and numba may reorder two
    updates of one element made through two parameters. When one array is passed
    for two parameters, each later alias accumulates into a zeroed scratch buffer
    that is added into the shared one afterwards. ``alias``: ``shared(adjs)``, if the
    caller has it."""
    if not (shared(adjs) if alias is None else alias):
        fn(*head, *adjs, *tail)
        return
    adjs = list(adjs)
    scratch = []
    for k, buf in enumerate(adjs):
        if any(may_alias(buf, other) for other in adjs[:k]):
            adjs[k] = devices.of(buf).zeros(buf.shape, buf.dtype)
            scratch.append((buf, adjs[k]))
    fn(*head, *adjs, *tail)
    for common, own in scratch:
        if on_host(common):
            common += own       # any layout: flat() of a strided host view would be a copy
        else:
            add_into(flat(common), flat(own))
