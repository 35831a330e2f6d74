"""Warp's array API on ``ad.Array``: ``wp.array`` (annotation, constructor, ``wp.array[float]``),
``wp.array2d/3d/4d``, ``wp.zeros``, ``wp.full``, ``wp.clone``, ... with Warp's signatures.

``float`` is float32 and ``int`` int32 in a dtype (Warp's), and the constructors take
their arguments in Warp's order (``wp.zeros(shape, dtype, device, requires_grad)``). What
they return is an ``ad.Array`` (``isinstance(a, wp.array)`` holds for one): an array of
vectors is a float array with the vector's shape as trailing dimensions, so its
``.shape`` and ``.dtype`` are those of the floats ((n, 3) and float32 where Warp says (n,)
and vec3).
"""
import typing

import numpy as np

from ..tapes import copies
from ..runtime.array import Array, check_device
from ..runtime.array import array as _ad_array
from ..runtime.array import empty as _ad_empty
from ..runtime.array import full as _ad_full
from ..runtime.array import ones as _ad_ones
from ..runtime.array import zeros as _ad_zeros
from ..runtime.dialect import WARP
from ..runtime.types import ArrayType
from .errors import refuse


def dtype_of(dtype):
    """A Warp dtype as adjoint reads one: ``float`` float32, ``int`` int32 (vector types and
    numpy dtypes as they are); None for Warp's ``Any`` (infer it from the data)."""
    if dtype is None or dtype is typing.Any:
        return None
    scalar = WARP.scalar(dtype)
    return scalar if scalar is not None else dtype


def device_of(device):
    """A Warp device (``"cpu"``, ``"cuda:0"``, a ``wp.Device``, None) as adjoint names it."""
    if device is None:
        return None
    return getattr(device, "alias", str(device))


class _ArrayKind(type):
    """The type of ``wp.array`` and ``wp.array2d`` ...: subscripted, an annotation
    (``wp.array[float]``); ``isinstance(a, wp.array)`` for an ``ad.Array`` ``a``."""

    def __getitem__(cls, dtype):
        return ArrayType(dtype, cls.ndim or 1, dialect=WARP)

    def __instancecheck__(cls, obj):
        return isinstance(obj, Array)

    def __repr__(cls):
        return f"wp.{cls.__name__}"


class array(metaclass=_ArrayKind):
    """``wp.array(dtype=float, ndim=1)`` annotates a kernel parameter; ``wp.array(data,
    dtype=..., device=..., requires_grad=...)`` (or ``shape=...``) makes an ``ad.Array``."""

    ndim = None

    def __new__(cls, data=None, dtype=typing.Any, shape=None, strides=None, capacity=None,
                ptr=None, grad=None, device=None, pinned=False, copy=True, deleter=None,
                ndim=None, requires_grad=False):
        for what, value in (("strides", strides), ("capacity", capacity), ("ptr", ptr),
                            ("grad", grad), ("deleter", deleter)):
            if value is not None:
                raise refuse(f"wp.array({what}=...)", "adjoint's arrays own dense, "
                             "C-contiguous memory and make their own gradient")
        ndim = ndim or cls.ndim
        if data is None and shape is None:
            kind = dtype_of(dtype)
            return ArrayType(float if kind is None else kind, ndim or 1, dialect=WARP)
        return _ad_array(data, dtype=dtype_of(dtype), requires_grad=requires_grad,
                            device=device_of(device), shape=shape, copy=copy)


class array1d(array):
    ndim = 1


class array2d(array):
    ndim = 2


class array3d(array):
    ndim = 3


class array4d(array):
    ndim = 4


def zeros(shape=None, dtype=float, device=None, requires_grad=False, pinned=False):
    return _ad_zeros(shape, dtype_of(dtype), requires_grad, device_of(device))


def ones(shape=None, dtype=float, device=None, requires_grad=False, pinned=False):
    return _ad_ones(shape, dtype_of(dtype), requires_grad, device_of(device))


def empty(shape=None, dtype=float, device=None, requires_grad=False, pinned=False):
    return _ad_empty(shape, dtype_of(dtype), requires_grad, device_of(device))


def full(shape=None, value=0, dtype=typing.Any, device=None, requires_grad=False,
         pinned=False):
    """``wp.full``: ``dtype`` Any takes the value's (a float float32, an int int32)."""
    kind = dtype_of(dtype)
    if kind is None:
        kind = dtype_of(type(value)) if type(value) in (float, int, bool) else \
            np.asarray(value).dtype
    return _ad_full(shape, value, kind, requires_grad, device_of(device))


def _like(make, src, device, requires_grad, *value):
    grad = src.requires_grad if requires_grad is None else requires_grad
    return make(src.shape, *value, src.dtype, grad, device_of(device) or src.device)


def zeros_like(src, device=None, requires_grad=None, pinned=None):
    return _like(_ad_zeros, src, device, requires_grad)


def ones_like(src, device=None, requires_grad=None, pinned=None):
    return _like(_ad_ones, src, device, requires_grad)


def empty_like(src, device=None, requires_grad=None, pinned=None):
    return _like(_ad_empty, src, device, requires_grad)


def full_like(src, value, device=None, requires_grad=None, pinned=None):
    return _like(_ad_full, src, device, requires_grad, value)


def clone(src, device=None, requires_grad=None, pinned=None):
    """``wp.clone``: a copy, differentiable when a tape records it (on another device, a
    plain copy)."""
    target = device_of(device)
    if target is None or check_device(target) == src.device:
        return copies.clone(src, requires_grad=requires_grad)
    grad = src.requires_grad if requires_grad is None else requires_grad
    return _ad_array(src.numpy(), requires_grad=grad, device=target)


def copy(dest, src, dest_offset=0, src_offset=0, count=0):
    """``wp.copy``: ``count`` 0 copies everything from the offsets on (Warp's)."""
    return copies.copy(dest, src, dest_offset, src_offset, count or None)


def from_numpy(arr, dtype=None, shape=None, device=None, requires_grad=False):
    """``wp.from_numpy``: a copy of ``arr`` as an array (of ``dtype``)."""
    data = np.asarray(arr)
    if shape is not None:
        data = data.reshape(shape)
    return _ad_array(data, dtype=dtype_of(dtype), requires_grad=requires_grad,
                        device=device_of(device))
