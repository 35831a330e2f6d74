"""Pass 7g, scale: powers of two that rules multiply tangents by and then divide them by
again are left out.

Expects: a JVP body (pass jvp, after pass reciprocal) and the names of its tangent
values and arrays.
Guarantees: a new body (the input is not changed) computing every tangent it stores,
returns or passes on with the same value, bit for bit, wherever no intermediate value
overflows or is subnormal (below); primal statements are not changed.

What it does: the rules of ``*`` and ``sqrt`` each bring a factor of two. The tangent of
``x * x`` is ``dot_x * x + dot_x * x`` (``2 * (dot_x * x)``), that of ``sqrt(r)`` is
``dot_r * 0.5 / s``. A length ``sqrt(dx * dx + dy * dy + dz * dz)`` (springs, n-body)
doubles three products, adds the doubled values, and halves the sum: four operations of
about twenty that cancel. Here a tangent value may stand for ``s`` times what is
stored in its name, ``s`` a power of two of at least 1, within one block:

- ``a + a`` is ``a`` at twice its scale; ``a + b``, ``a - b``, ``-a`` keep the scale
  both operands share (at different scales, each is multiplied by what brings it to
  the smaller); a product or quotient by a value with no tangent keeps the operand's
  scale, and one by a constant ``2**k`` (``0.5``) takes it into the scale (or, where
  that would be below 1, is one product by the scale times the constant);
- a name assigned so is *deferred* when it is assigned once in the whole body and read
  only by the statements after it in its block (not in nested blocks): its statement
  assigns the scaled-down value, and every statement reading it that is not another
  such tangent assignment reads ``(name * s)``. Any other tangent assignment stores
  ``value * s``.

Why it is exact: multiplying by a power of two is exact, and ``2a + 2b`` rounds to
twice ``a + b``, so ``s * value`` is bit for bit what the rules' own expressions give,
unless one of those intermediates overflows (the scaled-down value, smaller, does not:
the tangent is finite where the rules' form was an infinity) or falls below the
smallest normal number (where rounding differs by the scale). Keeping every scale at
least 1 means no value is ever larger than the rules' form made it.

Why only in a JVP: a backward's adjoints are accumulated (``adj_x += ...``) from several
statements, each at a scale of its own; the same cancellation there is future work.
"""
import math
from collections import defaultdict

import gast

from .ir import copy_tree, value_names, walk_stmts


def folded(body, derived):
    """A copy of ``body`` with the powers of two left out (module docstring); ``derived``
    names the tangent values and arrays."""
    body = copy_tree(body)
    _Scale(set(derived), body).block(body)
    return body


class _Scale:
    def __init__(self, derived, body):
        self.derived = derived
        self.assigned = defaultdict(int)
        for s in walk_stmts(body):
            for n in _assigned(s):
                self.assigned[n] += 1
        self.readers = defaultdict(list)      # name -> [(block id, index, direct)]
        self._reads(body)

    def _reads(self, stmts):
        for k, s in enumerate(stmts):
            compound = isinstance(s, (gast.If, gast.For, gast.While))
            for n in _reads(s):
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


def _assigned(s):
    if isinstance(s, gast.Assign):
        out = []
        for t in s.targets:
            out += [t.id] if isinstance(t, gast.Name) else \
                [e.id for e in getattr(t, "elts", ()) if isinstance(e, gast.Name)]
        return out
    if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Name):
        return [s.target.id]
    if isinstance(s, gast.For):
        return [n.id for n in gast.walk(s.target) if isinstance(n, gast.Name)]
    return []


def _reads(s):
    """The names ``s`` reads (a compound statement: in its test or iterable only)."""
    if isinstance(s, (gast.If, gast.While)):
        return {n.id for n in value_names(s.test)}
    if isinstance(s, gast.For):
        return {n.id for n in value_names(s.iter)}
    return {n.id for n in value_names(s)} | (
        {s.target.id} if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Name)
        else set())


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


def _analyze(e, scale, derived):
    """``(s, e2)``: ``e`` is ``s * e2`` (module docstring), ``s`` a power of two >= 1."""
    if not _has_tangent(e, derived):
        return 1, copy_tree(e)
    if isinstance(e, gast.Name):
        return scale.get(e.id, 1), copy_tree(e)
    if isinstance(e, gast.UnaryOp) and isinstance(e.op, (gast.USub, gast.UAdd)):
        s, a = _analyze(e.operand, scale, derived)
        return s, gast.UnaryOp(op=type(e.op)(), operand=a)
    if isinstance(e, gast.BinOp):
        left, right = _has_tangent(e.left, derived), _has_tangent(e.right, derived)
        if isinstance(e.op, (gast.Add, gast.Sub)) and left and right:
            (sa, a), (sb, b) = _analyze(e.left, scale, derived), _analyze(e.right, scale, derived)
            if sa == sb and isinstance(e.op, gast.Add) and _same(a, b):
                return 2 * sa, a            # a + a == 2 * a, exactly
            low = min(sa, sb)
            return low, gast.BinOp(left=_times(a, sa / low), op=type(e.op)(),
                                   right=_times(b, sb / low))
        if left != right and (isinstance(e.op, gast.Mult) or
                              isinstance(e.op, gast.Div) and left):     # (linear in it)
            s, a = _analyze(e.left if left else e.right, scale, derived)
            other = e.right if left else e.left
            p = _power_of_two(other)
            if p is not None:
                q = s * p if isinstance(e.op, gast.Mult) else s / p
                return (q, a) if q >= 1 else (1, _times(a, q))   # (one multiplication)
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
