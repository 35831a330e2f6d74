"""Definite assignment: every read of a local must follow an assignment on every path.

Part of pass fence. Expects: a resolved function body (user syntax, before
normalize). Guarantees: no statement reads a local variable that some path
reaches unassigned; such a read raises ``TransformError`` at the read, naming
the variable (Python would raise ``UnboundLocalError`` there at run time, and
later passes would otherwise have to invent a value for it).

Paths are those of the user's code: ``return``, ``break`` and ``continue`` end
a path; an ``if`` assigns what both branches assign; a loop's body may run zero
times (after it, only what was assigned before it counts), except ``for`` over
a ``range`` of constants with a positive trip count, after which what every way
out of it assigned counts (the end of the body, ``continue``, ``break``), and
``while True``, which is left only by ``break``.
"""
from dataclasses import dataclass, field

import gast

from ..derive.ir import names_in_target, value_names

ALL = None      # the state of an unreachable point: every name counts as assigned


def _meet(a, b):
    if a is ALL:
        return b
    if b is ALL:
        return a
    return a & b


@dataclass
class _Loop:
    exits: list = field(default_factory=list)    # states at break
    ends: list = field(default_factory=list)     # states at continue


class _Check:
    def __init__(self, pf, local):
        self.pf, self.local, self.loops = pf, local, []

    def reads(self, node, defined):
        if defined is ALL:
            return
        for n in value_names(node):
            if n.id in self.local and n.id not in defined:
                raise self.pf.error(
                    f"'{n.id}' may be used before it is assigned: some path reaches this line "
                    f"without assigning it (Python would raise UnboundLocalError here); assign "
                    f"'{n.id}' before the branch or loop that sets it", n, stage="fence")

    def block(self, stmts, defined):
        for s in stmts:
            defined = self.stmt(s, defined)
        return defined

    def stmt(self, s, d):
        if isinstance(s, gast.Assign):
            self.reads(s.value, d)
            t = s.targets[0]
            if isinstance(t, gast.Subscript):
                self.reads(t, d)
                return d
            return d if d is ALL else d | names_in_target(t)
        if isinstance(s, gast.AugAssign):
            self.reads(s.target, d)
            self.reads(s.value, d)
            return d if d is ALL or not isinstance(s.target, gast.Name) else d | {s.target.id}
        if isinstance(s, gast.Expr):
            self.reads(s.value, d)
            return d
        if isinstance(s, gast.If):
            self.reads(s.test, d)
            return _meet(self.block(s.body, None if d is ALL else set(d)),
                         self.block(s.orelse, None if d is ALL else set(d)))
        if isinstance(s, gast.For):
            self.reads(s.iter, d)
            runs = "once" if _positive_constant_range(s.iter) else "maybe"
            return self.loop(s.body, d if d is ALL else d | {s.target.id}, d, runs)
        if isinstance(s, gast.While):
            self.reads(s.test, d)
            return self.loop(s.body, d, d, "forever" if _always_true(s.test) else "maybe")
        if isinstance(s, gast.Return):
            if s.value is not None:
                self.reads(s.value, d)
            return ALL
        if isinstance(s, gast.Break):
            self.loops[-1].exits.append(d)
            return ALL
        if isinstance(s, gast.Continue):
            self.loops[-1].ends.append(d)
            return ALL
        return d

    def loop(self, body, entry, before, runs):
        """State after a loop whose body ``runs`` "maybe" (zero or more times), "once"
        (at least once) or "forever" (left only by break)."""
        self.loops.append(_Loop())
        end = self.block(body, entry if entry is ALL else set(entry))
        info = self.loops.pop()
        after = {"maybe": before, "once": end, "forever": ALL}[runs]
        for state in (info.ends if runs == "once" else []) + info.exits:
            after = _meet(after, state)
        return after


def _constant_int(e):
    if isinstance(e, gast.Constant) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, gast.UnaryOp) and isinstance(e.op, gast.USub):
        v = _constant_int(e.operand)
        return None if v is None else -v
    return None


def _positive_constant_range(it):
    args = [_constant_int(a) for a in it.args]
    return bool(args) and None not in args and args[-1] != 0 and len(range(*args)) > 0


def _always_true(test):
    return isinstance(test, gast.Constant) and bool(test.value) is True


def check(pf):
    """Raise at the first read of a local that may be unassigned (see module docstring)."""
    local = set()
    for node in gast.walk(pf.node):
        if isinstance(node, (gast.Assign, gast.AugAssign)):
            targets = node.targets if isinstance(node, gast.Assign) else [node.target]
            for t in targets:
                local |= names_in_target(t)
        elif isinstance(node, gast.For):
            local |= names_in_target(node.target)
    params = {p.name for p in pf.params}
    _Check(pf, local - params).block(pf.node.body, set(params))
