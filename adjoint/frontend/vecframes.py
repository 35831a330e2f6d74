"""Warp's transforms and spatial vectors as scalar expressions (pass scalarize).

The companions of vecops.py (same conventions: a ``Builder`` ``b`` and ``V`` operands;
a transform is (p, q), a quaternion (x, y, z, w)), written with its operations so that
every derivative is the chain rule through rules that exist. A spatial vector is a
vec6 (w, v), angular part on top (Warp's Featherstone conventions).
"""
from ..runtime.vectypes import TYPES, mat_of, vec_of
from .vecops import QUAT, VEC3, V, VectorUseError, _check, _mat, _quat, _sum, _vec, cross, dot, \
    quat_inverse, quat_mul, quat_rotate

TRANSFORM = TYPES[("transform", (7,))]


# -- transforms ----------------------------------------------------------------------

def _tf(t, what):
    return _check(t, "transform", what=what)


def make_transform(b, p, q):
    p, q = _vec(p, "transform", 3), _quat(q, "transform")
    return V(TRANSFORM, p.comps + q.comps)


def translation(t):
    return V(VEC3, t.comps[:3])


def rotation(t):
    return V(QUAT, t.comps[3:])


def transform_identity(b):
    return V(TRANSFORM, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])


def _homogeneous(b, m, x, w, what):
    """The first three components of ``m * (x, w)``, ``m`` a mat44 and ``w`` 1.0 (a point)
    or 0.0 (a direction): the structural constant folds away (``m[i][3] * 1.0`` is
    ``m[i][3]``; the terms of 0.0 vanish), so each is a sum of products."""
    if m.vt.shape != (4, 4):
        raise VectorUseError(f"{what} takes a transform or a mat44, not {m.vt.name}")
    x = b.atoms(_vec(x, what, 3))      # (each entry of m is used once: no atoms needed)
    h, cols = x.comps + [w], (4 if w == 1.0 else 3)
    return V(VEC3, [_sum(b, [b.mul(m.at(i, j), h[j]) for j in range(cols)])
                    for i in range(3)])


def transform_point(b, t, x):
    """A transform's: rotation, then translation; a mat44's: ``m * (x, 1)`` (Warp's)."""
    if isinstance(t, V) and t.vt.kind == "mat":
        return _homogeneous(b, t, x, 1.0, "transform_point")
    t = b.atoms(_tf(t, "transform_point"))
    r = quat_rotate(b, rotation(t), x)
    return V(VEC3, [b.add(c, p) for c, p in zip(r.comps, t.comps[:3])])


def transform_vector(b, t, v):
    """A transform's: its rotation alone; a mat44's: ``m * (v, 0)`` (Warp's)."""
    if isinstance(t, V) and t.vt.kind == "mat":
        return _homogeneous(b, t, v, 0.0, "transform_vector")
    return quat_rotate(b, rotation(_tf(t, "transform_vector")), v)


def transform_multiply(b, s, t):
    s, t = b.atoms(_tf(s, "transform_multiply")), b.atoms(_tf(t, "transform_multiply"))
    p = quat_rotate(b, rotation(s), translation(t))
    p = V(VEC3, [b.add(c, d) for c, d in zip(p.comps, s.comps[:3])])
    return V(TRANSFORM, p.comps + quat_mul(b, rotation(s), rotation(t)).comps)


def transform_inverse(b, t):
    t = b.atoms(_tf(t, "transform_inverse"))
    qi = b.atoms(quat_inverse(b, rotation(t)))
    p = quat_rotate(b, qi, translation(t))
    return V(TRANSFORM, [b.neg(c) for c in p.comps] + qi.comps)


# -- spatial vectors and matrices (Warp's Featherstone conventions) --------------------
# A spatial vector is a vec6 (w, v): the angular part on top, the linear one below; a
# twist (angular velocity, linear velocity) or a wrench (torque, force).

VEC6 = vec_of(6)


def _halves(b, a, what):
    a = b.atoms(_vec(a, what, 6))
    return V(VEC3, a.comps[:3]), V(VEC3, a.comps[3:])


def _spatial(w, v):
    return V(VEC6, w.comps + v.comps)


def _plus(b, x, y):
    return V(x.vt, [b.add(p, q) for p, q in zip(x.comps, y.comps)])


def spatial_top(b, a):
    return V(VEC3, _vec(a, "spatial_top", 6).comps[:3])


def spatial_bottom(b, a):
    return V(VEC3, _vec(a, "spatial_bottom", 6).comps[3:])


def spatial_dot(b, a, c):
    return dot(b, _vec(a, "spatial_dot", 6), _vec(c, "spatial_dot", 6))


def spatial_cross(b, a, c):
    """The motion cross product: (wa x wb, va x wb + wa x vb)."""
    (wa, va), (wb, vb) = _halves(b, a, "spatial_cross"), _halves(b, c, "spatial_cross")
    return _spatial(cross(b, wa, wb), _plus(b, cross(b, va, wb), cross(b, wa, vb)))


def spatial_cross_dual(b, a, c):
    """The force cross product: (wa x wb + va x vb, wa x vb)."""
    (wa, va), (wb, vb) = _halves(b, a, "spatial_cross_dual"), \
        _halves(b, c, "spatial_cross_dual")
    return _spatial(_plus(b, cross(b, wa, wb), cross(b, va, vb)), cross(b, wa, vb))


def spatial_adjoint(b, r, s):
    """The 6x6 block matrix [[r, 0], [s, r]] of two mat33 (Warp's)."""
    r, s = b.atoms(_mat(r, "spatial_adjoint")), b.atoms(_mat(s, "spatial_adjoint"))
    if r.vt.shape != (3, 3) or s.vt.shape != (3, 3):
        raise VectorUseError("spatial_adjoint takes two mat33")
    comps = []
    for i in range(6):
        for j in range(6):
            if i < 3:
                comps.append(r.at(i, j) if j < 3 else 0.0)
            else:
                comps.append(s.at(i - 3, j) if j < 3 else r.at(i - 3, j - 3))
    return V(mat_of(6), comps)


def transform_twist(b, t, x):
    """A twist (w, v) in the frame of transform t = (p, q): (R w, R v + p x R w)."""
    t = b.atoms(_tf(t, "transform_twist"))
    top, bottom = _halves(b, x, "transform_twist")
    w = b.atoms(quat_rotate(b, rotation(t), top))
    return _spatial(w, _plus(b, quat_rotate(b, rotation(t), bottom), cross(b, translation(t), w)))


def transform_wrench(b, t, x):
    """A wrench (tau, f) in the frame of transform t = (p, q): (R tau + p x R f, R f)."""
    t = b.atoms(_tf(t, "transform_wrench"))
    top, bottom = _halves(b, x, "transform_wrench")
    f = b.atoms(quat_rotate(b, rotation(t), bottom))
    return _spatial(_plus(b, quat_rotate(b, rotation(t), top), cross(b, translation(t), f)), f)


def velocity_at_point(b, qd, r):
    """The linear velocity at offset r of a body moving with twist qd = (w, v): v + w x r."""
    w, v = _halves(b, qd, "velocity_at_point")
    return _plus(b, v, cross(b, w, r))
