"""Pass activity: which values need adjoints.

Expects: an ``SSA`` function.
Guarantees: ``active(ssa)`` returns the set of versions that are floats, depend
on a differentiable input (a float array element in a kernel, or the old value
an atomic on a float array returns; a float parameter in a func) through differentiable operations, and reach an output (a
store, an accumulation, a returned value). Only these get ``adj_`` variables;
everything else (indices, counters, flags, comparisons) is replayed only.
A loop stack of floats (a generated backward printed as user code) is active
when an entry read from it is, and then all its versions are.

``active(ssa, zero)``: the same with the float arrays named in ``zero`` held
constant, for the JVP of a launch given no tangent for them (their tangents are
symbolic zeros: ``runtime/launch.py``). Only arrays the kernel never writes may be
named; the tangent of each value then has every term but theirs, which are zero.
"""
import gast

from ..rules import lookup
from .inline import custom_call_arrays
from .ir import AtomicFetch, StackNew, StackPush, StackRead, walk_stmts


def _edges(s, ssa):
    """(target, operands, differentiable) for each value-producing statement."""
    if isinstance(s, gast.Assign) and not isinstance(s.targets[0], gast.Subscript):
        t, v = s.targets[0], s.value
        targets = [e.id for e in t.elts] if isinstance(t, gast.Tuple) else [t.id]
        if isinstance(v, gast.Name):
            return [(targets[0], [v.id], True)]
        if isinstance(v, gast.Constant):
            return [(targets[0], [], True)]
        if isinstance(v, gast.Subscript):
            return [(targets[0], [], True)]
        if isinstance(v, StackNew):         # (its entries are read only once pushed)
            return [(targets[0], [], True)]
        if isinstance(v, StackPush):
            return [(targets[0], _names([v.stack, v.value]), True)]
        if isinstance(v, StackRead):
            return [(targets[0], _names([v.stack]), True)]
        if isinstance(v, gast.BinOp):
            diff = lookup(type(v.op).__name__).differentiable
            return [(targets[0], _names([v.left, v.right]), diff)]
        if isinstance(v, (gast.UnaryOp, gast.Compare)):
            key = type(v.op).__name__ if isinstance(v, gast.UnaryOp) else "Lt"
            operands = [v.operand] if isinstance(v, gast.UnaryOp) else [v.left] + v.comparators
            return [(targets[0], _names(operands), lookup(key).differentiable)]
        if isinstance(v, gast.Call):
            c = v.callee
            if c.kind == "tid":
                return [(t, [], False) for t in targets]
            diff = c.kind == "func" or lookup(c.name).differentiable
            return [(t, _names(v.args), diff) for t in targets]
    return []


def _names(atoms):
    return [a.id for a in atoms if isinstance(a, gast.Name)]


def active(ssa, zero=frozenset()):
    pf = ssa.norm.pf
    stmts = list(walk_stmts(ssa.body))
    kinds = ssa.kinds
    float_arrays = {p.name for p in pf.differentiable() if p.is_array} - set(zero)
    if pf.role == "func":
        varied = {p.name for p in pf.params if p.kind.differentiable}
    else:
        varied = set()
    for s in stmts:
        if isinstance(s, gast.Assign) and isinstance(s.value, gast.Subscript) and \
                isinstance(s.value.value, gast.Name) and s.value.value.id in float_arrays:
            varied.add(s.targets[0].id)
        if isinstance(s, gast.Assign) and isinstance(s.value, AtomicFetch) and \
                s.value.target.value.id in float_arrays:      # the element's old value
            varied.add(s.targets[0].id)
        if custom_call_arrays(s, float_arrays):      # a func reading float arrays
            t = s.targets[0]
            varied |= {e.id for e in t.elts} if isinstance(t, gast.Tuple) else {t.id}
        elif isinstance(s, gast.Assign) and isinstance(s.value, StackNew):
            # every stack of floats varies: all versions of a stack have a tangent or none
            varied.add(s.targets[0].id)
    edges = [e for s in stmts for e in _edges(s, ssa)]
    changed = True
    while changed:
        changed = False
        for tgt, ops, diff in edges:
            if diff and tgt not in varied and _differentiable(kinds.get(tgt)) and \
                    any(o in varied for o in ops):
                varied.add(tgt)
                changed = True
    useful = set()
    for s in stmts:
        if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Subscript):
            useful |= set(_names([s.value]))
        elif isinstance(s, gast.AugAssign):
            useful |= set(_names([s.value]))
        elif isinstance(s, gast.Assign) and isinstance(s.value, AtomicFetch):
            useful |= set(_names([s.value.value]))      # (its update, as the statement's)
        elif isinstance(s, gast.Return):
            vals = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
            useful |= set(_names(vals))
    changed = True
    while changed:
        changed = False
        for tgt, ops, diff in edges:
            if diff and tgt in useful:
                for o in ops:
                    if o not in useful:
                        useful.add(o)
                        changed = True
    return {v for v in varied & useful if _differentiable(kinds.get(v))}


def _differentiable(kind):
    return kind is not None and kind.differentiable
