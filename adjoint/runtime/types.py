"""Type descriptions used in kernel annotations: dtypes and ``ArrayType``."""
import numpy as np

float32 = np.float32
float64 = np.float64
int32 = np.int32
int64 = np.int64

_SCALARS = {float: np.dtype(np.float64), int: np.dtype(np.int64), bool: np.dtype(np.bool_)}


def as_dtype(t):
    """Map ``float``/``int``/``ad.float32``/numpy dtypes to a numpy dtype."""
    if t in _SCALARS:
        return _SCALARS[t]
    dt = np.dtype(t)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64),
                  np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_)):
        raise TypeError(f"unsupported dtype {dt}; use float32, float64, int32 or int64")
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
    """Annotation of a kernel array parameter: ``ad.array(dtype=float, ndim=1)``."""

    def __init__(self, dtype=float, ndim=1):
        self.dtype = as_dtype(dtype)
        if ndim not in (1, 2, 3, 4):
            raise TypeError(f"arrays have 1 to 4 dimensions, not {ndim}")
        self.ndim = ndim

    @property
    def kind(self):
        return kind_of_dtype(self.dtype)

    def __eq__(self, other):
        return isinstance(other, ArrayType) and (self.dtype, self.ndim) == (other.dtype, other.ndim)

    def __hash__(self):
        return hash((self.dtype, self.ndim))

    def __repr__(self):
        return f"array(dtype={self.dtype.name}, ndim={self.ndim})"


def scalar_dtype(annotation):
    """numpy dtype of a scalar parameter annotation, or None if it is not one."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    try:
        dt = np.dtype(annotation)
    except TypeError:
        return None
    return dt if dt.kind in "fib" else None
