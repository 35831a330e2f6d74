"""``Array``: a numpy array with an optional gradient, plus constructors."""
import numbers

import numpy as np

from .types import ArrayType, as_dtype

DEVICES = ("cpu",)


def _check_device(device):
    if device in (None, "cpu"):
        return "cpu"
    if device == "cuda" or str(device).startswith("cuda"):
        raise RuntimeError("device='cuda' needs the CUDA backend, which is not available in "
                           "this installation; use device='cpu'")
    raise ValueError(f"unknown device {device!r}; use 'cpu'")


class Array:
    """A dense array on a device, with ``.grad`` when ``requires_grad`` is set.

    ``numpy()`` returns the underlying buffer (no copy on CPU): writing to it
    writes to the array.
    """

    def __init__(self, data, requires_grad=False, device="cpu", _owned=False):
        self.device = _check_device(device)
        arr = np.asarray(data)
        if not _owned:
            arr = np.array(arr, copy=True)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        as_dtype(arr.dtype)
        self._data = np.ascontiguousarray(arr)
        self.grad = None
        self.requires_grad = requires_grad

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        self._requires_grad = bool(value)
        if self._requires_grad and self.grad is None:
            if self._data.dtype.kind != "f":
                raise TypeError(f"only float arrays can require gradients, not {self._data.dtype}")
            self.grad = Array(np.zeros_like(self._data), device=self.device, _owned=True)

    def numpy(self):
        return self._data

    def __array__(self, dtype=None, copy=None):
        return self._data if dtype is None else self._data.astype(dtype)

    @property
    def shape(self):
        return self._data.shape

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def size(self):
        return self._data.size

    def __len__(self):
        return self._data.shape[0]

    def __repr__(self):
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Array({self._data!r}{grad}, device={self.device!r})"

    def assign(self, src):
        """Copy ``src`` (an Array or array-like) into this array; recorded on an active tape."""
        from .tape import record_copy
        record_copy(self, src)
        return self

    def zero_(self):
        self._data[...] = 0
        return self

    def fill_(self, value):
        self._data[...] = value
        return self


def array(data=None, dtype=None, ndim=None, requires_grad=False, device="cpu", shape=None):
    """``ad.array(dtype=float, ndim=1)`` annotates a kernel parameter;
    ``ad.array(data, ...)`` makes an ``Array`` holding a copy of ``data``."""
    if data is None and shape is None:
        return ArrayType(float if dtype is None else dtype, 1 if ndim is None else ndim)
    if data is None:
        data = np.zeros(shape, dtype=as_dtype(dtype or float))
    arr = np.array(data.numpy() if isinstance(data, Array) else data, copy=True)
    if dtype is not None:
        arr = arr.astype(as_dtype(dtype))
    elif arr.dtype.kind == "i":
        arr = arr.astype(np.int64) if arr.dtype.itemsize == 8 else arr.astype(np.int32)
    elif arr.dtype.kind not in "fb":
        arr = arr.astype(np.float64)
    return Array(arr, requires_grad=requires_grad, device=device, _owned=True)


def _shape(shape):
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def zeros(shape, dtype=float, requires_grad=False, device="cpu"):
    return Array(np.zeros(_shape(shape), as_dtype(dtype)), requires_grad, device, _owned=True)


def ones(shape, dtype=float, requires_grad=False, device="cpu"):
    return Array(np.ones(_shape(shape), as_dtype(dtype)), requires_grad, device, _owned=True)


def empty(shape, dtype=float, requires_grad=False, device="cpu"):
    return Array(np.empty(_shape(shape), as_dtype(dtype)), requires_grad, device, _owned=True)


def full(shape, value, dtype=float, requires_grad=False, device="cpu"):
    return Array(np.full(_shape(shape), value, as_dtype(dtype)), requires_grad, device, _owned=True)


def zeros_like(a, requires_grad=None, device=None):
    return zeros(a.shape, a.dtype, a.requires_grad if requires_grad is None else requires_grad,
                 device or a.device)


def ones_like(a, requires_grad=None, device=None):
    return ones(a.shape, a.dtype, a.requires_grad if requires_grad is None else requires_grad,
                device or a.device)
