"""Differentiable copies: ``ad.clone`` and ``ad.copy`` (and ``Array.assign``)."""
from ..runtime import buffers
from ..runtime.array import Array
from ..runtime.tape import record_copy


def clone(a, requires_grad=None):
    """A new array holding a copy of ``a``; recorded on an active tape."""
    rg = a.requires_grad if requires_grad is None else requires_grad
    out = Array(buffers.empty_like(a.data), requires_grad=rg, device=a.device, _owned=True)
    record_copy(out, a, kind="clone")
    return out


def copy(dest, src, dest_offset=0, src_offset=0, count=None):
    """``dest[dest_offset:+count] = src[src_offset:+count]`` over flattened arrays;
    recorded on an active tape (the gradient flows from dest back to src)."""
    record_copy(dest, src, dest_offset, src_offset, count)
    return dest
