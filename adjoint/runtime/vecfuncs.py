"""Warp's vector, matrix, quaternion and transform builtins in plain Python (numpy).

Inside kernels and funcs these names are expanded into scalar code
(frontend/scalarize.py); called from plain Python they compute on numpy arrays
(``ad.vec3(...)`` values), so funcs stay callable outside kernels. Conventions
(Warp's): a quaternion is (x, y, z, w) with w the real part; a transform is
(p, q), seven floats; ``length`` and ``normalize`` of a zero vector are 0; a spatial
vector is (w, v), the angular part on top (Featherstone's, Warp's).
"""
import numpy as np

from .vectypes import ALL, matrix_of, vector_of


def _a(v):
    return np.asarray(v, dtype=np.result_type(np.asarray(v).dtype, np.float32))


def dot(a, b):
    return float(np.dot(_a(a), _a(b)))


def cross(a, b):
    return np.cross(_a(a), _a(b))


def length(v):
    return float(np.sqrt(np.sum(_a(v) * _a(v))))


def length_sq(v):
    return float(np.sum(_a(v) * _a(v)))


def normalize(v):
    n = length(v)
    return _a(v) / n if n > 0 else np.zeros_like(_a(v))


def outer(a, b):
    return np.outer(_a(a), _a(b))


def transpose(m):
    return _a(m).T.copy()


def determinant(m):
    return float(np.linalg.det(_a(m)))


def inverse(m):
    return np.linalg.inv(_a(m))


def trace(m):
    return float(np.trace(_a(m)))


def diag(v):
    return np.diag(_a(v))


def skew(v):
    x, y, z = _a(v)
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def identity(n=3, dtype=float):
    return np.eye(n, dtype=np.float32 if dtype in (np.float32, "float32") else np.float64)


def cw_mul(a, b):
    return _a(a) * _a(b)


def cw_div(a, b):
    return _a(a) / _a(b)


def mul(a, b):
    """Warp's ``mul``: what ``a * b`` means on vector types."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 2 or b.ndim == 2:
        return a @ b
    if a.shape == (4,) and b.shape == (4,):
        return quat_multiply(a, b)
    return a * b


def quat_identity(dtype=float):
    return np.array([0.0, 0.0, 0.0, 1.0])


def quat_multiply(q, r):
    qv, qw, rv, rw = _a(q)[:3], _a(q)[3], _a(r)[:3], _a(r)[3]
    return np.concatenate([qw * rv + rw * qv + np.cross(qv, rv), [qw * rw - np.dot(qv, rv)]])


def quat_inverse(q):
    q = _a(q)
    return np.array([-q[0], -q[1], -q[2], q[3]])


def quat_rotate(q, v):
    q, v = _a(q), _a(v)
    qv, w = q[:3], q[3]
    return v * (2 * w * w - 1) + np.cross(qv, v) * w * 2 + qv * np.dot(qv, v) * 2


def quat_rotate_inv(q, v):
    q, v = _a(q), _a(v)
    qv, w = q[:3], q[3]
    return v * (2 * w * w - 1) - np.cross(qv, v) * w * 2 + qv * np.dot(qv, v) * 2


def quat_from_axis_angle(axis, angle):
    n = normalize(axis)
    return np.concatenate([n * np.sin(angle / 2), [np.cos(angle / 2)]])


def quat_to_matrix(q):
    return np.stack([quat_rotate(q, e) for e in np.eye(3)], axis=1)


def quat_from_matrix(m):
    """Of a mat44, the quaternion of its top-left 3x3 block (Warp's)."""
    m = _a(m)
    if m.shape == (4, 4):
        m = m[:3, :3]
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr >= 0:
        h = np.sqrt(tr + 1)
        w, h = 0.5 * h, 0.5 / h
        q = [(m[2, 1] - m[1, 2]) * h, (m[0, 2] - m[2, 0]) * h, (m[1, 0] - m[0, 1]) * h, w]
    else:
        i = 0
        if m[1, 1] > m[0, 0]:
            i = 1
        if m[2, 2] > m[i, i]:
            i = 2
        j, k = (i + 1) % 3, (i + 2) % 3
        h = np.sqrt(m[i, i] - (m[j, j] + m[k, k]) + 1)
        q = [0.0] * 4
        q[i], h = 0.5 * h, 0.5 / h
        q[j] = (m[i, j] + m[j, i]) * h
        q[k] = (m[k, i] + m[i, k]) * h
        q[3] = (m[k, j] - m[j, k]) * h
    return normalize(np.array(q))


def quat_rpy(roll, pitch, yaw):
    """The rotation by ``roll`` about x, then ``pitch`` about y, then ``yaw`` about z."""
    def about(k, a):
        return quat_from_axis_angle(np.eye(3)[k], a)
    return quat_multiply(about(2, yaw), quat_multiply(about(1, pitch), about(0, roll)))


def quat_to_axis_angle(q):
    """``(axis, angle)``, angle in [0, pi], axis on the side of positive w (0 for no turn)."""
    q = _a(q)
    n = float(np.sqrt(np.sum(q[:3] * q[:3])))
    signed = -n if q[3] < 0 else n
    axis = q[:3] / signed if n > 0 else np.zeros(3, q.dtype)
    return axis, 2.0 * float(np.arctan2(n, abs(q[3])))


def quat_slerp(q0, q1, t):
    """``q0`` turned by the fraction ``t`` of the shorter rotation from ``q0`` to ``q1``."""
    axis, angle = quat_to_axis_angle(quat_multiply(quat_inverse(q0), q1))
    half = 0.5 * t * angle
    return quat_multiply(q0, np.concatenate([axis * np.sin(half), [np.cos(half)]]))


def ddot(a, b):
    """The double contraction sum_ij a_ij b_ij."""
    return float(np.sum(_a(a) * _a(b)))


def transform_identity(dtype=float):
    return np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])


def transform_get_translation(t):
    return _a(t)[:3].copy()


def transform_get_rotation(t):
    return _a(t)[3:].copy()


def transform_point(t, x):
    """Of a mat44 ``m``: the first three components of ``m @ (x, 1)`` (Warp's)."""
    t = _a(t)
    if t.shape == (4, 4):
        return t[:3, :3] @ _a(x) + t[:3, 3]
    return t[:3] + quat_rotate(t[3:], x)


def transform_vector(t, v):
    """Of a mat44 ``m``: the first three components of ``m @ (v, 0)`` (Warp's)."""
    t = _a(t)
    if t.shape == (4, 4):
        return t[:3, :3] @ _a(v)
    return quat_rotate(t[3:], v)


def transform_multiply(a, b):
    a, b = _a(a), _a(b)
    return np.concatenate([quat_rotate(a[3:], b[:3]) + a[:3], quat_multiply(a[3:], b[3:])])


def transform_inverse(t):
    t = _a(t)
    qi = quat_inverse(t[3:])
    return np.concatenate([-quat_rotate(qi, t[:3]), qi])


def matrix_from_rows(*rows):
    return np.stack([_a(r) for r in rows])


def matrix_from_cols(*cols):
    return np.stack([_a(c) for c in cols], axis=1)


# -- spatial vectors and matrices (Warp's: a spatial vector is (w, v), angular on top) --

def spatial_top(a):
    return _a(a)[:3].copy()


def spatial_bottom(a):
    return _a(a)[3:].copy()


def spatial_dot(a, b):
    return dot(a, b)


def spatial_cross(a, b):
    a, b = _a(a), _a(b)
    return np.concatenate([np.cross(a[:3], b[:3]), np.cross(a[3:], b[:3]) + np.cross(a[:3], b[3:])])


def spatial_cross_dual(a, b):
    a, b = _a(a), _a(b)
    return np.concatenate([np.cross(a[:3], b[:3]) + np.cross(a[3:], b[3:]), np.cross(a[:3], b[3:])])


def spatial_adjoint(r, s):
    r, s = _a(r), _a(s)
    return np.block([[r, np.zeros_like(r)], [s, r]])


def transform_twist(t, x):
    t, x = _a(t), _a(x)
    w = quat_rotate(t[3:], x[:3])
    return np.concatenate([w, quat_rotate(t[3:], x[3:]) + np.cross(t[:3], w)])


def transform_wrench(t, x):
    t, x = _a(t), _a(x)
    f = quat_rotate(t[3:], x[3:])
    return np.concatenate([quat_rotate(t[3:], x[:3]) + np.cross(t[:3], f), f])


def velocity_at_point(qd, r):
    qd = _a(qd)
    return qd[3:] + np.cross(qd[:3], _a(r))


class Generic:
    """Warp's ``vector`` and ``matrix``: given only ``length=``/``shape=`` (and ``dtype=``)
    in plain Python, the type (``vector(length=6, dtype=float)`` is ``ad.vec6``); given
    components, a value of that type (inside a kernel always a value, zeros without
    components, as Warp's). ``float`` means ``default`` (float64 here, float32 in
    ``adjoint.warp``)."""

    def __init__(self, name, default):
        self.__name__ = self.name = name
        self.default = default

    def __call__(self, *args, length=None, shape=None, dtype=None):
        size = length if self.name == "vector" else shape
        if size is None:
            if self.name == "matrix" or not args:
                key = "length" if self.name == "vector" else "shape"
                raise TypeError(f"{self.name}() needs {key}=")
            size = len(args)
        vt = (vector_of if self.name == "vector" else matrix_of)(size, dtype, self.default)
        return vt(*args) if args else vt

    def __repr__(self):
        return f"<{self.name} type or value>"


vector = Generic("vector", np.float64)
matrix = Generic("matrix", np.float64)
# the same in adjoint.warp, where float is float32 (the parser knows both: GENERIC)
warp_vector = Generic("vector", np.float32)
warp_matrix = Generic("matrix", np.float32)
GENERIC = (vector, matrix, warp_vector, warp_matrix)


FUNCS = {f.__name__: f for f in (
    dot, cross, length, length_sq, normalize, outer, transpose, determinant, inverse, trace,
    diag, skew, identity, cw_mul, cw_div, mul, quat_identity, quat_inverse, quat_rotate,
    quat_rotate_inv, quat_from_axis_angle, quat_to_matrix, quat_from_matrix, quat_rpy,
    quat_to_axis_angle, quat_slerp, ddot, transform_identity,
    transform_get_translation, transform_get_rotation, transform_point, transform_vector,
    transform_multiply, transform_inverse, spatial_top, spatial_bottom, spatial_dot,
    spatial_cross, spatial_cross_dual, spatial_adjoint, transform_twist, transform_wrench,
    velocity_at_point, vector, matrix, matrix_from_rows, matrix_from_cols)}

# what a kernel may call, by name: the functions and the types (constructors)
CALLABLE = dict(FUNCS, **ALL)
__all__ = sorted(CALLABLE)
