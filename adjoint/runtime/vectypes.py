"""Warp's vector, matrix, quaternion and transform types: ``ad.vec3``, ``ad.mat33``, ...

A ``VectorType`` is a fixed-size value of floats: a ``vec2/vec3/vec4``, a
``mat22/mat33/mat44``, a ``quat`` (x, y, z, w: w is the real part, as in Warp)
or a ``transform`` (a translation p = (px, py, pz), then a rotation quaternion
q = (qx, qy, qz, qw): seven floats, Warp's layout).

``ad.vec3`` holds float64 values, as ``float`` means float64 everywhere in
adjoint; ``ad.vec3f`` holds float32 (Warp's ``wp.vec3`` is float32: port it
to ``ad.vec3f`` to keep the precision) and ``ad.vec3d`` is ``ad.vec3``.

Uses:

- an annotation: ``ad.array(dtype=ad.vec3)`` is an array of vectors, stored as
  a float array with the vector's shape as trailing dimensions (``(n, 3)``;
  a ``mat33`` array is ``(n, 3, 3)``); ``g: ad.vec3`` (a kernel parameter) is
  one vector, passed as an array of shape ``(3,)`` (``ad.vec3(1.0, 2.0, 3.0)``);
  a func's vector parameters and results are passed as their components;
- inside kernels and funcs, a constructor and the builtins (frontend/
  scalarize.py turns them into scalar code, so every later pass sees floats);
- in plain Python, the same names compute with numpy: ``ad.vec3(1, 2, 3)`` is a
  numpy array of shape (3,), ``ad.dot(a, b)`` its dot product (funcs stay
  callable outside kernels, and tests have a reference).

This module imports only numpy: the runtime stands alone.
"""
import numpy as np


class VectorType:
    """A vector-like value type. ``kind``: "vec", "mat", "quat" or "transform";
    ``shape``: its array shape ((3,), (3, 3), (4,), (7,)); ``dtype``: float64 or
    float32; ``comps``: the suffix of each component's scalar name, row-major
    (``x y z``, ``00 01 ...``, ``px ... qw``)."""

    def __init__(self, name, kind, shape, dtype, comps):
        self.name, self.kind, self.shape = name, kind, tuple(shape)
        self.dtype = np.dtype(dtype)
        self.comps = tuple(comps)

    @property
    def size(self):
        return len(self.comps)

    @property
    def base(self):
        """The float64 type of the same shape (what the kernel-side pass compares)."""
        return TYPES[(self.kind, self.shape)]

    def __call__(self, *args, **kwargs):
        """The constructor in plain Python: a numpy array of this type's shape."""
        if kwargs.get("dtype") is not None:
            raise TypeError(f"{self.name}(): no keyword arguments")
        if len(args) == 0:
            return np.zeros(self.shape, self.dtype)
        if len(args) == 1 and np.ndim(args[0]) == 0:
            return np.full(self.shape, args[0], self.dtype)
        flat = np.concatenate([np.ravel(np.asarray(a, dtype=self.dtype)) for a in args])
        if flat.size != self.size:
            raise TypeError(f"{self.name}() takes {self.size} components, got {flat.size}")
        return flat.reshape(self.shape)

    def __repr__(self):
        return f"ad.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


def _by_name(name):
    return ALL[name]


_XYZW = ("x", "y", "z", "w")
TYPES = {}      # (kind, shape) -> the float64 type
ALL = {}        # name -> type (every variant)


def _define(name, kind, shape, comps):
    for suffix, dtype in (("", np.float64), ("d", np.float64), ("f", np.float32)):
        t = VectorType(name + suffix, kind, shape, dtype, comps) if suffix != "d" else ALL[name]
        ALL[name + suffix] = t
    TYPES[(kind, tuple(shape))] = ALL[name]


for _n in (2, 3, 4):
    _define(f"vec{_n}", "vec", (_n,), _XYZW[:_n])
    _define(f"mat{_n}{_n}", "mat", (_n, _n), [f"{i}{j}" for i in range(_n) for j in range(_n)])
_define("quat", "quat", (4,), _XYZW)
_define("transform", "transform", (7,), ("px", "py", "pz", "qx", "qy", "qz", "qw"))


def vector_type(annotation):
    """The ``VectorType`` an annotation names, or None."""
    return annotation if isinstance(annotation, VectorType) else None


def vec_of(n):
    return TYPES[("vec", (n,))]


def mat_of(n):
    return TYPES[("mat", (n, n))]
