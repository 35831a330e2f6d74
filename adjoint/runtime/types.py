"""Type descriptions used in kernel annotations: dtypes and ``ArrayType``.

``float``, ``int`` and ``bool`` mean what the dialect of the code naming them says
(runtime/dialect.py): float64 and int64 in adjoint's, float32 and int32 in Warp's."""
import numpy as np

from ..errors import user_line
from .dialect import ADJOINT
from .vectypes import VectorType

float16 = np.float16
float32 = np.float32
float64 = np.float64
int32 = np.int32
int64 = np.int64

# ints narrower than int32 (and uint32): arrays and scalars of them are ints of the kernel
# (int64) once loaded, converted back as stored (frontend/scalarize.py)
# uint64 is held as an int64 of the same bits (loaded with ad.uint64(a[i]))
NARROW_INTS = tuple(np.dtype(t) for t in (np.int8, np.int16, np.uint8, np.uint16, np.uint32,
                                          np.uint64))
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32),
           np.dtype(np.int64), np.dtype(np.bool_)) + NARROW_INTS
# float16 is an array's storage only: a kernel computes in float32 on a float32 copy of
# it, rounded back as the launch ends (runtime/half.py); no float16 scalars
FLOAT16 = np.dtype(np.float16)


# the attribute marking an @ad.struct class (runtime/structs.py, which reads this module)
STRUCT_ATTR = "__adjoint_struct__"


def struct_array_error(cls):
    """The error for an array of struct class ``cls`` (as a dtype, or as the values of
    ``ad.array``), naming the user's line."""
    line = user_line()
    return TypeError(f"arrays of structs are not supported: {cls.__name__} is an @ad.struct. "
                     f"Pass one {cls.__name__} whose fields are arrays (a struct of arrays: "
                     f"a field x: ad.array(dtype=float), read as s.x[i] in a kernel), or an "
                     "array of vectors (ad.array(dtype=ad.vec3))" +
                     (f" (at {line})" if line else ""))


def as_dtype(t, dialect=ADJOINT):
    """Map ``float``/``int``/``ad.float32``/numpy dtypes to a numpy dtype (``float`` and
    ``int`` as ``dialect`` means them)."""
    dt = dialect.scalar(t)
    if dt is not None:
        return dt
    if isinstance(t, type) and STRUCT_ATTR in t.__dict__:
        raise struct_array_error(t)
    dt = np.dtype(t)
    if dt not in _DTYPES and dt != FLOAT16:
        raise TypeError(f"unsupported dtype {dt}; use float32, float64, int32 or int64 (or "
                        "float16, int8, int16, uint8, uint16, uint32, uint64)")
    return dt


def kind_of_dtype(dtype):
    """'float', 'int' or 'bool' for a numpy dtype."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return "float"
    if dtype.kind == "b":
        return "bool"
    return "int"


class ArrayType:
    """Annotation of a kernel array parameter: ``ad.array(dtype=float, ndim=1)``.

    An array of vectors (``dtype=ad.vec3``) has ``vtype`` that type, ``dtype`` its
    float dtype and ``ndim`` its index dimensions; it is stored as a float array
    with ``vtype.shape`` as trailing dimensions (frontend/scalarize.py). A float16 array
    has ``storage`` float16 and ``dtype`` float32: the kernel is a float32 array's, and a
    launch hands it a float32 copy (runtime/half.py)."""

    def __init__(self, dtype=float, ndim=1, dialect=ADJOINT):
        self.vtype = dtype if isinstance(dtype, VectorType) else None
        self.dtype = self.vtype.dtype if self.vtype else as_dtype(dtype, dialect)
        self.storage = self.dtype
        if self.dtype == FLOAT16:
            self.dtype = np.dtype(np.float32)
        if ndim not in (1, 2, 3, 4) or (self.vtype and ndim + len(self.vtype.shape) > 4):
            raise TypeError(f"arrays have 1 to 4 dimensions (a vector's own included), "
                            f"not {ndim}")
        self.ndim = ndim

    @property
    def kind(self):
        return kind_of_dtype(self.dtype)

    def __eq__(self, other):
        return isinstance(other, ArrayType) and \
            (self.dtype, self.ndim, self.vtype) == (other.dtype, other.ndim, other.vtype)

    def __hash__(self):
        return hash((self.dtype, self.ndim))

    def __repr__(self):
        return f"array(dtype={self.vtype or self.storage.name}, ndim={self.ndim})"


def scalar_dtype(annotation, dialect=ADJOINT):
    """numpy dtype of a scalar parameter annotation (``float`` as ``dialect`` means it), or
    None if it is not one."""
    dt = dialect.scalar(annotation)
    if dt is not None:
        return dt
    try:
        dt = np.dtype(annotation)
    except TypeError:
        return None
    return dt if dt in _DTYPES else None
