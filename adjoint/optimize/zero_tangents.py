"""Pass zero_tangents: a JVP that leaves out the terms of arrays held constant.

Expects: a kernel's checked tree and SSA tree, the arrays it writes, its parts' plans,
and ``zero``: float array parameters a JVP launch was given no tangent for
(``api.Kernel.with_zero_tangents`` makes a variant of the kernel for that set).
Guarantees: for the arrays of ``zero`` the kernel only reads, a JVP built with them
inactive (``activity.active(ssa, zero)``): no statement reads or computes their
tangents, and the tangent part's plan covers the tangent arrays that JVP writes. An
array the kernel writes keeps its tangent. With no such array: nothing (the JVP of pass
jvp stands).
Why: a tangent that is zero contributes ``partial * 0`` to every tangent it reaches,
work that vector mode's Jacobian columns (one array's directions, the rest constant)
would do in every column (JAX's symbolic zeros).
Rounding: a dropped term ``partial * 0`` is a zero, but a rule with an operand held
constant takes its one-operand form (``x / c``: ``dot_x / c``; ``c / x``:
``-(dot_x / x) * q``), which may round otherwise (an ulp) than the two-operand form
given a zero. Where a dropped partial is ``inf`` or ``nan`` (the tangent of ``sqrt(w)``
at ``w = 0``), the JVP given zeros has ``0 * inf = nan`` and this one the derivative
along the other arrays.
"""
from ..derive import activity, jvp, parallel


def zero_tangents(checked, ssa, writes, plans, zero):
    """``{"tangent", "plans"}`` with the arrays of ``zero`` the kernel only reads held
    constant, or ``{}`` where there are none."""
    zero = frozenset(zero) - set(writes)
    if not zero:
        return {}
    tangent = jvp.jvp(checked, activity.active(ssa, zero))
    return {"tangent": tangent,
            "plans": plans[:-1] + (parallel.tangent_plan(plans[0], tangent.names),)}
