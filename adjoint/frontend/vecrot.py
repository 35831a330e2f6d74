"""More of Warp's rotation and matrix builtins as scalar expressions (pass scalarize).

The companions of vecops.py (same conventions: a ``Builder`` ``b`` and ``V`` operands,
a quaternion (x, y, z, w) with w the real part), written with its operations so that
every derivative is the chain rule through rules that exist:

* ``ddot(A, B)``: the double contraction sum_ij A_ij B_ij of two matrices of one shape;
* ``quat_rpy(roll, pitch, yaw)``: the rotation by ``roll`` about x, then ``pitch`` about
  y, then ``yaw`` about z (fixed axes): the product qz * qy * qx (Warp's);
* ``quat_to_axis_angle(q)``: ``(axis, angle)`` with ``angle = 2 atan2(|v|, |w|)`` in
  [0, pi] and ``axis = v / |v|`` turned to the side of positive w, so that
  ``quat_from_axis_angle(axis, angle)`` is ``normalize(q)`` or ``-normalize(q)``; the
  axis of a rotation by 0 (v = 0) is 0 (``ad.div_or_zero``: derivative 0 there);
* ``quat_slerp(q0, q1, t)``: ``q0 * exp(t log(q0^-1 q1))`` by the axis and angle of
  ``q0^-1 q1`` (its ``w`` made positive: the shorter arc), Warp's definition.

A builtin with several results returns a tuple (vecexpr.py makes it a ``Multi``).
"""
from .vecops import QUAT, VEC3, V, VectorUseError, _check, _quat, quat_inverse, quat_mul


def ddot(b, x, y):
    x, y = _check(x, "mat", what="ddot"), _check(y, "mat", what="ddot")
    if x.vt is not y.vt:
        raise VectorUseError(f"ddot of {x.vt.name} and {y.vt.name}: the shapes differ")
    x, y = b.atoms(x), b.atoms(y)
    total = 0.0
    for p, q in zip(x.comps, y.comps):
        total = b.add(total, b.mul(p, q))
    return total


def _axis_quat(b, k, angle):
    """The rotation by ``angle`` about basis axis ``k`` (0: x, 1: y, 2: z)."""
    half = b.atom(b.mul(angle, 0.5), "half")
    comps = [0.0, 0.0, 0.0, b.call("cos", half)]
    comps[k] = b.call("sin", half)
    return V(QUAT, comps)


def quat_rpy(b, roll, pitch, yaw):
    if any(isinstance(a, V) for a in (roll, pitch, yaw)):
        raise VectorUseError("quat_rpy takes three scalar angles (roll, pitch, yaw)")
    qx, qy, qz = (_axis_quat(b, k, a) for k, a in enumerate((roll, pitch, yaw)))
    return quat_mul(b, qz, quat_mul(b, qy, qx))


def quat_to_axis_angle(b, q):
    q = b.atoms(_quat(q, "quat_to_axis_angle"))
    x, y, z, w = q.comps
    norm = b.atom(b.call("length3", x, y, z), "norm")
    angle = b.atom(b.mul(2.0, b.call("atan2", norm, b.call("abs", w))), "angle")
    signed = b.fresh("snorm")       # |v| with w's sign: the axis points where w >= 0
    with b.block() as negative:
        b.assign(signed, b.neg(norm))
    with b.block() as positive:
        b.assign(signed, norm)
    b.emit_if(b.compare(w, "<", 0.0), negative, positive)
    axis = V(VEC3, [b.call("div_or_zero", c, b.load(signed)) for c in (x, y, z)])
    return b.atoms(axis), angle


def quat_slerp(b, q0, q1, t):
    if isinstance(t, V):
        raise VectorUseError("quat_slerp takes two quaternions and a scalar t")
    q0 = b.atoms(_quat(q0, "quat_slerp"))
    rel = quat_mul(b, quat_inverse(b, q0), _quat(q1, "quat_slerp"))
    axis, angle = quat_to_axis_angle(b, rel)
    half = b.atom(b.mul(b.mul(t, angle), 0.5), "half")
    s = b.atom(b.call("sin", half), "s")
    step = V(QUAT, [b.mul(c, s) for c in axis.comps] + [b.call("cos", half)])
    return quat_mul(b, q0, step)
