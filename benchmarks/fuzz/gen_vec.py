"""Random vec3, mat33 and quat code: expressions, the scalars reducing them, statements.

Used only in the bodies of vector programs (``Ctx.vectors`` names the kinds a body
may use: always "vec3", sometimes "mat33" and "quat"). The invariant is the scalar
one of gen_expr carried over: every vec3 or mat33 local has components of about
[-2, 2] (products are scaled down: ``0.25 * ad.cross(u, w)``, ``0.15 * (m @ u)``),
and every quat local is a unit quaternion (``ad.normalize`` of one whose w is kept
away from 0, or ``ad.quat_from_axis_angle``). Vectors are never normalized or
measured near zero, where ``ad.length``/``ad.normalize`` have no derivative: their
argument is ``v + c`` with one component of ``c`` of size 6, so its length is at
least about 2.

Statements assign, rebind and alias vectors (``b = u`` then ``u.x = ...``: a vector
is a value), update components (``u.y += ...``, ``m[0, 2] = ...``), update vectors
in place (``u += 0.5 * (w - u)``, ``u *= c``), choose a vector in ``if``/``else``,
walk a vector's components with a loop (``for k0 in range(3): u[k0] *= c``), and carry
vectors through loops (gen_stmt's ``_carry``).
"""
import re

from .gen_expr import VECTOR_ARG, VECTOR_FORMS, bounded, call_source, comparison, leaf, raw
from .gen_stmt import VECTOR_CARRY, VECTOR_CONSTRUCTS, _branch_body, _compound, _keep_common, body

MAX_DEPTH = 2


def _p(source):
    """``source`` parenthesized unless it is a name, a load or a component (an operand of
    ``@`` or ``*`` must not be ``0.25 * ...``: ``m @ 0.25 * v`` is ``(m @ 0.25) * v``)."""
    return source if re.fullmatch(r"[\w.]+(\[[\w, ]*\])?", source) else f"({source})"


def _offset(ctx):
    """A constant vec3 with one component of size 6: ``v + offset`` is never near zero."""
    comps = [ctx.const(-0.5, 0.5) for _ in range(3)]
    comps[ctx.rng.randint(0, 2)] = ctx.pick(["6.0", "-6.0", "5.5"])
    return f"ad.vec3({', '.join(comps)})"


def _recent(ctx, names):
    return ctx.pick(names[-2:]) if ctx.chance(0.5) else ctx.pick(names)


# --------------------------------------------------------------------------- vec3

def _v_var(ctx, depth):
    return _recent(ctx, ctx.scope.vecs)


def _v_load(ctx, depth):
    return ctx.pick(ctx.vreads)


def _v_build(ctx, depth):
    comps = [bounded(ctx, 2) if depth == 0 and ctx.chance(0.25) else leaf(ctx) for _ in range(3)]
    return f"ad.vec3({', '.join(comps)})"


def _v_scale(ctx, depth):
    v = vec(ctx, depth + 1)
    return ctx.pick([f"{v} * math.tanh({raw(ctx, 1)})", f"math.sin({raw(ctx, 1)}) * {v}",
                     f"{v} / (2.0 + math.cos({raw(ctx, 1)}))", f"0.5 * {v}", f"{v} * 0.5"])


def _v_combine(ctx, depth):
    a = ctx.rng.choice([0.5, 0.3, 0.7])
    u, w = vec(ctx, depth + 1), vec(ctx, depth + 1)
    return ctx.pick([f"({a} * {u} + {round(1 - a, 2)} * {w})", f"0.5 * ({u} - {w})",
                     f"({a} * {u} - {round(1 - a, 2)} * {w})"])


def _v_neg(ctx, depth):
    return f"-{vec(ctx, depth + 1)}"


def _v_cross(ctx, depth):
    """``0.25 * ad.cross(a, b)``, never of one expression with itself (that is zero)."""
    a, b = vec(ctx, depth + 1), vec(ctx, depth + 1)
    if a == b:
        b = _v_build(ctx, MAX_DEPTH)
    return f"0.25 * ad.cross({a}, {b})"


def _v_normalize(ctx, depth):
    return f"ad.normalize({vec(ctx, depth + 1)} + {_offset(ctx)})"


def _v_ternary(ctx, depth):
    return f"({vec(ctx, depth + 1)} if {comparison(ctx)} else {vec(ctx, depth + 1)})"


def _v_matvec(ctx, depth):
    m, v = mat(ctx, depth + 1), vec(ctx, depth + 1)
    return ctx.pick([f"0.15 * ({_p(m)} @ {_p(v)})", f"({_p(m)} @ {_p(v)}) * 0.15",
                     f"0.15 * (ad.transpose({m}) @ {_p(v)})"])


def _v_row(ctx, depth):
    return f"{ctx.pick(ctx.scope.mats)}[{ctx.rng.randint(0, 2)}]"


def _v_rotate(ctx, depth):
    fn = ctx.pick(["ad.quat_rotate", "ad.quat_rotate", "ad.quat_rotate_inv"])
    return f"{fn}({quat(ctx, depth + 1)}, {vec(ctx, depth + 1)})"


def _v_call(ctx, depth):
    return call_source(ctx, ctx.pick(_vec_funcs(ctx)))


def _vec_funcs(ctx):
    return [f for f in ctx.funcs if f.vec_returns == (0,) and f.n_returns == 1]


def vec(ctx, depth=0):
    """A vec3 expression with components of about [-2, 2]; ``depth`` counts the
    forms around it (at ``MAX_DEPTH`` only locals, loads and ``ad.vec3(...)``)."""
    atoms = [_v_build] + [_v_var] * 3 * bool(ctx.scope.vecs) + [_v_load] * 2 * bool(ctx.vreads)
    if depth >= MAX_DEPTH or ctx.chance(0.35):
        return ctx.pick(atoms)(ctx, depth)
    forms = [_v_scale, _v_combine, _v_combine, _v_neg, _v_cross, _v_cross, _v_normalize,
             _v_ternary]
    if "mat33" in ctx.vectors:
        forms += [_v_matvec, _v_matvec] + [_v_row] * bool(ctx.scope.mats)
    if "quat" in ctx.vectors:
        forms += [_v_rotate, _v_rotate]
    if depth == 0 and _vec_funcs(ctx):
        forms.append(_v_call)
    return ctx.pick(forms)(ctx, depth)


# --------------------------------------------------------------------------- mat33 and quat

def mat(ctx, depth=0):
    """A mat33 expression with entries of about [-2, 2]."""
    forms = ["build"] + ["var"] * 2 * bool(ctx.scope.mats)
    if depth < MAX_DEPTH:
        forms += ["transpose", "product", "sum"]
    form = ctx.pick(forms)
    if form == "var":
        return _recent(ctx, ctx.scope.mats)
    if form == "build":
        return f"ad.mat33({', '.join(leaf(ctx) for _ in range(9))})"
    if form == "transpose":
        return f"ad.transpose({mat(ctx, depth + 1)})"
    if form == "product":
        return f"0.15 * ({_p(mat(ctx, depth + 1))} @ {_p(mat(ctx, depth + 1))})"
    return f"0.5 * ({mat(ctx, depth + 1)} {ctx.pick(['+', '-'])} {mat(ctx, depth + 1)})"


def quat(ctx, depth=0):
    """A unit quaternion expression."""
    forms = ["build", "axis"] + ["var"] * 2 * bool(ctx.scope.quats)
    if depth < MAX_DEPTH and ctx.scope.quats:
        forms.append("product")
    form = ctx.pick(forms)
    if form == "var":
        return _recent(ctx, ctx.scope.quats)
    if form == "build":
        w = f"{ctx.pick(['3.0', '-3.0'])} + {leaf(ctx)}"
        return f"ad.normalize(ad.quat({leaf(ctx)}, {leaf(ctx)}, {leaf(ctx)}, {w}))"
    if form == "axis":
        return f"ad.quat_from_axis_angle({vec(ctx, MAX_DEPTH)} + {_offset(ctx)}, {leaf(ctx)})"
    return f"ad.normalize({_p(quat(ctx, depth + 1))} * {_p(quat(ctx, depth + 1))})"


# --------------------------------------------------------------------------- scalars from vectors

def _s_dot(ctx):
    return f"0.2 * ad.dot({vec(ctx, 1)}, {vec(ctx, 1)})"


def _s_length(ctx):
    return f"(0.3 * ad.length({vec(ctx, 1)} + {_offset(ctx)}) - 1.8)"


def _s_component(ctx):
    """A component of a vector expression: ``ad.cross(u, w).y``, ``(m @ u)[2]``."""
    v = vec(ctx, 1)
    k = ctx.rng.randint(0, 2)
    return f"({v}).{'xyz'[k]}" if ctx.chance(0.5) else f"({v})[{k}]"


def _s_mat(ctx):
    m = mat(ctx, 1)
    return ctx.pick([f"({m})[{ctx.rng.randint(0, 2)}, {ctx.rng.randint(0, 2)}]",
                     f"0.1 * ad.dot({_p(m)} @ {_p(vec(ctx, 1))}, {vec(ctx, 1)})"])


def _s_quat(ctx):
    q = quat(ctx, 1)
    return ctx.pick([f"({q}).w", f"({q})[{ctx.rng.randint(0, 3)}]",
                     f"0.2 * ad.dot(ad.quat_rotate({q}, {vec(ctx, 1)}), {vec(ctx, 1)})"])


def vector_scalar(ctx):
    """A scalar of about [-2, 2] computed from vectors (one of gen_expr's leaf forms)."""
    forms = [_s_dot, _s_dot, _s_length, _s_component, _s_component]
    if "mat33" in ctx.vectors:
        forms.append(_s_mat)
    if "quat" in ctx.vectors:
        forms.append(_s_quat)
    return ctx.pick(forms)(ctx)


# --------------------------------------------------------------------------- statements

def _new(ctx, kind, source):
    t = ctx.fresh({"v": "u", "m": "M", "q": "q"}[kind])
    ctx.emit(f"{t} = {source}")
    ctx.define(t, kind)


def s_vassign(ctx):
    _new(ctx, "v", vec(ctx))


def s_vrebind(ctx):
    """Rebind a vec3 (inside a loop: a loop-carried vector)."""
    ctx.emit(f"{ctx.pick(ctx.scope.vecs)} = {vec(ctx)}")


def s_valias(ctx):
    """``b = u``, then ``u`` changes (rebound, a component set, updated in place): ``b``
    keeps the old value."""
    t = ctx.fresh("u")
    src = ctx.pick(ctx.scope.vecs)
    ctx.emit(f"{t} = {src}")
    ctx.define(t, "v")
    ctx.pick([lambda: ctx.emit(f"{src} = {vec(ctx)}"), lambda: _set_component(ctx, src),
              lambda: _update(ctx, src), lambda: None])()


def _set_component(ctx, v):
    k = ctx.rng.randint(0, 2)
    target = f"{v}.{'xyz'[k]}" if ctx.chance(0.5) else f"{v}[{k}]"
    form = ctx.pick(["{t} = {b}", "{t} += 0.5 * ({b} - {t})", "{t} *= {c}"])
    ctx.emit(form.format(t=target, b=bounded(ctx), c=ctx.const(0.3, 0.95)))


def s_vcomponent(ctx):
    _set_component(ctx, ctx.pick(ctx.scope.vecs))


def _update(ctx, v):
    """``u += 0.5 * (w - u)``, ``u *= c``...: forms that keep ``u`` bounded in loops."""
    form = ctx.pick(["{v} += 0.5 * ({w} - {v})", "{v} -= 0.5 * ({v} - {w})", "{v} *= {c}",
                     "{v} /= 2.0 + math.cos({b})"])
    ctx.emit(form.format(v=v, w=vec(ctx, 1), c=ctx.const(0.3, 0.95), b=raw(ctx, 1)))


def s_vupdate(ctx):
    _update(ctx, ctx.pick(ctx.scope.vecs))


def carry(ctx):
    """First statement of a loop body in a vector program: a loop-carried vec3."""
    ctx.pick([s_vrebind, s_vupdate, s_vcomponent])(ctx)


def s_vif_else(ctx):
    """``if``/``else`` on data, a new vec3 assigned in both branches."""
    t = ctx.fresh("u")
    scopes = []
    for head in (f"if {comparison(ctx)}:", "else:"):
        ctx.emit(head)
        with ctx.block() as s:
            _branch_body(ctx, t, lambda: vec(ctx), "v")
            scopes.append(s)
    _keep_common(ctx, scopes)


def s_vif_only(ctx):
    """``if`` without ``else`` changing a vector from before it."""
    ctx.emit(f"if {comparison(ctx)}:")
    with ctx.block():
        body(ctx, ctx.rng.randint(0, 1))
        ctx.pick([s_vrebind, s_vupdate, s_vcomponent])(ctx)


def s_mat(ctx):
    """A new mat33, a rebound one, or one entry set."""
    if ctx.scope.mats and ctx.chance(0.3):
        m = ctx.pick(ctx.scope.mats)
        ctx.emit(f"{m}[{ctx.rng.randint(0, 2)}, {ctx.rng.randint(0, 2)}] = {bounded(ctx)}")
    elif ctx.scope.mats and ctx.chance(0.3):
        ctx.emit(f"{ctx.pick(ctx.scope.mats)} = {mat(ctx)}")
    else:
        _new(ctx, "m", mat(ctx))


def s_quat(ctx):
    if ctx.scope.quats and ctx.chance(0.3):
        ctx.emit(f"{ctx.pick(ctx.scope.quats)} = {quat(ctx)}")
    else:
        _new(ctx, "q", quat(ctx))


def s_vloop(ctx):
    """A loop over a vector's (and a matrix's) components by the loop's variable:
    ``for k0 in range(3): u[k0] = 0.5 * (u[k0] + ...)``, ``M[k0, 2 - k0] *= c``, over a
    range forward, backward or partial (pass unroll writes such loops out; with it off,
    each ``u[k0]`` is a select chain)."""
    k = ctx.fresh("k")
    ctx.emit(f"for {k} in {ctx.pick(['range(3)', 'range(2, -1, -1)', 'range(1, 3)'])}:")
    u = ctx.pick(ctx.scope.vecs)
    with ctx.block():
        ctx.emit(ctx.pick(["{u}[{k}] = 0.5 * ({u}[{k}] + {b})", "{u}[{k}] *= {c}",
                           "{u}[{k}] += 0.5 * ({u}[2 - {k}] - {u}[{k}])"]).format(
            u=u, k=k, b=bounded(ctx), c=ctx.const(0.3, 0.95)))
        if ctx.scope.mats and ctx.chance(0.5):
            m = ctx.pick(ctx.scope.mats)
            ctx.emit(ctx.pick(["{m}[{k}, 2 - {k}] = 0.5 * ({m}[{k}, {k}] + {u}[{k}])",
                               "{m}[{k}, {k}] *= {c}"]).format(m=m, u=u, k=k,
                                                               c=ctx.const(0.3, 0.95)))


def _has_vecs(ctx):
    return bool(ctx.scope.vecs)


VECTOR_CONSTRUCTS += [
    (s_vassign, 4, lambda ctx: True),
    (s_vrebind, 1.5, _has_vecs),
    (s_valias, 1.5, _has_vecs),
    (s_vcomponent, 1.5, _has_vecs),
    (s_vupdate, 1.5, _has_vecs),
    (s_vloop, 1, lambda ctx: _compound(ctx) and _has_vecs(ctx)),
    (s_vif_else, 1.5, _compound),
    (s_vif_only, 1, lambda ctx: _compound(ctx) and _has_vecs(ctx)),
    (s_mat, 2, lambda ctx: "mat33" in ctx.vectors),
    (s_quat, 2, lambda ctx: "quat" in ctx.vectors),
]
VECTOR_FORMS.append(vector_scalar)
VECTOR_ARG.append(vec)
VECTOR_CARRY.append(carry)
