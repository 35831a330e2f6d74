"""Pass prune: remove replay code whose values the backward never reads.

Expects: a backward body from pass reverse (replay, then adjoints).
Guarantees: the same array writes and return value, with every assignment
whose target is not needed by a kept statement removed -- including the
per-iteration recording of a carried value that no adjoint reads (an
accumulator such as ``e = e + f(j)`` needs no stack: its adjoint does not
depend on its value). Liveness is computed as a least fixpoint over loops, so a
variable used only to compute itself (a stack pushed but never read) is dead.
"""
import copy

import gast

from .ir import Comment, names_in_target, names_read


def prune(stmts, live_out=frozenset()):
    body, _ = _block(stmts, set(live_out), [])
    return body


def _block(stmts, live, loops):
    out = []
    live = set(live)
    for s in reversed(stmts):
        kept, live = _stmt(s, live, loops)
        if kept is not None:
            out.append(kept)
    out.reverse()
    return out, live


def _only_comments(stmts):
    return all(isinstance(s, (Comment, gast.Pass)) for s in stmts)


def _stmt(s, live, loops):
    if isinstance(s, (Comment, gast.Pass)):
        return s, live
    if isinstance(s, gast.Assign):
        t = s.targets[0]
        if isinstance(t, gast.Subscript):
            return s, live | names_read(t) | names_read(s.value)
        names = names_in_target(t)
        if not names & live:
            return None, live
        return s, (live - names) | names_read(s.value)
    if isinstance(s, gast.AugAssign):
        if isinstance(s.target, gast.Subscript):
            return s, live | names_read(s.target) | names_read(s.value)
        if s.target.id not in live:
            return None, live
        return s, live | names_read(s.value)
    if isinstance(s, gast.If):
        body, lb = _block(s.body, live, loops)
        orelse, le = _block(s.orelse, live, loops)
        if _only_comments(body) and _only_comments(orelse):
            return None, live
        new = copy.copy(s)     # never mutate: loops re-run this walk until a fixpoint
        new.body = body or [gast.Pass()]
        new.orelse = [] if _only_comments(orelse) else orelse
        return new, lb | le | names_read(s.test)
    if isinstance(s, (gast.For, gast.While)):
        return _loop(s, live, loops)
    if isinstance(s, gast.Break):
        return s, set(loops[-1]) if loops else set(live)
    if isinstance(s, gast.Return):
        return s, names_read(s.value) if s.value is not None else set()
    if isinstance(s, gast.Expr):
        return s, live | names_read(s.value)
    return s, live | names_read(s)


def _loop(s, live_out, loops):
    target = names_in_target(s.target) if isinstance(s, gast.For) else set()
    head = names_read(s.iter) if isinstance(s, gast.For) else names_read(s.test)
    original = list(s.body)
    carried = set()
    while True:
        body, live_in = _block(original, set(live_out) | carried, loops + [set(live_out)])
        live_in = (live_in - target) | (head if isinstance(s, gast.While) else set())
        if live_in <= carried:
            break
        carried |= live_in
    if _only_comments(body):
        return None, live_out
    new = copy.copy(s)
    new.body = body
    return new, set(live_out) | carried | head
