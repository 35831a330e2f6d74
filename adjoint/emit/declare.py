"""Declare the locals of a generated function that are not definitely assigned.

Generated code often assigns a value in one branch and reads it in a mirrored
branch later (the replay's ``if c:`` and the reverse pass's ``if c:``). numba
cannot always see that: when it prunes a branch whose test it can fold
(``if 1 > 0:``), a variable assigned only there has no type at the later read;
and in a thread function inlined into a ``prange`` loop, a variable that is,
as far as numba can tell, possibly read before assignment is shared between
workers. This pass finds such names (a definite-assignment analysis over the
structured code) and assigns each a typed zero at the top of the body, so every
local has a value on every path. When a name's kind is unknown the caller
leaves the body as it is (and does not inline it).
"""
import gast

from ..rules.types import INT
from ..derive.ir import Comment, StackNew, assign, comment, const, names_in_target, names_read

def maybe_unassigned(stmts, defined):
    """Names some statement reads while they may still be unassigned."""
    bad = set()

    def block(body, d):
        for s in body:
            if isinstance(s, Comment):
                continue
            if isinstance(s, gast.Assign):
                bad.update(names_read(s.value) - d)
                t = s.targets[0]
                if isinstance(t, gast.Subscript):
                    bad.update(names_read(t) - d)
                d |= names_in_target(t)
            elif isinstance(s, gast.AugAssign):
                bad.update((names_read(s.target) | names_read(s.value)) - d)
            elif isinstance(s, gast.If):
                bad.update(names_read(s.test) - d)
                d1, d2 = set(d), set(d)
                block(s.body, d1)
                block(s.orelse, d2)
                d |= d1 & d2
            elif isinstance(s, gast.For):
                bad.update(names_read(s.iter) - d)
                block(s.body, set(d) | names_in_target(s.target))
            elif isinstance(s, gast.While):
                bad.update(names_read(s.test) - d)
                block(s.body, set(d))
            elif isinstance(s, gast.Return) and s.value is not None:
                bad.update(names_read(s.value) - d)
            elif isinstance(s, gast.Expr):
                bad.update(names_read(s.value) - d)
        return d

    block(stmts, set(defined))
    return bad


def declare(body, params, tr, with_stacks=True):
    """``(declarations, ok)``: typed zero assignments for every maybe-unassigned local,
    and whether all their kinds are known. With ``with_stacks=False`` loop stacks are left
    out (CUDA spells each stack as one fixed local array of its own type)."""
    names = sorted(maybe_unassigned(body, set(params)))
    stacks = tr.rev.stacks
    decls = []
    for n in names:
        if n in stacks:
            if not with_stacks:
                continue
            kind = stacks[n]
            decls.append(assign(n, StackNew(kind, const(1), const(kind.zero)), None))
            continue
        kind = INT if n in tr.rev.counters else \
            tr.ssa.kinds.get(n) or tr.rev.kinds.get(n) or tr.tangent.kinds.get(n)
        if kind is None:
            return [], False
        if kind.element is not None:        # a loop stack held in a local (a printed backward)
            if with_stacks:
                decls.append(assign(n, StackNew(kind.element, const(1),
                                                const(kind.element.zero)), None))
            continue
        decls.append(assign(n, const(kind.zero), None))
    if decls:
        decls.insert(0, comment("locals assigned on only some paths start at zero (numba then "
                                "types them, and each parallel worker keeps its own copy)"))
    return decls, True
