"""``Array``: a dense array on a device with an optional gradient, plus constructors.

On ``device="cpu"`` the buffer is a numpy array and ``numpy()`` returns it
(no copy: writing to it writes to the array). On ``device="cuda"`` the buffer
is a numba device array (anything exposing ``__cuda_array_interface__``, a
PyTorch CUDA tensor for instance, is wrapped without a copy) and ``numpy()``
returns a host copy, after raising the fault of any CUDA launch not yet
checked (launches do not wait for their kernels: runtime/pending.py). The
``_region_*`` methods are what the tape uses, so the tape works the same on both
devices.
"""
import numbers

import numpy as np

from ..errors import user_frames
from . import buffers, devices, owed, watch
from .jit import default_device
from .tape import record_copy
from .structs import is_struct
from .types import ArrayType, as_dtype, struct_array_error
from .vectypes import vector_type


def check_device(device):
    """'cpu' or 'cuda' (a registered device's name, devices.py) for ``device`` (None -> the
    default device, which follows the backend in force in this context: runtime/jit.py)."""
    if device is None:
        device = default_device()
    on = devices.named(str(device))
    on.check()
    return on.name


class Array:
    """A dense array on a device, with ``.grad`` when ``requires_grad`` is set."""

    def __init__(self, data, requires_grad=False, device=None, _owned=False):
        self.device = check_device(device)
        self._owed = False      # zero_() deferred: the memory is zeroed when looked at
        on = devices.named(self.device)
        wrapped = None if on.host else on.wrap(data)
        if wrapped is not None:
            self._data = wrapped
            self._owner = data          # keeps the wrapped memory alive
            self._foreign = not _owned  # wrapped memory others may write: never clean
            as_dtype(self._data.dtype)
        else:
            arr = buffers.refuse_complex(np.asarray(data), "ad.Array")
            if not _owned:
                arr = np.array(arr, copy=True)
            if arr.ndim == 0:
                arr = arr.reshape(1)
            as_dtype(arr.dtype)
            self._data = on.from_host(np.ascontiguousarray(arr))
            self._foreign = False
        self.grad = None
        self.requires_grad = requires_grad

    @property
    def _data(self):
        """The buffer, after the zero it owes (runtime/owed.py) is written."""
        if self._owed:
            self._settle()
        return self._buf

    @_data.setter
    def _data(self, buf):
        self._buf = buf
        self._owed = False

    def _settle(self):
        """Write the zero ``zero_()`` deferred (runtime/owed.py)."""
        self._owed = False
        buffers.fill(self._buf, 0)

    def __getstate__(self):
        """Pickling and ``copy.deepcopy``: the values (a host copy of device memory, its
        owed zero written), never the device handle or the memory it wraps."""
        state = dict(self.__dict__)
        on = devices.named(self.device)
        state["_buf"] = on.to_host(self._data, "copying an Array to the host (pickle, "
                                               "copy.deepcopy)")
        state["_owed"] = False
        if not on.host:
            state.pop("_owner", None)
            state["_foreign"] = False       # a copy: adjoint's own memory
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        on = devices.named(self.device)
        if not on.host:
            self._buf = self._owner = on.from_host(self._buf)

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        self._requires_grad = bool(value)
        if self._requires_grad and self.grad is None:
            if np.dtype(self.dtype).kind != "f":
                raise TypeError(f"only float arrays can require gradients, not {self.dtype}")
            self.grad = Array(self.zeros_buffer(), device=self.device, _owned=True)
            watch.mark_clean(self.grad._data)

    @property
    def data(self):
        """The buffer kernels receive: a numpy array (cpu) or a device array (cuda). Once
        handed out, adjoint no longer knows it holds zeros (``watch.is_clean``)."""
        watch.mark_dirty(self._data)
        return self._data

    @user_frames
    def numpy(self):
        """The values as a numpy array: the buffer itself on cpu (writable: adjoint no
        longer knows it holds zeros, ``watch.is_clean``), a copy on cuda, which waits for
        the GPU and first raises the fault of any CUDA launch not yet checked (of any
        kernel, not only this array's writers: runtime/pending.py)."""
        on = devices.named(self.device)
        if on.host:
            watch.mark_dirty(self._data)
            return self._data
        return on.to_host(self._data, "Array.numpy()")

    def __array__(self, dtype=None, copy=None):
        data = self.numpy()
        return data if dtype is None else data.astype(dtype)

    @property
    def shape(self):
        return tuple(self._buf.shape)

    @property
    def dtype(self):
        return np.dtype(self._buf.dtype)

    @property
    def ndim(self):
        return len(self._buf.shape)

    @property
    def size(self):
        return buffers.size(self._buf)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Array({self.numpy()!r}{grad}, device={self.device!r})"

    def assign(self, src):
        """Copy ``src`` (an Array or array-like) into this array; recorded on an active tape."""
        record_copy(self, src, kind="assign")
        return self

    def zero_(self):
        """Zero the array; nothing to do when adjoint knows it holds zeros (``is_clean``).
        A large CPU array nothing else references is zeroed when next looked at, if ever
        (runtime/owed.py)."""
        if watch.is_clean(self._buf):
            return self
        if owed.may_defer(self):
            watch.before_write(self._buf, "fill_(0)")
            self._owed = True
            watch.mark_clean(self._buf)     # a backward may store into it (optimize/once.py)
            return self
        return self.fill_(0)

    def fill_(self, value):
        buffers.refuse_complex(value, "fill_")
        watch.before_write(self._buf, f"fill_({value})")
        self._owed = False
        buffers.fill(self._buf, value)
        if value == 0 and not self._foreign:
            watch.mark_clean(self._buf)     # a backward may store into it (optimize/once.py)
        return self

    # -- views: this array's memory in another shape or dtype (Warp's) ------------------
    def reshape(self, *shape):
        """A view of this array's memory in ``shape`` (a tuple, or the sizes as arguments;
        one may be -1): a kernel writing
        through it writes this array, and its ``.grad`` is the same view of this ``.grad``
        (a gradient made for this array later is not seen by a view made before)."""
        shape = _view_shape(self.shape, shape[0] if len(shape) == 1 else shape)
        return self._view(lambda buf: buf.reshape(shape), True)

    def flatten(self):
        """A one-dimensional view of this array's memory (``reshape(-1)``): an array of
        vectors flattens its components too, which are its trailing dimensions here."""
        return self.reshape(-1)

    def view(self, dtype):
        """A view of this array's memory as elements of ``dtype``, a scalar dtype of the same
        size (``float32`` as ``int32``: the same bits); its ``.grad`` is this ``.grad`` when
        ``dtype`` is this array's, and None otherwise."""
        if vector_type(dtype) is not None:
            raise TypeError(f"Array.view({dtype!r}): a view takes a scalar dtype (an array of "
                            "vectors is a float array with the vector's shape last here)")
        want = np.dtype(as_dtype(dtype))
        if want.itemsize != self.dtype.itemsize:
            raise TypeError(f"Array.view({want}): a {want} has {want.itemsize} bytes, an "
                            f"element of this {self.dtype} array {self.dtype.itemsize}")
        return self._view(lambda buf: buf.view(want), want == self.dtype)

    def _view(self, make, with_grad):
        """An ``Array`` on ``make(buffer)``, a view of this one's memory (kept alive by it),
        with the same view of ``.grad`` when ``with_grad``."""
        out = Array.__new__(Array)
        out.device = self.device
        out._data = make(self._data)            # (an owed zero is written first)
        out._base = self
        out._foreign = self._foreign
        if hasattr(self, "_owner"):
            out._owner = self._owner
        out.grad = self.grad._view(make, False) if with_grad and self.grad is not None \
            else None
        out._requires_grad = self.requires_grad and out.grad is not None
        return out

    # -- device-neutral pieces the tape and copies use ---------------------------------
    # (on cuda they stay on the device: see adjoint/runtime/buffers.py)
    def _snapshot(self):
        """A copy of the buffer on the same device."""
        return buffers.clone(self._data)

    def zeros_buffer(self):
        """A zeroed buffer shaped like this array, on its device (scratch adjoints)."""
        return buffers.zeros(self.shape, self.dtype, self.device)

    def _flat(self, offset=0, count=None):
        """A view of elements ``[offset, offset + count)`` of the flattened buffer."""
        return buffers.flat(self._data, offset, count)

    def _region_set(self, offset, values):
        """Elements from ``offset`` on = ``values`` (host values, or a buffer on any device)."""
        values = _flat_values(values, self.dtype)
        buffers.copy_into(self._flat(offset, values.size), values)

    def _region_add(self, offset, values):
        values = _flat_values(values, self.dtype)
        buffers.add_into(self._flat(offset, values.size), values)


def _view_shape(old, shape):
    """``shape`` (an int or a tuple, one entry maybe -1) for an array of shape ``old``."""
    shape = [int(shape)] if isinstance(shape, numbers.Integral) else [int(s) for s in shape]
    size, known = int(np.prod(old)), int(np.prod([s for s in shape if s != -1]))
    if shape.count(-1) == 1 and known > 0 and size % known == 0:
        shape[shape.index(-1)] = size // known
    if shape.count(-1) or any(s < 0 for s in shape) or int(np.prod(shape)) != size:
        raise ValueError(f"cannot view an array of shape {tuple(old)} as shape {tuple(shape)}")
    return tuple(shape)


def _flat_values(values, dtype):
    if isinstance(values, Array):
        values = values.data
    if buffers.on_host(values) or not hasattr(values, "copy_to_host"):
        values = buffers.refuse_complex(values, "copy into an array")
        return np.asarray(values, dtype=dtype).reshape(-1)
    return buffers.flat(values)


def array(data=None, dtype=None, ndim=None, requires_grad=False, device=None, shape=None,
          copy=True):
    """``ad.array(dtype=float, ndim=1)`` annotates a kernel parameter;
    ``ad.array(data, ...)`` makes an ``Array`` holding a copy of ``data``.

    ``copy=False`` (on the CPU) shares the memory of ``data`` instead -- a C-contiguous
    numpy array, or a CPU torch tensor, of a supported dtype: ``ad.array(p, dtype=ad.vec3,
    copy=False)`` of a numpy ``(n, 3)`` array is an array of n vec3 whose kernels write
    into ``p``. Where sharing is impossible (another dtype, strides, a device) it raises
    ``ValueError`` rather than copy behind the caller's back."""
    if data is None and shape is None:
        return ArrayType(float if dtype is None else dtype, 1 if ndim is None else ndim)
    if not copy:
        return _shared(data, dtype, requires_grad, device)
    given = dtype
    shape, dtype = _vshape(shape, dtype)
    if data is None:
        data = np.zeros(shape, dtype=as_dtype(dtype or float))
    # np.asarray first: np.array(x, copy=True) asks a foreign __array__ (torch's) for
    # copy=False, which it does not take (a DeprecationWarning in numpy 2)
    arr = np.array(data.numpy() if isinstance(data, Array) else np.asarray(data), copy=True)
    buffers.refuse_complex(arr, "ad.array")
    if arr.dtype == object:
        cls = next((type(v) for v in arr.flat if is_struct(type(v))), None)
        if cls is not None:
            raise struct_array_error(cls)
    _check_vector_shape(arr, given)
    if dtype is not None:
        arr = arr.astype(as_dtype(dtype))
    elif arr.dtype.kind == "i":
        arr = arr.astype(np.int64) if arr.dtype.itemsize == 8 else arr.astype(np.int32)
    elif arr.dtype.kind not in "fb":
        arr = arr.astype(np.float64)
    return Array(arr, requires_grad=requires_grad, device=device, _owned=True)


def _shared(data, dtype, requires_grad, device):
    """``ad.array(data, copy=False)``: an ``Array`` on ``data``'s own memory."""
    if check_device(device) != "cpu":
        raise ValueError("ad.array(copy=False) shares host memory: it needs device='cpu' "
                         "(ad.Array(obj, device='cuda') wraps a numba device array, a PyTorch "
                         "CUDA tensor or a CuPy array without a copy)")
    if hasattr(data, "detach") and hasattr(data, "numpy"):      # a CPU torch tensor
        if getattr(getattr(data, "device", None), "type", "cpu") != "cpu":
            raise ValueError("ad.array(copy=False) of a tensor that is not on the CPU")
        data = data.detach().numpy()
    if not isinstance(data, np.ndarray):
        raise ValueError(f"ad.array(copy=False) shares the memory of a numpy array or a CPU "
                         f"tensor, not of a {type(data).__name__}")
    _, want = _vshape(None, dtype)
    if want is not None and data.dtype != as_dtype(want):
        raise ValueError(f"ad.array(copy=False): the data is {data.dtype}, not "
                         f"{np.dtype(as_dtype(want))}; sharing it would need a copy")
    if not data.flags.c_contiguous or data.ndim == 0:
        raise ValueError("ad.array(copy=False) needs C-contiguous data of at least one "
                         "dimension; sharing this one would need a copy")
    buffers.refuse_complex(data, "ad.array")
    _check_vector_shape(data, dtype)
    as_dtype(data.dtype)
    shared = Array(data, requires_grad=requires_grad, device="cpu", _owned=True)
    shared._foreign = True      # the caller writes its memory too: never known to be clean
    return shared


def _shape(shape):
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _vshape(shape, dtype):
    """(shape, dtype) with a vector type (``ad.vec3``) as its float dtype and its own shape
    appended: an array of n vec3 is a float array of shape (n, 3) (``shape`` None: none)."""
    vt = vector_type(dtype)
    if vt is None:
        return shape, dtype
    return (None if shape is None else _shape(shape) + vt.shape), vt.dtype


def _check_vector_shape(arr, dtype):
    vt = vector_type(dtype)
    if vt is not None and (arr.shape[arr.ndim - len(vt.shape):] != vt.shape or
                           arr.ndim == len(vt.shape)):
        raise ValueError(f"an array of {vt!r} needs the trailing shape {vt.shape} after at "
                         f"least one index dimension, not the shape {arr.shape}")


def zeros(shape, dtype=float, requires_grad=False, device=None):
    out = _made("zeros", shape, dtype, requires_grad, device)
    watch.mark_clean(out._data)
    return out


def ones(shape, dtype=float, requires_grad=False, device=None):
    shape, dtype = _vshape(shape, dtype)
    return Array(np.ones(_shape(shape), as_dtype(dtype)), requires_grad, device, _owned=True)


def empty(shape, dtype=float, requires_grad=False, device=None):
    return _made("empty", shape, dtype, requires_grad, device)


def _made(how, shape, dtype, requires_grad, device):
    """An array its device allocates (``how``: "zeros" or "empty"; on cuda, no host copy)."""
    shape, dtype = _vshape(shape, dtype)
    device = check_device(device)
    buf = getattr(devices.named(device), how)(_shape(shape) or (1,), as_dtype(dtype))
    return Array(buf, requires_grad, device, _owned=True)


def full(shape, value, dtype=float, requires_grad=False, device=None):
    buffers.refuse_complex(value, "ad.full")
    shape, dtype = _vshape(shape, dtype)
    return Array(np.full(_shape(shape), value, as_dtype(dtype)), requires_grad, device, _owned=True)


def zeros_like(a, requires_grad=None, device=None):
    return zeros(a.shape, a.dtype, a.requires_grad if requires_grad is None else requires_grad,
                 device or a.device)


def ones_like(a, requires_grad=None, device=None):
    return ones(a.shape, a.dtype, a.requires_grad if requires_grad is None else requires_grad,
                device or a.device)
