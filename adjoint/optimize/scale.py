"""Pass scale: powers of two that rules multiply derivatives by and then divide them by
again are left out, in a JVP and in a backward.

Expects: a JVP body (pass jvp, after pass reciprocal) and the names of its tangent
values and arrays (``folded``); a backward body (pass reverse or store, after pass
reciprocal) and the names of its adjoints (``folded_backward``).
Guarantees: a new body (the input is not changed) computing every derivative it
stores, returns or passes on with the same value, bit for bit, wherever no
intermediate value overflows or is subnormal (below); primal statements are not
changed.

What it does: the rules of ``*`` and ``sqrt`` each bring a factor of two (the tangent
of ``x * x`` is ``dot_x * x + dot_x * x``, that of ``sqrt(r)`` is ``dot_r * 0.5 / s``),
which cancel in a length ``sqrt(dx * dx + ...)``. A derivative value may stand for
``s`` times what is stored in its name, ``s`` a power of two, tracked through ``+``,
``-``, products and quotients. In a JVP a tangent assigned once and read only later
in its block is *deferred* (its readers read ``(name * s)``), any other stores
``value * s``; scales are at least 1. In a backward, repeated ``adj_x += e`` into an
adjoint known to be zero doubles the scale instead of adding; each scale is
multiplied back into its name at the end of its block and before a nested block,
``break``, ``continue`` or ``return``; scales are at least 1/2. The rules in full:
docs/semantics.md, "Passes reciprocal and scale in full".

Why it is exact: multiplying by a power of two is exact, and ``2a + 2b`` rounds to
twice ``a + b``, so ``s * value`` is bit for bit what the rules' own expressions give,
unless an intermediate overflows or falls below the smallest normal number. In a JVP,
scales of at least 1 keep every stored value at most the rules' own. In a backward a
value may be twice the rules' (the root's adjoint before its half): above half the
largest float it is an infinity here where the rules' form may stay finite.
"""
import math
from collections import Counter, defaultdict

import gast

from ..derive.ir import (assign, changed_names, copy_tree, load_names, name, names_in_target,
                 number_constant, value_names, walk_stmts)
from .once import assigned_names
from ..derive.prune import prune


def folded(body, derived):
    """A copy of ``body`` with the powers of two left out (module docstring); ``derived``
    names the tangent values and arrays."""
    body = copy_tree(body)
    _Scale(set(derived), body).block(body)
    return body


class _Scale:
    def __init__(self, derived, body):
        self.derived = derived
        self.assigned = Counter(assigned_names(body))
        self.readers = defaultdict(list)      # name -> [(block id, index, direct)]
        self._reads(body)

    def _reads(self, stmts):
        for k, s in enumerate(stmts):
            compound = isinstance(s, (gast.If, gast.For, gast.While))
            for n in load_names(s):
                self.readers[n].append((id(stmts), k, not compound))
            if compound:
                for field in ("body", "orelse"):
                    self._reads(getattr(s, field))

    def deferrable(self, stmts, k, d):
        """Whether ``d``, assigned by ``stmts[k]``, is assigned only there and read only
        directly by statements after it in ``stmts``."""
        reads = self.readers.get(d, ())
        return self.assigned[d] == 1 and bool(reads) and all(
            b == id(stmts) and j > k and direct for b, j, direct in reads)

    def block(self, stmts):
        """Fold ``stmts`` (a list of the copy, edited in place) and the blocks inside."""
        scale = {}
        for k, s in enumerate(stmts):
            if isinstance(s, (gast.If, gast.For, gast.While)):
                for field in ("body", "orelse"):
                    if isinstance(getattr(s, field, None), list):
                        self.block(getattr(s, field))
                continue
            d = _tangent_target(s, self.derived)
            if d is None:
                if scale:
                    _Materialize(scale).visit(s)
                continue
            sc, value = _analyze(s.value, scale, self.derived)
            if sc != 1 and self.deferrable(stmts, k, d):
                scale[d] = sc
            else:
                value = _times(value, sc)
            s.value = value


def _tangent_target(s, derived):
    """The tangent name ``s`` assigns (``dot_z = expr``), or None."""
    if isinstance(s, gast.Assign) and len(s.targets) == 1 and \
            isinstance(s.targets[0], gast.Name) and s.targets[0].id in derived:
        return s.targets[0].id
    return None


def _has_tangent(e, derived):
    return any(n.id in derived for n in value_names(e))


def _power_of_two(e):
    """``k`` for a float constant ``2.0 ** k``, else None."""
    if isinstance(e, gast.Constant) and type(e.value) is float and e.value > 0 and \
            math.isfinite(e.value):
        m, k = math.frexp(e.value)
        if m == 0.5:
            return 2.0 ** (k - 1)
    return None


def _analyze(e, scale, derived, lowest=1):
    """``(s, e2)``: ``e`` is ``s * e2`` (module docstring), ``s`` a power of two at least
    ``lowest``."""
    if not _has_tangent(e, derived):
        return 1, copy_tree(e)
    if isinstance(e, gast.Name):
        return scale.get(e.id, 1), copy_tree(e)
    if isinstance(e, gast.UnaryOp) and isinstance(e.op, (gast.USub, gast.UAdd)):
        s, a = _analyze(e.operand, scale, derived, lowest)
        return s, gast.UnaryOp(op=type(e.op)(), operand=a)
    if isinstance(e, gast.BinOp):
        left, right = _has_tangent(e.left, derived), _has_tangent(e.right, derived)
        if isinstance(e.op, (gast.Add, gast.Sub)) and left and right:
            (sa, a), (sb, b) = (_analyze(e.left, scale, derived, lowest),
                                _analyze(e.right, scale, derived, lowest))
            if sa == sb and isinstance(e.op, gast.Add) and _same(a, b):
                return 2 * sa, a            # a + a == 2 * a, exactly
            low = min(sa, sb)
            return low, gast.BinOp(left=_times(a, sa / low), op=type(e.op)(),
                                   right=_times(b, sb / low))
        if left != right and (isinstance(e.op, gast.Mult) or
                              isinstance(e.op, gast.Div) and left):     # (linear in it)
            s, a = _analyze(e.left if left else e.right, scale, derived, lowest)
            other = e.right if left else e.left
            p = _power_of_two(other)
            if p is not None:
                q = s * p if isinstance(e.op, gast.Mult) else s / p
                return (q, a) if q >= lowest else (1, _times(a, q))   # (one multiplication)
            other = copy_tree(other)
            return s, gast.BinOp(left=a if left else other, op=type(e.op)(),
                                 right=other if left else a)
    node = copy_tree(e)
    return 1, _Materialize(scale).visit(node) if scale else node


def _same(a, b):
    return gast.dump(a) == gast.dump(b)


def _times(e, s):
    if s == 1:
        return e
    return gast.BinOp(left=e, op=gast.Mult(), right=gast.Constant(value=float(s), kind=None))


class _Materialize(gast.NodeTransformer):
    """Reads of deferred names become ``(name * s)``."""

    def __init__(self, scale):
        self.scale = scale

    def visit_Name(self, node):
        s = self.scale.get(node.id)
        if s is None or not isinstance(node.ctx, gast.Load):
            return node
        return _times(node, s)


# --------------------------------------------------------------------------- backwards

LOWEST_ADJOINT = 0.5


def folded_backward(body, derived):
    """A copy of the backward ``body`` with the powers of two left out (module docstring,
    "In a backward"); ``derived`` names the adjoint values and arrays. A scale multiplied
    back into a name that nothing reads afterwards is left out too (``adj_t = adj_t * 0.5``
    before a ``return`` that does not return it)."""
    body = copy_tree(body)
    folder = _Backward(set(derived))
    out, _ = folder.block(body, set(), top=True)
    return _without(out, folder.dead_flushes(out))


def _without(stmts, drop):
    """``stmts`` (edited in place) without the statements whose ids are in ``drop``."""
    if not drop:
        return stmts
    out = []
    for s in stmts:
        if id(s) in drop:
            continue
        for field in ("body", "orelse"):
            block = getattr(s, field, None)
            if isinstance(s, (gast.If, gast.For, gast.While)) and isinstance(block, list):
                setattr(s, field, _without(block, drop) or
                        ([gast.Pass()] if field == "body" else []))
        out.append(s)
    return out


def _is_zeroing(s, derived):
    """``adj_x = -0.0`` (or ``0.0``): an adjoint set to zero."""
    if _tangent_target(s, derived) is None:
        return False
    v = number_constant(s.value)
    return type(v) is float and v == 0


def _loop_parts(s):
    info = getattr(s, "loop", None)
    return [] if info is None else list(info.cond) + list(info.latch)


def _zeros_after(stmts, zero, derived):
    """The adjoints known to be zero after ``stmts`` run from ``zero``."""
    z = set(zero)
    for s in stmts:
        if isinstance(s, gast.If):
            z = _zeros_after(s.body, z, derived) & _zeros_after(s.orelse, z, derived)
        elif isinstance(s, (gast.For, gast.While)):
            z = _loop_entry(s, z, derived)
        elif _is_zeroing(s, derived):
            z.add(s.targets[0].id)
        else:
            z -= set(assigned_names([s]))
    return z


def _loop_entry(s, zero, derived):
    """The adjoints zero at the start of every iteration of loop ``s`` entered with
    ``zero``, and after it: zero before it and again at the end of its body (a fixpoint).
    A body that may leave an iteration early (``break``, ``continue``, ``return``) may skip
    its resets: then only what the loop never assigns."""
    outside = set(assigned_names(_loop_parts(s)))
    z = set(zero) - outside - (names_in_target(s.target) if isinstance(s, gast.For) else set())
    if _exits(s.body):
        return z - set(assigned_names(s.body))
    while True:
        end = _zeros_after(s.body, z, derived) - outside
        if z <= end:
            return z
        z &= end


def _exits(stmts):
    """Whether ``stmts`` hold a ``break``, ``continue`` or ``return`` (in nested loops too:
    a ``return`` there leaves this loop as well)."""
    return any(isinstance(t, (gast.Break, gast.Continue, gast.Return)) for t in walk_stmts(stmts))


class _Backward:
    """One pass over a backward, block by block (module docstring)."""

    def __init__(self, derived):
        self.derived = derived
        self.flushes = set()        # ids of the multiply-backs (``adj_x = adj_x * s``)

    def dead_flushes(self, body):
        """The ids of the multiply-backs that nothing reads afterwards (pass prune's liveness,
        which keeps every statement it keeps as it was)."""
        if not self.flushes:
            return set()
        kept = {id(s) for s in walk_stmts(prune(body))}
        return {f for f in self.flushes if f not in kept}

    def block(self, stmts, zero, top=False):
        """``(statements, zero after them)`` of ``stmts`` entered with the adjoints in
        ``zero`` zero; every scale is multiplied back at the end (unless ``top``: nothing
        reads a function's adjoints after its last statement) and before each statement
        that may leave the block or run another block."""
        st = _State(set(zero), self.derived, self.flushes)
        for s in stmts:
            line = getattr(s, "lineno", None)
            if isinstance(s, gast.If):
                st.flush(line)
                body, zb = self.block(s.body, st.zero)
                orelse, zo = self.block(s.orelse, st.zero)
                s.body, s.orelse = body or [gast.Pass()], orelse
                st.zero = zb & zo
                st.out.append(s)
            elif isinstance(s, (gast.For, gast.While)):
                st.flush(line)
                entry = _loop_entry(s, st.zero, self.derived)
                s.body, _ = self.block(s.body, entry)
                st.zero = entry
                st.out.append(s)
            elif isinstance(s, (gast.Break, gast.Continue, gast.Return)):
                st.flush(line)
                st.out.append(s)
            else:
                st.statement(s)
        if not top:
            st.flush(getattr(stmts[-1], "lineno", None) if stmts else None)
        return st.out, st.zero


class _State:
    """A block's statements so far, and what is known after them: each adjoint's scale
    (its value is the scale times what its name holds), the adjoints known to be zero,
    and, for an adjoint last set from zero by ``adj_x += e``, that ``e`` (another
    ``adj_x += e`` doubles it)."""

    def __init__(self, zero, derived, flushes):
        self.zero = zero
        self.derived = derived
        self.flushes = flushes
        self.scale = {}
        self.holds = {}         # adjoint -> (op, dump of e, names e reads)
        self.out = []

    def flush(self, lineno=None):
        """Multiply every scale back into its name (``adj_x = adj_x * 2.0``)."""
        for n in sorted(self.scale):
            if self.scale[n] != 1 and n not in self.zero:
                self.out.append(assign(n, _times(name(n), self.scale[n]), lineno))
                self.flushes.add(id(self.out[-1]))
        self.scale.clear()
        self.holds.clear()

    def changed(self, n):
        """``n`` is assigned: what it held, and what was computed from it, no longer holds."""
        self.holds.pop(n, None)
        for m in [m for m, (_, _, reads) in self.holds.items() if n in reads]:
            del self.holds[m]

    def statement(self, s):
        d = self.derived
        if _is_zeroing(s, d):
            n = s.targets[0].id
            self.scale.pop(n, None)
            self.changed(n)
            self.zero.add(n)
            self.out.append(s)
            return
        target = _tangent_target(s, d)
        if target is not None:
            sc, value = _analyze(s.value, self.scale, d, LOWEST_ADJOINT)
            s.value = value
            self.set_scale(target, sc)
            self.changed(target)
            self.zero.discard(target)
            self.out.append(s)
            return
        if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Name) and \
                s.target.id in d and isinstance(s.op, (gast.Add, gast.Sub)):
            self.accumulate(s)
            return
        if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Name) and \
                self.scale.get(s.target.id, 1) != 1:      # (it reads its target: ``*=``)
            n = s.target.id
            self.out.append(assign(n, _times(name(n), self.scale.pop(n)),
                                   getattr(s, "lineno", None)))
        if self.scale:
            _Materialize(self.scale).visit(s)
        for n in assigned_names([s]):
            self.scale.pop(n, None)
            self.zero.discard(n)
        for n in changed_names(s):      # (an adjoint array's element cleared or added into)
            self.changed(n)
        self.out.append(s)

    def set_scale(self, n, sc):
        if sc == 1:
            self.scale.pop(n, None)
        else:
            self.scale[n] = sc

    def accumulate(self, s):
        """``adj_x += e`` (or ``-=``)."""
        n, op = s.target.id, type(s.op)
        sc, value = _analyze(s.value, self.scale, self.derived, LOWEST_ADJOINT)
        key = (op, gast.dump(value))
        if n in self.zero:                          # -0.0 + v is v: n holds v
            s.value = value
            self.zero.discard(n)
            self.set_scale(n, sc)
            self.changed(n)
            self.holds[n] = key + (frozenset(x.id for x in value_names(value)),)
            self.out.append(s)
            return
        held = self.holds.get(n)
        if held is not None and held[:2] == key and self.scale.get(n, 1) == sc:
            self.set_scale(n, 2 * sc)               # v + v is 2 * v: the add is left out
            self.holds.pop(n)
            return
        mine = self.scale.get(n, 1)
        if mine == sc:
            s.value = value
        elif sc > mine:
            s.value = _times(value, sc / mine)
        else:                                       # n's own scale comes down to sc
            s = assign(n, gast.BinOp(left=_times(name(n), mine / sc), op=op(), right=value),
                       getattr(s, "lineno", None))
            self.set_scale(n, sc)
        self.changed(n)
        self.out.append(s)
