"""Float32 kernels in float32: how emitted code spells a float32 kernel's numbers.

A kernel whose float parameters (arrays and scalars) are all float32 is a
*float32 kernel*. numba types a bare ``0.5`` as float64 and an int as int64,
and either widens a float32 it meets, so the emitted functions of such a
kernel are rewritten here (``_Float32``): float32 literals, ints converted where
they meet a float (as C does), float32 loop stacks. A conversion is the IR's
``Float32`` node, printed ``rt.float32(c)`` by emit/ieee.py; what a call returns is
read from its ``Callee`` (the op's rule), never from the name printed for it. Funcs are
shared by kernels of both precisions, so each func a float32 kernel calls,
directly or through other funcs, gets a ``<name>_forward_f32``/``_adjoint_f32``
variant, and the float32 kernel calls those. See docs/semantics.md.
"""
import copy

import gast

from ..rules import RULES
from ..rules.types import FLOAT, INT, of
from ..runtime.dialect import DIALECTS
from ..derive.ir import Float32, name


def names_kinds(tr):
    """The kind of every name the emitted functions of ``tr`` use: values (pass ssa),
    adjoints (pass reverse) and tangents (pass jvp)."""
    return {**tr.ssa.kinds, **tr.rev.kinds, **tr.tangent.kinds}


def _users_kinds(tr, params):
    """A hand-written adjoint or JVP's parameters: the func's own, then its seeds or
    tangents (floats). Of its other names the transformer knows nothing."""
    own = [p.kind for p in tr.pf.params]
    return {n: own[k] if k < len(own) else FLOAT for k, n in enumerate(params)}


def float32_kernel(tr):
    """A kernel whose float parameters (arrays and scalars) are all float32: its float
    literals, adjoint variables and loop stacks are float32 too (see _Float32)."""
    dtypes = [str(p.type.dtype if p.is_array else p.type.name) for p in tr.pf.params
              if p.kind == "float"]
    return bool(dtypes) and all(d == "float32" for d in dtypes)


# rt.<f> spelling a call (rt.sin, rt.floor): the kind of its result (rt.floor is an int64),
# where that does not depend on the operands' (rt.clamp's does)
def _fixed_kind(r):
    n = len(r.params)
    kind = r.result_kind(*[FLOAT] * n)
    return kind if kind == r.result_kind(*[INT] * n) else None


# calls an operator is written as in a dialect (Warp's / // %: runtime/dialect.py): an int
# operand meeting a float one is converted, as in the operator
_OPERATOR_CALLS = {key for d in DIALECTS.values() for _, key in d.operators}

_KINDS = {key: _fixed_kind(r) for key, r in RULES.items()
          if r.runtime and r.is_call and _fixed_kind(r)}


def _call_kind(node):
    """The fixed result kind of the op a call node calls (its ``Callee``, from parse), or
    None: a call of a rule template (the operands' kind) or of a func."""
    callee = getattr(node, "callee", None)
    if callee is None or callee.kind != "op":
        return None
    return _KINDS.get(callee.name)


class _Float32(gast.NodeTransformer):
    """Spell a float32 kernel's numbers so that numba keeps its arithmetic in float32.

    To numba a bare ``0.5`` is a float64, an int an int64, and either widens a
    float32 it meets to float64. So: float literals become ``rt.float32(c)``
    (numpy's float32); an int (literal, variable, ``rt.floor``/``ceil`` result)
    meeting a float in ``+ - * / **``, or given to a float variable, is converted the
    same way, as C converts an int meeting a float;
    ``float(n)`` becomes ``rt.float32(n)``; float loop stacks hold float32. ``kinds`` are the SSA kinds (bool/int/float)."""

    def __init__(self, kinds):
        self.kinds = kinds

    def is_float(self, node):
        if isinstance(node, gast.Constant):
            return isinstance(node.value, float)
        if isinstance(node, gast.Name):
            return self.kinds.get(node.id) == "float"
        if isinstance(node, gast.Subscript):
            return self.is_float(node.value)
        if isinstance(node, gast.BinOp):
            return isinstance(node.op, gast.Div) or self.is_float(node.left) or \
                self.is_float(node.right)
        if isinstance(node, gast.UnaryOp):
            return self.is_float(node.operand)
        if isinstance(node, gast.IfExp):
            return self.is_float(node.body) or self.is_float(node.orelse)
        if isinstance(node, Float32):
            return True
        if isinstance(node, gast.Call):
            kind = _call_kind(node)
            if kind is not None:
                return kind == "float"
            return any(self.is_float(a) for a in node.args)
        return False

    def is_int(self, node):
        if isinstance(node, gast.Constant):
            return type(node.value) is int
        if isinstance(node, gast.Name):
            return self.kinds.get(node.id) == "int"
        if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
            return self.is_int(node.operand)
        if isinstance(node, gast.BinOp) and not isinstance(node.op, gast.Div):
            return self.is_int(node.left) and self.is_int(node.right)    # y - 1 in a rule
        if isinstance(node, gast.Call):
            return _call_kind(node) == "int"
        return False

    def visit_Float32(self, node):
        return node              # spelled already (a pair function: emit/jam.py)

    def visit_Constant(self, node):
        if isinstance(node.value, float):
            return Float32(node)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, (gast.Add, gast.Sub, gast.Mult, gast.Div, gast.Pow)):
            if self.is_float(node.left) and self.is_int(node.right):
                node.right = Float32(node.right)
            elif self.is_float(node.right) and self.is_int(node.left):
                node.left = Float32(node.left)
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        t = node.targets[0]
        if isinstance(t, gast.Name) and self.kinds.get(t.id) == "float" and \
                (self.is_int(node.value) or (isinstance(node.value, gast.Name) and
                                             self.kinds.get(node.value.id) == "int")):
            node.value = Float32(node.value)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        callee = getattr(node, "callee", None)
        if callee is not None and callee.kind == "op" and callee.name == "float":
            return Float32(node.args[0])                 # float(n) in a float32 kernel
        if callee is not None and callee.kind == "op" and callee.name in _OPERATOR_CALLS:
            a, b = node.args                             # Warp's x / y, as an operator's
            if self.is_float(a) and self.is_int(b):
                node.args[1] = Float32(b)
            elif self.is_float(b) and self.is_int(a):
                node.args[0] = Float32(a)
        return node

    def visit_StackNew(self, node):
        self.generic_visit(node)
        node.kind = of(node.kind).float32()                # printed by emit/stacks.py
        return node


class _Calls(gast.NodeTransformer):
    """Collect (or, with ``suffix``, rename) the calls of funcs in ``funcs`` (any part:
    forward, adjoint or JVP)."""

    def __init__(self, funcs, suffix=None):
        self.funcs, self.suffix, self.found = funcs, suffix, set()

    def visit_Call(self, node):
        self.generic_visit(node)
        callee = getattr(node, "callee", None)
        if callee is not None and callee.kind == "func" and callee.name in self.funcs:
            self.found.add(callee.name)
            if self.suffix:
                node.func = name(node.func.id + self.suffix)
        return node


def _called(fns, funcs):
    c = _Calls(funcs)
    for _fname, _params, body, *_ in fns:
        for st in body:
            c.visit(st)
    return c.found


def float32_funcs(built):
    """Funcs that float32 kernels call, directly or through other funcs: each gets a
    float32 variant (funcs are shared by kernels of either precision)."""
    funcs = {tr.pf.name for role, tr, _ in built if role == "func"}
    calls = {tr.pf.name: _called(fns, funcs) for _, tr, fns in built}
    todo = [f for role, tr, fns in built if role == "kernel" and float32_kernel(tr)
            for f in calls[tr.pf.name]]
    need = set()
    while todo:
        f = todo.pop()
        if f not in need:
            need.add(f)
            todo += calls.get(f, ())
    return need


def call_float32(fns, f32_funcs):
    """``fns`` calling the float32 variants of the funcs in ``f32_funcs``."""
    out = []
    for fname, params, body, *rest in fns:
        body = [_Calls(f32_funcs, "_f32").visit(copy.deepcopy(st)) for st in body]
        out.append((fname, params, body, *rest))
    return out


def float32_variant(fns, tr, f32_funcs):
    """A func's ``<name>_forward_f32``/``_adjoint_f32``: its functions with float32
    numbers, for float32 kernels. A custom gradient or JVP (a function given with the
    user's source) is the user's code, whose kinds the transformer does not know: only
    its literals change."""
    out = []
    for fname, params, body, *rest in call_float32(fns, f32_funcs):
        kinds = _users_kinds(tr, params) if len(rest) > 1 else names_kinds(tr)
        out.append((fname + "_f32", params, [_Float32(kinds).visit(st) for st in body], *rest))
    return out


def float32_functions(fns, kinds):
    return [(fname, params, [_Float32(kinds).visit(st) for st in body], *rest)
            for fname, params, body, *rest in fns]
