"""vec3, mat33 and quat for the reference, from their definitions (never from adjoint).

A ``Value`` is a float64 numpy array of shape (3,) (vec3), (4,) (quat, laid out
x, y, z, w as Warp's) or (3, 3) (mat33, row by row). ``+``, ``-``, unary ``-`` and
``*``, ``/`` by a scalar are numpy's elementwise ones, which are the vector space
operations; ``@`` (matrix times vector or matrix) and the quaternion product are
the loops below, and a product of two vectors that is neither (``v * v``, which
adjoint refuses) raises, so a generator slip cannot pass silently.

Nothing here compares: the generator keeps the arguments of ``length`` and
``normalize`` away from the zero vector, so no branch is hidden from the trace.
"""
import math

import numpy as np


class Value(np.ndarray):
    """A vector, quaternion or matrix value: components ``.x .y .z .w`` or ``[k]``."""

    x = property(lambda self: self[0])
    y = property(lambda self: self[1])
    z = property(lambda self: self[2])
    w = property(lambda self: self[3])

    def __matmul__(self, other):
        return matmul(self, other)

    def __mul__(self, other):
        if isinstance(other, np.ndarray) and other.ndim:
            return quat_mul(self, other)
        return np.ndarray.__mul__(self, other)

    def __rmul__(self, other):
        if isinstance(other, np.ndarray) and other.ndim:
            return quat_mul(other, self)
        return np.ndarray.__rmul__(self, other)


def value(comps, shape=None):
    v = np.array(comps, dtype=np.float64)
    return (v.reshape(shape) if shape else v).view(Value)


def set_component(v, key, x):
    """``v`` with component ``key`` (an index, or (row, column)) replaced by ``x``."""
    out = np.array(v, dtype=np.float64).view(Value)
    out[key] = x
    return out


# --------------------------------------------------------------------------- constructors

def vec3(*comps):
    if len(comps) == 0:
        return value([0.0, 0.0, 0.0])
    if len(comps) == 1:
        return value([comps[0]] * 3)
    return value(comps)


def mat33(*comps):
    assert len(comps) == 9, "mat33 takes 9 values, row by row"
    return value(comps, (3, 3))


def quat(x, y, z, w):
    return value([x, y, z, w])


def quat_from_axis_angle(axis, angle):
    """(sin(a/2) n, cos(a/2)) for the unit axis n = axis / |axis|."""
    n = normalize(axis)
    s = math.sin(0.5 * angle)
    return value([n[0] * s, n[1] * s, n[2] * s, math.cos(0.5 * angle)])


# --------------------------------------------------------------------------- operations

def dot(a, b):
    assert len(a) == len(b)
    return sum(float(a[k]) * float(b[k]) for k in range(len(a)))


def cross(a, b):
    return value([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                  a[0] * b[1] - a[1] * b[0]])


def length(v):
    return math.sqrt(dot(v, v))


def normalize(v):
    return value(v) / length(v)


def transpose(m):
    return value([[m[j][i] for j in range(3)] for i in range(3)])


def matmul(a, b):
    """mat33 @ vec3 or mat33 @ mat33, as sums of products."""
    assert a.shape == (3, 3), "@ takes a matrix on the left"
    if b.shape == (3,):
        return value([sum(a[i, k] * b[k] for k in range(3)) for i in range(3)])
    return value([[sum(a[i, k] * b[k, j] for k in range(3)) for j in range(3)] for i in range(3)])


def quat_mul(q, r):
    """The Hamilton product of (x, y, z, w) quaternions:
    (w1 v2 + w2 v1 + v1 x v2, w1 w2 - v1 . v2)."""
    assert q.shape == (4,) and r.shape == (4,), "only quaternions multiply each other"
    u, v = q[:3], r[:3]
    c = cross(u, v)
    return value([q[3] * v[k] + r[3] * u[k] + c[k] for k in range(3)] + [q[3] * r[3] - dot(u, v)])


def quat_rotate(q, v):
    """v + 2w (u x v) + 2 u x (u x v) for a unit q = (u, w)."""
    u, w = value(q[:3]), q[3]
    uv = cross(u, v)
    return value(v) + 2.0 * w * uv + 2.0 * cross(u, uv)


def quat_rotate_inv(q, v):
    """The rotation by the conjugate (-u, w): v - 2w (u x v) + 2 u x (u x v)."""
    u, w = value(q[:3]), q[3]
    uv = cross(u, v)
    return value(v) - 2.0 * w * uv + 2.0 * cross(u, uv)


class VecArray:
    """An array of vec3 as kernels see it: ``p[i]`` is a copy (a vector is a value),
    ``p[i] = v`` stores the components; the (n, 3) numpy array is ``data``."""

    def __init__(self, data):
        self.data = data

    @property
    def shape(self):
        return self.data.shape[:-1]

    def __getitem__(self, idx):
        return value(self.data[idx])

    def __setitem__(self, idx, v):
        assert np.shape(v) == (3,), "an element of an array of vec3 is a vec3"
        self.data[idx] = v


def vector_namespace():
    """The names the stand-in ``ad`` gets for vector code."""
    return dict(vec3=vec3, mat33=mat33, quat=quat, quat_from_axis_angle=quat_from_axis_angle,
                dot=dot, cross=cross, length=length, normalize=normalize, transpose=transpose,
                quat_rotate=quat_rotate, quat_rotate_inv=quat_rotate_inv)
