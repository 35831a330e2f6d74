"""Pass 7f, reciprocal: derivative statements dividing by one value multiply by its inverse.

Expects: a body (the JVP of pass jvp) and the names its derivative statements assign
(tangents and tangent arrays); the kinds of the body's values.
Guarantees: a new body (the input is not changed) in which, within one block, when two
or more derivative statements divide by a name ``d`` assigned earlier in that block by
an operation whose rule has ``safe_reciprocal`` (``d = rt.sqrt(x)``), one statement
``inv_d = 1.0 / d`` placed before the first of them computes its inverse and those
divisions ``X / d`` become ``X * inv_d``. Primal statements are never changed: the
values a JVP computes stay bitwise those of the forward.

Why: a division costs several multiplications, and rules chain them. In n-body's
``e += m / sqrt(r2)`` the JVP divides by the root in the tangent of ``sqrt``
(``dot_r2 * 0.5 / s``) and again in that of ``/`` (``(dot_m - dot_s * q) / s``),
besides the primal's own ``m / s``: three divisions and a root, where the forward
has one of each. With the inverse it has two.

Why only such divisors: ``X * (1 / d)`` rounds twice where ``X / d`` rounds once (a
difference of an ulp or so), and is otherwise the same where ``1 / d`` is a normal
number, and where ``d`` is 0, an infinity or nan (``X / 0`` and ``X * inf`` are both
an infinity or nan). For a subnormal ``d``, ``1 / d`` overflows to inf where ``X / d``
is finite: a divisor that may be subnormal keeps its divisions. A root never is
(``Rule.safe_reciprocal``).
"""
import copy

import gast

from .ir import assign, const, name, names_in_target, operation
from ..rules import lookup
from ..rules.types import FLOAT

SUFFIX = "_inv"


def sharing(body, derived, kinds):
    """``(body, new kinds)``: ``body`` with the shared inverses (module docstring);
    ``derived`` names the derivative values and arrays, ``kinds`` the values' kinds."""
    taken = {n.id for s in body for n in gast.walk(s) if isinstance(n, gast.Name)}
    r = _Reciprocal(set(derived), kinds, taken)
    return r.block(body), r.new_kinds


class _Reciprocal:
    def __init__(self, derived, kinds, taken):
        self.derived = derived
        self.kinds = kinds
        self.taken = taken
        self.new_kinds = {}

    def block(self, stmts):
        out = [self.nested(s) for s in stmts]
        for k in range(len(out)):
            d = _safe_divisor(out[k])
            if d is None:
                continue
            users = self.users(out, k + 1, d)
            if len(users) < 2:
                continue
            inv = self.fresh(d)
            for j in users:
                out[j].value = _Multiply(d, inv).visit(out[j].value)
            first = users[0]
            out.insert(first, assign(inv, gast.BinOp(left=const(1.0), op=gast.Div(),
                                                     right=name(d)),
                                     getattr(out[first], "lineno", None)))
        return out

    def nested(self, s):
        """A copy of ``s`` with the blocks inside it (branches, loop bodies) done."""
        s = copy.deepcopy(s)
        for field in ("body", "orelse"):
            if isinstance(getattr(s, field, None), list) and not isinstance(s, gast.Lambda):
                setattr(s, field, self.block(getattr(s, field)))
        return s

    def users(self, stmts, start, d):
        """Indices of the derivative statements after ``start`` dividing by ``d``, up to
        the first statement that assigns ``d`` again (a loop's phi copy)."""
        found = []
        for j in range(start, len(stmts)):
            s = stmts[j]
            if d in _assigned(s):
                break
            if self.is_derivative(s) and _divides_by(s, d):
                found.append(j)
        return found

    def is_derivative(self, s):
        if isinstance(s, gast.Assign) and len(s.targets) == 1:
            t = s.targets[0]
        elif isinstance(s, gast.AugAssign):
            t = s.target
        else:
            return False
        if isinstance(t, gast.Subscript):
            t = t.value
        return isinstance(t, gast.Name) and t.id in self.derived

    def fresh(self, d):
        v = d + SUFFIX
        while v in self.taken:
            v += SUFFIX
        self.taken.add(v)
        self.new_kinds[v] = self.kinds.get(d, FLOAT)
        return v


def _safe_divisor(s):
    """The name ``d`` of ``d = op(...)`` when op's rule has ``safe_reciprocal``, else None."""
    if not (isinstance(s, gast.Assign) and len(s.targets) == 1 and
            isinstance(s.targets[0], gast.Name)):
        return None
    v = s.value
    if isinstance(v, gast.Call) and getattr(v, "callee", None) is not None and \
            v.callee.kind == "op":
        rule = lookup(operation(v)[0])
        if rule is not None and rule.safe_reciprocal:
            return s.targets[0].id
    return None


def _assigned(s):
    """Every name ``s`` (or a statement inside it) assigns."""
    out = set()
    for n in gast.walk(s):
        if isinstance(n, gast.Assign):
            for t in n.targets:
                out |= names_in_target(t)
        elif isinstance(n, (gast.AugAssign, gast.For)):
            out |= names_in_target(n.target)
    return out


def _is_division_by(node, d):
    return isinstance(node, gast.BinOp) and isinstance(node.op, gast.Div) and \
        isinstance(node.right, gast.Name) and node.right.id == d


def _divides_by(s, d):
    return any(_is_division_by(n, d) for n in gast.walk(s.value))


class _Multiply(gast.NodeTransformer):
    """``X / d`` -> ``X * inv`` in an expression."""

    def __init__(self, d, inv):
        self.d, self.inv = d, inv

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if _is_division_by(node, self.d):
            return gast.BinOp(left=node.left, op=gast.Mult(), right=name(self.inv))
        return node
