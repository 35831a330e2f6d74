"""What a branch guarantees about integer values, for pass bounds.

Expects: an ``SSA`` function.
Guarantees: ``Facts(ssa).implied(test)`` gives the comparisons that hold inside
``if test:``, and ``within(index, lower, upper, facts)`` whether an index is
provably in ``[0, size)`` under them. Values are *linear*: a symbol plus an
integer offset, where a symbol is a name assigned once, ``arr.shape[k]``, or
nothing (a constant); definitions ``b = a + 2``, ``b = a - 1``, ``b = a`` and
``n = arr.shape[0]`` are followed. A test is a comparison assigned once, or
the merge name normalize makes for ``a and b`` (``m = b`` in ``if a:``,
``m = a`` otherwise), which implies the facts of both. Nothing else is
guessed: an unknown value proves nothing.

This is what lets a stencil's guarded neighbours go unchecked::

    if i > 0 and i < nx - 1:          # nx = u.shape[0]
        ... u[i - 1, j] ... u[i + 1, j]
"""
from collections import Counter
from dataclasses import dataclass

import gast

from .ir import target_names, walk_stmts

_OPS = {gast.Lt: "<", gast.LtE: "<=", gast.Gt: ">", gast.GtE: ">="}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class Linear:
    """``symbol + offset``; ``symbol`` is a name, ("shape", array, axis) or None."""
    symbol: object
    offset: int


class Facts:
    def __init__(self, ssa):
        counts = Counter(t for s in walk_stmts(ssa.body) for t in target_names(s))
        self.once = {n for n, c in counts.items() if c == 1}
        self.defs = {}
        for s in walk_stmts(ssa.body):
            if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name) and \
                    s.targets[0].id in self.once:
                self.defs[s.targets[0].id] = s.value
        self.merges = _and_merges(ssa.body, counts)

    def linear(self, atom, depth=0):
        """``atom`` as a ``Linear``, or None when it is not one."""
        if isinstance(atom, gast.Constant) and type(atom.value) is int:
            return Linear(None, atom.value)
        if not isinstance(atom, gast.Name) or atom.id not in self.once:
            return None
        v = self.defs.get(atom.id)
        if depth < 32 and v is not None:
            if isinstance(v, gast.Name):
                return self.linear(v, depth + 1) or Linear(atom.id, 0)
            if isinstance(v, gast.Subscript) and _is_shape(v.value) and \
                    isinstance(v.slice, gast.Constant):
                return Linear(("shape", v.value.value.id, v.slice.value), 0)
            if isinstance(v, gast.BinOp) and isinstance(v.op, (gast.Add, gast.Sub)):
                a, b = self.linear(v.left, depth + 1), self.linear(v.right, depth + 1)
                sign = 1 if isinstance(v.op, gast.Add) else -1
                if a is not None and b is not None and b.symbol is None:
                    return Linear(a.symbol, a.offset + sign * b.offset)
                if a is not None and b is not None and a.symbol is None and sign == 1:
                    return Linear(b.symbol, b.offset + a.offset)
        return Linear(atom.id, 0)

    def implied(self, test, depth=0):
        """{(Linear, op, Linear)} that hold where the boolean name ``test`` is True."""
        if not isinstance(test, gast.Name) or depth > 32:
            return set()
        if test.id in self.merges:
            cond, then = self.merges[test.id]
            return self.implied(cond, depth + 1) | self.implied(then, depth + 1)
        v = self.defs.get(test.id)
        if isinstance(v, gast.Name):
            return self.implied(v, depth + 1)
        if isinstance(v, gast.Compare) and len(v.ops) == 1 and type(v.ops[0]) in _OPS:
            a, b = self.linear(v.left), self.linear(v.comparators[0])
            if a is not None and b is not None:
                op = _OPS[type(v.ops[0])]
                return {(a, op, b), (b, _FLIP[op], a)}
        return set()

    def within(self, index, array, axis, facts, nonnegative=(), below_shape=()):
        """Whether ``index`` (an atom) is provably in ``[0, array.shape[axis])`` under
        ``facts``; symbols in ``nonnegative`` are >= 0, those in ``below_shape`` are
        < this shape (thread indices whose per-launch bound covers it)."""
        v = self.linear(index)
        if v is None or v.symbol is None:
            return False
        size = ("shape", array, axis)
        lower = 0 if v.symbol in nonnegative else None
        upper = -1 if v.symbol in below_shape else None       # symbol <= size + upper
        for a, op, b in facts:
            if a.symbol != v.symbol:
                continue
            # a.symbol + a.offset OP b.symbol + b.offset
            if b.symbol is None and op in (">", ">="):
                bound = b.offset - a.offset + (1 if op == ">" else 0)
                lower = bound if lower is None else max(lower, bound)
            elif b.symbol == size and op in ("<", "<="):
                bound = b.offset - a.offset - (1 if op == "<" else 0)
                upper = bound if upper is None else min(upper, bound)
        return lower is not None and upper is not None and \
            lower + v.offset >= 0 and upper + v.offset <= -1


def _is_shape(node):
    return isinstance(node, gast.Attribute) and node.attr == "shape" and \
        isinstance(node.value, gast.Name)


def _and_merges(body, counts):
    """{merge name: (test, value in the branch)} for ``if test: ... m = v else: m = test``
    (how normalize spells ``test and v``), names assigned exactly twice."""
    out = {}
    for s in walk_stmts(body):
        if not (isinstance(s, gast.If) and isinstance(s.test, gast.Name)):
            continue
        then = {x.targets[0].id: x.value for x in s.body if _copy(x)}
        for x in s.orelse:
            if _copy(x) and isinstance(x.value, gast.Name) and x.value.id == s.test.id:
                m = x.targets[0].id
                if m in then and counts[m] == 2:
                    out[m] = (s.test, then[m])
    return out


def _copy(stmt):
    return isinstance(stmt, gast.Assign) and isinstance(stmt.targets[0], gast.Name) and \
        isinstance(stmt.value, gast.Name)
