"""What a branch guarantees about integer values, for pass bounds.

Expects: an ``SSA`` function.
Guarantees: ``Facts(ssa).implied(test)`` gives the comparisons that hold inside
``if test:``, and ``within(index, lower, upper, facts)`` whether an index is
provably in ``[0, size)`` under them. Values are *linear*: a symbol plus an
integer offset, where a symbol is a name assigned once, ``arr.shape[k]``, or
nothing (a constant); definitions ``b = a + 2``, ``b = a - 1``, ``b = a`` and
``n = arr.shape[0]`` are followed. A test is a comparison assigned once, or
the merge name normalize makes for ``a and b`` (``m = b`` in ``if a:``,
``m = a`` otherwise), which implies the facts of both; the ``else`` branch of a
comparison implies its negation (``a != b`` for ``a == b``). A name merged from the
two branches of an ``if`` (``m = x`` in one, ``m = y`` in the other) is in bounds when
each value is, under its own branch's facts. Nothing else is guessed: an unknown
value proves nothing.

This is what lets a stencil's guarded neighbours go unchecked::

    if i > 0 and i < nx - 1:          # nx = u.shape[0]
        ... u[i - 1, j] ... u[i + 1, j]

and a periodic one's wrapped neighbours (``i`` a thread index below ``u.shape[0]``)::

    ip = i + 1
    if ip == nx:                      # ip: 0 here, i + 1 != nx (so <= nx - 1) else
        ip = 0
    ... u[ip, j]
"""
from collections import Counter
from dataclasses import dataclass

import gast

from .ir import target_names, walk_stmts

_OPS = {gast.Lt: "<", gast.LtE: "<=", gast.Gt: ">", gast.GtE: ">=", gast.Eq: "==",
        gast.NotEq: "!="}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NOT = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


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
        self.phis = _if_merges(ssa.body, counts)

    def linear(self, atom, depth=0):
        """``atom`` as a ``Linear``, or None when it is not one."""
        if isinstance(atom, gast.Constant) and type(atom.value) is int:
            return Linear(None, atom.value)
        if not isinstance(atom, gast.Name) or atom.id not in self.once:
            return None
        v = self.defs.get(atom.id)
        if depth < 32 and v is not None:
            if isinstance(v, (gast.Name, gast.Constant)):
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

    def implied(self, test, depth=0, negated=False):
        """{(Linear, op, Linear)} that hold where the boolean name ``test`` is True
        (``negated``: where it is False)."""
        if not isinstance(test, gast.Name) or depth > 32:
            return set()
        if test.id in self.merges:
            if negated:                 # not (a and b): nothing linear
                return set()
            cond, then = self.merges[test.id]
            return self.implied(cond, depth + 1) | self.implied(then, depth + 1)
        v = self.defs.get(test.id)
        if isinstance(v, gast.Name):
            return self.implied(v, depth + 1, negated)
        if isinstance(v, gast.Compare) and len(v.ops) == 1 and type(v.ops[0]) in _OPS:
            a, b = self.linear(v.left), self.linear(v.comparators[0])
            if a is not None and b is not None:
                op = _OPS[type(v.ops[0])]
                op = _NOT[op] if negated else op
                return {(a, op, b), (b, _FLIP[op], a)}
        return set()

    def within(self, index, array, axis, facts, nonnegative=(), below_shape=(), depth=0):
        """Whether ``index`` (an atom) is provably in ``[0, array.shape[axis])`` under
        ``facts``; symbols in ``nonnegative`` are >= 0, those in ``below_shape`` are
        < this shape (thread indices whose per-launch bound covers it)."""
        if isinstance(index, gast.Name) and index.id in self.phis and depth < 8:
            test, then, other = self.phis[index.id]
            return all(self.within(value, array, axis, facts | self.implied(test, negated=neg),
                                   nonnegative, below_shape, depth + 1)
                       for value, neg in ((then, False), (other, True)))
        v = self.linear(index)
        if v is None:
            return False
        size = ("shape", array, axis)
        # a thread index in [0, size) exists: the size is at least 1
        nonempty = bool(set(nonnegative) & set(below_shape))
        if v.symbol is None:                                    # a constant
            return v.offset == 0 and nonempty
        if v.symbol == size:                                    # size - 1
            return v.offset == -1 and nonempty
        lower = 0 if v.symbol in nonnegative else None
        upper = -1 if v.symbol in below_shape else None       # symbol <= size + upper
        not_lower, not_upper = set(), set()                    # symbol != k, != size + k
        for a, op, b in facts:
            if a.symbol != v.symbol:
                continue
            # a.symbol + a.offset OP b.symbol + b.offset
            k = b.offset - a.offset
            if b.symbol is None and op in (">", ">=", "=="):
                bound = k + (1 if op == ">" else 0)
                lower = bound if lower is None else max(lower, bound)
            elif b.symbol == size and op in ("<", "<=", "=="):
                bound = k - (1 if op == "<" else 0)
                upper = bound if upper is None else min(upper, bound)
            elif op == "!=" and b.symbol is None:
                not_lower.add(k)
            elif op == "!=" and b.symbol == size:
                not_upper.add(k)
        while lower is not None and lower in not_lower:       # symbol >= k and != k
            lower += 1
        while upper is not None and upper in not_upper:
            upper -= 1
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


def _if_merges(body, counts):
    """{m: (test, then value, else value)} for a name assigned exactly twice, by a copy in
    each branch of ``if test:`` (how ssa merges a name an ``if`` assigns)."""
    out = {}
    for s in walk_stmts(body):
        if not (isinstance(s, gast.If) and isinstance(s.test, gast.Name)):
            continue
        then = {x.targets[0].id: x.value for x in s.body if _copy(x)}
        for x in s.orelse:
            m = x.targets[0].id if _copy(x) else None
            if m in then and counts[m] == 2:
                out[m] = (s.test, then[m], x.value)
    return out


def _copy(stmt):
    return isinstance(stmt, gast.Assign) and isinstance(stmt.targets[0], gast.Name) and \
        isinstance(stmt.value, gast.Name)
