"""Pass reciprocal: divisions by one root multiply by its inverse.

Expects: a body (the JVP of pass jvp, or a backward of pass reverse or store) and the
names its derivative statements assign (tangents or adjoints, and their arrays); the
kinds of the body's values; ``primal``: whether primal quotients may share the inverse
too (the backwards only, see below).
Guarantees: a new body (the input is not changed) in which, within one block, when two
or more divisions ``X / d`` by a name ``d`` assigned earlier in that block by an
operation whose rule has ``safe_reciprocal`` (``d = rt.sqrt(x)``) can become
``X * inv_d``, one statement ``inv_d = 1.0 / d`` computes its inverse and they do. The
divisions counted are those in derivative statements (anywhere in their expressions)
and, with ``primal``, the *primal quotients* ``q = X / d`` (``X`` an atom) whose ``q``
only derivative values depend on (below). ``inv_d`` stands before the first of them
(up to the first statement that assigns ``d`` again); a primal quotient after it moves
up to stand right after it. Without ``primal``, primal statements are never changed:
the values a JVP computes stay bitwise those of the forward.

Why: a division costs several multiplications, and rules chain them (``m / sqrt(r2)``
divides by the root in the tangents of both ``sqrt`` and ``/``).
Why only such divisors: ``X * (1 / d)`` rounds twice where ``X / d`` rounds once (an
ulp or so) and is otherwise the same, also where ``d`` is 0, inf or nan; for a
subnormal ``d``, ``1 / d`` overflows where ``X / d`` is finite, and a root never is
subnormal (``Rule.safe_reciprocal``).
Why a primal quotient only where nothing but derivatives read it: its ulp moves every
value computed from it. It changes only when every later read in time is a derivative
statement after it in its block using ``q`` in ``+ - * /`` or unary ``-``/``+`` only,
so its rounding never reaches control flow, indices or primal values. In a JVP the
primal quotient feeds the primal values: only the backwards pass ``primal``
(pipeline's ``_backward_inverses``). In full: docs/semantics.md.
"""
from collections import defaultdict

import gast

from ..derive.ir import assign, const, copy_tree, is_atom, name, names_in_target, operation, walk_stmts
from ..rules import lookup
from ..rules.types import FLOAT

SUFFIX = "_inv"
_ARITHMETIC = (gast.Add, gast.Sub, gast.Mult, gast.Div)
_SIGNS = (gast.USub, gast.UAdd)


def sharing(body, derived, kinds, primal=False):
    """``(body, new kinds)``: a copy of ``body`` with the shared inverses (module
    docstring); ``derived`` names the derivative values and arrays, ``kinds`` the
    values' kinds; ``primal``: primal quotients may share them too."""
    body = copy_tree(body)
    taken = {n.id for s in body for n in gast.walk(s) if isinstance(n, gast.Name)}
    r = _Reciprocal(set(derived), kinds, taken, _Uses(body) if primal else None)
    r.block(body)
    return body, r.new_kinds


class _Uses:
    """Every statement of a whole body (nested blocks, loops' conditions and latches)
    that reads each name, and each statement's place: its number in textual order and
    the loops around it (a ``while``'s own test is inside it: it runs each iteration)."""

    def __init__(self, body):
        self.readers = defaultdict(list)
        self.place = {}
        self.walk(body, ())

    def walk(self, stmts, loops):
        for s in stmts:
            inner = loops + (id(s),) if isinstance(s, (gast.For, gast.While)) else loops
            self.place[id(s)] = (len(self.place),
                                 inner if isinstance(s, gast.While) else loops)
            for n in _own_reads(s):
                self.readers[n].append(s)
            if isinstance(s, gast.If):
                self.walk(s.body, loops)
                self.walk(s.orelse, loops)
            elif isinstance(s, (gast.For, gast.While)):
                info = getattr(s, "loop", None)
                for part in [s.body] + ([info.cond, info.latch] if info is not None else []):
                    self.walk(part, inner)

    def reached(self, r, s):
        """Whether statement ``r`` may run after ``s``: it stands after it, or both are
        in one loop (a later iteration)."""
        (at_r, loops_r), (at_s, loops_s) = self.place[id(r)], self.place[id(s)]
        return at_r >= at_s or bool(set(loops_r) & set(loops_s))


class _Reciprocal:
    def __init__(self, derived, kinds, taken, uses):
        self.derived = derived
        self.kinds = kinds
        self.taken = taken
        self.uses = uses            # a _Uses where primal quotients may change, else None
        self.new_kinds = {}

    def block(self, stmts):
        """Share the inverses in ``stmts`` (a list of the body's copy, edited in place)
        and in the blocks inside its statements."""
        for s in stmts:
            for field in ("body", "orelse"):
                if isinstance(getattr(s, field, None), list):
                    self.block(getattr(s, field))
        k = 0
        while k < len(stmts):
            d = _safe_divisor(stmts[k])
            if d is not None:
                self.share(stmts, k, d)
            k += 1

    def share(self, stmts, k, d):
        """Divisions by ``d`` (assigned by ``stmts[k]``) after ``k`` through its inverse,
        where there are two or more."""
        stop = next((j for j in range(k + 1, len(stmts)) if d in _assigned(stmts[j])),
                    len(stmts))
        divisions = [j for j in range(k + 1, stop)
                     if self.is_derivative(stmts[j]) and _divides_by(stmts[j], d)]
        first = divisions[0] if divisions else stop
        quotients = []
        for j in range(k + 1, stop) if self.uses is not None else ():
            at = min(first, quotients[0] if quotients else j)
            if self.is_sharing_quotient(stmts, j, d, at):
                quotients.append(j)
        if len(divisions) + len(quotients) < 2:
            return
        at = min(first, quotients[0] if quotients else first)
        inv, line = self.fresh(d), getattr(stmts[at], "lineno", None)
        for j in divisions:
            stmts[j].value = _Multiply(d, inv).visit(stmts[j].value)
        moved = [stmts[j] for j in quotients]
        for q in moved:
            q.value = gast.BinOp(left=q.value.left, op=gast.Mult(), right=name(inv))
        for j in reversed(quotients):       # (all at or after ``at``)
            del stmts[j]
        stmts[at:at] = [assign(inv, gast.BinOp(left=const(1.0), op=gast.Div(),
                                               right=name(d)), line)] + moved

    def is_sharing_quotient(self, stmts, j, d, at):
        """Whether ``stmts[j]`` is a primal quotient ``q = X / d`` that may become
        ``q = X * inv_d`` moved up to ``at`` (module docstring)."""
        s = stmts[j]
        if not (isinstance(s, gast.Assign) and len(s.targets) == 1 and
                isinstance(s.targets[0], gast.Name) and _is_division_by(s.value, d) and
                is_atom(s.value.left)) or self.is_derivative(s):
            return False
        q = s.targets[0].id
        later = {id(r) for r in stmts[j + 1:]}
        for r in self.uses.readers[q]:
            if id(r) in later:
                if not (self.is_derivative(r) and _reads_as_operand(r, q)):
                    return False
            elif self.uses.reached(r, s):
                return False
        read = {d} | {n.id for n in gast.walk(s.value) if isinstance(n, gast.Name)}
        return not any(read & _assigned(stmts[p]) or q in _assigned(stmts[p]) | _read(stmts[p])
                       for p in range(at, j))

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


def _read(s):
    """Every name ``s`` (or a statement inside it) reads."""
    return {n for x in walk_stmts([s]) for n in _own_reads(x)}


def _own_reads(s):
    """The names ``s`` itself reads: an ``if``'s or a loop's header; any other statement
    whole (one with blocks ``walk_stmts`` does not enter reads all of theirs)."""
    if isinstance(s, (gast.If, gast.While)):
        roots = [s.test]
    elif isinstance(s, gast.For):
        roots = [s.iter]
    else:
        roots = [s]
    return {n.id for r in roots for n in gast.walk(r)
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load)}


def _assigned(s):
    """Every name ``s`` (or a statement inside it, loops' conditions and latches too)
    assigns."""
    out = set()
    for x in walk_stmts([s]):
        for n in gast.walk(x):
            if isinstance(n, gast.Assign):
                for t in n.targets:
                    out |= names_in_target(t)
            elif isinstance(n, (gast.AugAssign, gast.For)):
                out |= names_in_target(n.target)
    return out


def _reads_as_operand(s, q):
    """Whether the derivative statement ``s`` reads ``q`` only as an operand of
    arithmetic (``+ - * /``, a sign): never in its target, a call, a comparison..."""
    targets = s.targets if isinstance(s, gast.Assign) else [s.target]
    if isinstance(s, gast.AugAssign) and not isinstance(s.op, _ARITHMETIC):
        return False                                    # (an atomic min or max)
    if any(isinstance(n, gast.Name) and n.id == q for t in targets for n in gast.walk(t)):
        return False
    return _operand_only(s.value, q)


def _operand_only(e, q):
    if isinstance(e, gast.BinOp) and isinstance(e.op, _ARITHMETIC):
        return _operand_only(e.left, q) and _operand_only(e.right, q)
    if isinstance(e, gast.UnaryOp) and isinstance(e.op, _SIGNS):
        return _operand_only(e.operand, q)
    if isinstance(e, gast.Name):
        return True
    return not any(isinstance(n, gast.Name) and n.id == q for n in gast.walk(e))


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
