"""``warp.types``: Warp's type constructors ``vector(length, dtype)`` and ``matrix(shape,
dtype)`` (``float`` is float32, as everywhere in adjoint.warp), and the scalar, vector and
matrix types ``adjoint.warp`` has. Another name of Warp's ``warp.types`` (its type
classes, ``array_t``, ``type_size``, ...) raises ``WarpNameError`` naming the line.
"""
import sys

import numpy as np

from ..runtime.vectypes import VectorType, matrix_of, vector_of
from .errors import WarpNameError, refuse


def vector(length, dtype=float):
    """The type of ``length`` floats of ``dtype`` (``float``: float32)."""
    return vector_of(length, dtype, np.float32)


def matrix(shape, dtype=float):
    """The type of a matrix of ``shape`` (rows, columns) of ``dtype`` (``float``: float32)."""
    return matrix_of(shape, dtype, np.float32)


_SCALARS = (np.float32, np.float64, np.int32, np.int64, bool)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(f"module 'adjoint.warp.types' has no attribute '{name}'")
    value = vars(sys.modules[__package__]).get(name)    # adjoint.warp's own types
    if isinstance(value, VectorType) or value in _SCALARS:
        return value
    raise refuse(f"warp.types.{name}", "of Warp's warp.types, adjoint.warp has vector(), "
                 "matrix() and the types of its namespace (wp.vec3, wp.float32, ...)",
                 cls=WarpNameError)
