"""Pass types: the kind (bool, int or float) of every variable.

Expects: a ``Normalized`` function (pass normalize).
Guarantees: ``infer`` returns ``{name: type}`` for every assigned name, the
join over all its assignments (bool < int < float), and the types of the
returned values: ``ValueType`` objects (rules/types.py), each its kind's name (a
loop stack's is ``stack_of`` its entries' type). Integers and booleans never get
adjoints; precise dtypes (float32 vs float64) are left to numba's specialisation
at launch.
"""
import gast

from ..rules import lookup
from ..rules.types import BOOL, FLOAT, INT, join, of, stack_of
from .ir import AtomicFetch, AtomicResult, StackNew, StackPush, StackRead, walk_stmts


def infer(norm):
    pf = norm.pf
    kinds = {p.name: of(p.kind) for p in pf.params if not p.is_array}
    arrays = {p.name: p.type for p in pf.params if p.is_array}
    changed = True
    while changed:
        changed = False
        for s in walk_stmts(norm.body):
            for tgt, kind in _assigned_kinds(s, kinds, arrays, pf):
                new = join(kinds.get(tgt), kind)
                if new != kinds.get(tgt):
                    kinds[tgt] = new
                    changed = True
    for s in walk_stmts(norm.body):
        for tgt, _ in _assigned_kinds(s, kinds, arrays, pf):
            if kinds.get(tgt) is None:
                raise pf.error(f"cannot tell the type of '{tgt}'", s, stage="types")
        _integer_operands(s, kinds, pf)
    returns = []
    for s in walk_stmts(norm.body):
        if isinstance(s, gast.Return):
            vals = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
            returns = [atom_kind(v, kinds) for v in vals]
    return kinds, returns


def _integer_operands(s, kinds, pf):
    """A ``TransformError`` at ``s`` where an operation whose rule takes ints (``& | ^ << >>
    ~``: ``Rule.integer``) is given a float."""
    v = s.value if isinstance(s, gast.Assign) else None
    if isinstance(v, gast.BinOp):
        key, operands = type(v.op).__name__, [v.left, v.right]
    elif isinstance(v, gast.UnaryOp):
        key, operands = type(v.op).__name__, [v.operand]
    elif isinstance(v, gast.Call) and v.callee.kind == "op":
        key, operands = v.callee.name, v.args
    else:
        return
    rule = lookup(key)
    if rule is not None and rule.integer and any(atom_kind(a, kinds) == FLOAT for a in operands):
        raise pf.error(f"'{rule.symbol}' takes ints (or bools), not a float: convert with "
                       "int(x) first (a bit operation has no meaning on a float)", s,
                       stage="types")


def atom_kind(a, kinds):
    if isinstance(a, gast.Constant):
        v = a.value
        return BOOL if isinstance(v, bool) else INT if isinstance(v, int) else FLOAT
    return kinds.get(a.id)


def _assigned_kinds(s, kinds, arrays, pf):
    if isinstance(s, gast.For):
        return [(s.target.id, INT)]
    if not isinstance(s, gast.Assign):
        return []
    t = s.targets[0]
    v = s.value
    if isinstance(t, gast.Subscript):
        return []
    if isinstance(t, gast.Tuple):
        callee = v.callee
        if callee.kind == "tid":
            return [(e.id, INT) for e in t.elts]
        return list(zip([e.id for e in t.elts], callee.target.return_kinds))
    return [(t.id, expr_kind(v, kinds, arrays, pf))]


def expr_kind(v, kinds, arrays, pf):
    if isinstance(v, (gast.Name, gast.Constant)):
        return atom_kind(v, kinds)
    if isinstance(v, gast.BinOp):
        return lookup(type(v.op).__name__).result_kind(atom_kind(v.left, kinds),
                                                      atom_kind(v.right, kinds))
    if isinstance(v, gast.UnaryOp):
        return lookup(type(v.op).__name__).result_kind(atom_kind(v.operand, kinds))
    if isinstance(v, gast.Compare):
        return BOOL
    if isinstance(v, StackNew):
        return stack_of(v.kind)
    if isinstance(v, AtomicFetch):       # old = ad.atomic_add(a, i, v): the element's kind
        return of(arrays[v.target.value.id].kind)
    if isinstance(v, AtomicResult):
        return FLOAT if v.is_float else INT
    if isinstance(v, StackPush):
        return atom_kind(v.stack, kinds)
    if isinstance(v, StackRead):
        stack = atom_kind(v.stack, kinds)
        return None if stack is None else stack.element
    if isinstance(v, gast.Subscript):
        if isinstance(v.value, gast.Attribute):
            return INT
        return of(arrays[v.value.id].kind)
    if isinstance(v, gast.Call):
        callee = v.callee
        if callee.kind == "tid":
            return INT
        if callee.kind == "func":
            return callee.target.return_kinds[0]
        return lookup(callee.name).result_kind(*[atom_kind(a, kinds) for a in v.args])
    raise pf.error(f"cannot tell the type of a {type(v).__name__} expression", v, stage="types")
