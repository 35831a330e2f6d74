"""Device-neutral operations on raw buffers: numpy arrays (cpu) or numba device
arrays (cuda). ``Array`` and the tape use these, so that on the GPU a zeroed
gradient, a seed, a copy or a copy's backward stays on the device: nothing
here moves a whole array through host memory when both ends are on the GPU.

Mixed pairs (a host source into a device buffer, or the reverse) go through
one host copy of the region involved, never of the whole array.
"""
import weakref

import numpy as np

from . import backend_cuda, pending


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
    if device == "cpu":
        return np.zeros(shape, dtype)
    from numba import cuda
    buf = cuda.device_array(shape, dtype)
    fill(buf, 0)
    return buf


def empty(shape, dtype, device):
    """An uninitialised buffer on ``device``."""
    if device == "cpu":
        return np.empty(shape, dtype)
    from numba import cuda
    return cuda.device_array(shape, dtype)


def empty_like(buf):
    if on_host(buf):
        return np.empty_like(buf)
    from numba import cuda
    return cuda.device_array(buf.shape, buf.dtype)


def fill(buf, value):
    if on_host(buf):
        buf[...] = value
        return
    backend_cuda.fill(flat(buf), np.dtype(buf.dtype).type(value))


def to_host(buf):
    """A host array holding the buffer's values (the buffer itself on the host); a device
    buffer's after the fault of any CUDA launch not yet checked is raised (pending.py)."""
    if on_host(buf):
        return buf
    pending.check("a copy of a device array to the host")
    return buf.copy_to_host()


def clone(buf):
    """A copy on the buffer's own device."""
    out = empty_like(buf)
    copy_into(out, buf)
    return out


def copy_into(dst, src):
    """``dst[...] = src`` for buffers of one size, on either device."""
    if on_host(dst):
        if on_host(src):
            dst.reshape(-1)[...] = src.reshape(-1)
        else:
            dst.reshape(-1)[...] = to_host(src).reshape(-1)
        return
    if on_host(src):
        src = np.ascontiguousarray(src, dtype=dst.dtype).reshape(dst.shape)
    elif size(src) == size(dst) and (np.dtype(src.dtype) == np.dtype(dst.dtype) or
                                     np.dtype(src.dtype).kind == np.dtype(dst.dtype).kind == "f"):
        # device to device by the runtime's copy kernel (a cast between float dtypes:
        # to nearest, ties to even): numba's copy_to_device calls the driver's
        # cuMemcpyDtoD, which makes the host wait for the copy
        backend_cuda.copy(flat(dst), flat(src))
        return
    elif np.dtype(src.dtype) != np.dtype(dst.dtype):
        src = to_host(src).astype(dst.dtype)
    dst.copy_to_device(src)


def add_into(dst, src):
    """``dst += src`` for flat buffers of one size, on either device."""
    if on_host(dst):
        dst += to_host(src).reshape(dst.shape)
        return
    if on_host(src) or np.dtype(src.dtype) != np.dtype(dst.dtype):
        from numba import cuda
        src = cuda.to_device(np.ascontiguousarray(to_host(src), dtype=dst.dtype).reshape(dst.shape))
    backend_cuda.add(dst, src)


_spans = {}     # id(device buffer) -> (weakref.ref(buffer), its span)


def device_span(buf):
    """``(first byte, end byte)`` of a device buffer's memory, computed once per buffer
    object (numba builds a device array's ``__cuda_array_interface__`` anew each time it is
    read, and the alias checks of every launch ask for each argument's span)."""
    hit = _spans.get(id(buf))
    if hit is not None and hit[0]() is buf:
        return hit[1]
    start = buf.__cuda_array_interface__["data"][0]
    span = (start, start + size(buf) * np.dtype(buf.dtype).itemsize)
    key = id(buf)

    def forget(ref):
        if _spans.get(key, (None,))[0] is ref:
            _spans.pop(key, None)
    try:
        _spans[key] = (weakref.ref(buf, forget), span)
    except TypeError:                         # not weakly referenceable: not cached
        pass
    return span


def may_alias(a, b):
    """Whether two buffers may share memory (one array, or views of one)."""
    if owns_memory(a) and owns_memory(b):
        return a is b       # host arrays owning their memory: two allocations, or one
    if on_host(a) != on_host(b):
        return False
    if not on_host(a):
        if hasattr(a, "_ary") and hasattr(b, "_ary"):   # numba's simulator: host memory inside
            a, b = a._ary, b._ary
        else:
            (s1, e1), (s2, e2) = device_span(a), device_span(b)
            return s1 < e2 and s2 < e1
    return np.may_share_memory(a, b)


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
            adjs[k] = zeros(buf.shape, buf.dtype, "cpu" if on_host(buf) else "cuda")
            scratch.append((buf, adjs[k]))
    fn(*head, *adjs, *tail)
    for common, own in scratch:
        if on_host(common):
            common += own       # any layout: flat() of a strided host view would be a copy
        else:
            add_into(flat(common), flat(own))
