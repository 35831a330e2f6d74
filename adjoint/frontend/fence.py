"""Pass fence: reject everything the transformer does not support.

Expects: a resolved ``ParsedFunction`` (pass parse).
Guarantees: the body uses only the supported subset -- assignments (plain,
augmented, tuple unpacking), ``if/elif/else``, ``for ... in range(...)``,
``while``, ``break``, ``continue``, ``return`` (funcs, and bare in kernels),
arithmetic, comparisons, boolean operators, the ternary, calls resolved by
parse, subscripts of array parameters with integer indices and ``arr.shape[k]``.
Anything else raises ``TransformError`` with file:line:col and the source line.
"""
import inspect

import gast
import numpy as np

from . import assigned
from ..derive.ir import ComponentCheck, number_constant

UNSUPPORTED = {
    gast.Lambda: "lambda expressions", gast.Try: "try/except",
    gast.With: "with statements", gast.AsyncWith: "async with",
    gast.ListComp: "list comprehensions", gast.SetComp: "set comprehensions",
    gast.DictComp: "dict comprehensions", gast.GeneratorExp: "generator expressions",
    gast.ClassDef: "class definitions", gast.FunctionDef: "nested function definitions",
    gast.AsyncFunctionDef: "async functions", gast.Global: "global statements",
    gast.Nonlocal: "nonlocal statements", gast.Yield: "yield", gast.YieldFrom: "yield from",
    gast.Await: "await", gast.Delete: "del statements", gast.Raise: "raise statements",
    gast.Assert: "assert statements", gast.Import: "imports", gast.ImportFrom: "imports",
    gast.Starred: "starred expressions", gast.JoinedStr: "f-strings",
    gast.List: "list literals", gast.Dict: "dict literals", gast.Set: "set literals",
    gast.Slice: "slices", gast.NamedExpr: "assignment expressions (:=)",
    gast.AsyncFor: "async for", gast.Match: "match statements",
}
BAD_BINOPS = {gast.MatMult: "@"}     # (& | ^ << >> ~ on ints: rules/bits.py)
BAD_CMPOPS = {gast.Is: "is", gast.IsNot: "is not", gast.In: "in", gast.NotIn: "not in"}


def fence(pf):
    """Raise ``TransformError`` at the first unsupported construct of ``pf``."""
    _Fence(pf).check(pf.node)
    return pf


def reject_syntax(pf):
    """The part of fence that needs no name resolution: statement and expression
    kinds that are never supported. Parse runs it first, so that (for example)
    ``except Exception:`` is reported as try/except, not as an unknown name."""
    f = _Fence(pf)
    for node in gast.walk(pf.node):
        if node is pf.node:
            continue
        for bad, what in UNSUPPORTED.items():
            if isinstance(node, bad):
                raise f.err(f"{what} are not supported" if what.endswith("s") else
                            f"'{what}' is not supported", node)


# the atomics of int arrays only
BIT_ATOMICS = ("atomic_and", "atomic_or", "atomic_xor")

class _Fence:
    def __init__(self, pf):
        self.pf = pf
        self.arrays = {p.name for p in pf.params if p.is_array}
        self.ndims = {p.name: p.type.ndim for p in pf.params if p.is_array}
        self.dtypes = {p.name: p.type.dtype for p in pf.params if p.is_array}
        self.loop_depth = 0

    def err(self, reason, node):
        return self.pf.error(reason, node, stage="fence")

    def check(self, fdef):
        if fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs:
            raise self.err("*args, **kwargs and keyword-only arguments are not supported", fdef)
        if fdef.args.defaults:
            self.defaults(fdef)
        self.block(fdef.body)
        assigned.check(self.pf)

    def defaults(self, fdef):
        """A func's parameter may default to a number (its callers' calls are completed
        where they are parsed: frontend/parse.py); a kernel's may not (a launch passes
        every argument)."""
        if self.pf.role == "kernel":
            raise self.err("default arguments are not supported in a kernel (a launch passes "
                           "every argument)", fdef.args.defaults[0])
        scalars = {p.name for p in self.pf.params if isinstance(p.type, np.dtype)}
        params = fdef.args.args[len(fdef.args.args) - len(fdef.args.defaults):]
        for param, value in zip(params, fdef.args.defaults):
            if number_constant(value) is None or param.id not in scalars:
                raise self.err(f"the default of parameter '{param.id}' must be a number (an int, "
                               "a float or a bool written out)", value)
        self.block(fdef.body)
        assigned.check(self.pf)

    def block(self, stmts):
        for s in stmts:
            self.stmt(s)

    def stmt(self, s):
        for bad, what in UNSUPPORTED.items():
            if isinstance(s, bad):
                raise self.err(f"{what} are not supported" if what.endswith("s") else
                               f"'{what}' is not supported", s)
        if isinstance(s, gast.Assign):
            if len(s.targets) != 1:
                raise self.err("chained assignment (a = b = c) is not supported", s)
            self.target(s.targets[0], s)
            self.expr(s.value, top_call=True)
        elif isinstance(s, gast.AugAssign):
            if isinstance(s.target, gast.Subscript):
                if not isinstance(s.op, (gast.Add, gast.Sub)):
                    raise self.err("only += and -= are supported on array elements", s)
            elif not isinstance(s.target, gast.Name):
                raise self.err("augmented assignment target must be a name or an array element", s)
            self.target(s.target, s)
            self.expr(s.value)
        elif isinstance(s, gast.AnnAssign):
            raise self.err("annotated assignments are not supported; drop the annotation", s)
        elif isinstance(s, gast.Expr):
            self.expr_stmt(s)
        elif isinstance(s, gast.If):
            self.expr(s.test)
            self.block(s.body)
            self.block(s.orelse)
        elif isinstance(s, gast.For):
            self.for_(s)
        elif isinstance(s, gast.While):
            if s.orelse:
                raise self.err("while ... else is not supported", s)
            self.expr(s.test)
            self.loop_body(s.body)
        elif isinstance(s, (gast.Break, gast.Continue)):
            if self.loop_depth == 0:
                raise self.err("break/continue outside a loop", s)
        elif isinstance(s, gast.Return):
            if self.pf.role == "kernel" and s.value is not None:
                raise self.err("kernels cannot return a value; store it into an output array", s)
            if s.value is not None:
                vals = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
                for v in vals:
                    self.expr(v)
        elif isinstance(s, (gast.Pass, ComponentCheck)):    # (pass scalarize wrote it)
            pass
        else:
            raise self.err(f"'{type(s).__name__}' statements are not supported", s)

    def loop_body(self, body):
        self.loop_depth += 1
        self.block(body)
        self.loop_depth -= 1

    def for_(self, s):
        if s.orelse:
            raise self.err("for ... else is not supported", s)
        if not isinstance(s.target, gast.Name):
            raise self.err("the loop variable must be a single name", s.target)
        it = s.iter
        if not (isinstance(it, gast.Call) and getattr(getattr(it, "callee", None), "kind", "") == "range"):
            raise self.err("only 'for ... in range(...)' loops are supported", s.iter)
        if not 1 <= len(it.args) <= 3:
            raise self.err("range() takes 1 to 3 arguments", it)
        if len(it.args) == 3 and isinstance(it.args[2], gast.Constant) and it.args[2].value == 0:
            raise self.err("range() step must not be zero", it)
        for a in it.args:
            self.expr(a)
        self.loop_body(s.body)

    def target(self, t, stmt):
        if isinstance(t, gast.Name):
            return
        if isinstance(t, gast.Tuple):
            for e in t.elts:
                if not isinstance(e, gast.Name):
                    raise self.err("tuple assignment targets must be plain names", e)
            return
        if isinstance(t, gast.Subscript):
            self.subscript(t, store=True)
            return
        raise self.err(f"cannot assign to {type(t).__name__.lower()}", t)

    def subscript(self, node, store=False):
        base = node.value
        if isinstance(base, gast.Attribute):
            if store:
                raise self.err("cannot assign to arr.shape", node)
            if not (isinstance(base.value, gast.Name) and base.value.id in self.arrays):
                raise self.err(".shape is only available on array parameters" +
                               self.unannotated(base.value), node)
            if not (isinstance(node.slice, gast.Constant) and isinstance(node.slice.value, int)):
                raise self.err("arr.shape[k] needs a constant integer k", node)
            return
        if not isinstance(base, gast.Name):
            raise self.err("only array parameters can be indexed, with all indices at once "
                           "(arr[i, j], not arr[i][j])", node)
        if base.id not in self.arrays:
            raise self.err(f"'{base.id}' is not an array parameter and cannot be indexed" +
                           self.unannotated(base), node)
        idx = node.slice.elts if isinstance(node.slice, gast.Tuple) else [node.slice]
        if len(idx) != self.ndims[base.id]:
            raise self.err(f"'{base.id}' has {self.ndims[base.id]} dimension(s) but is indexed "
                           f"with {len(idx)} index(es); give one index per dimension", node)
        for e in idx:
            self.expr(e)

    def unannotated(self, node):
        """For a parameter without annotation (``node`` its name), which a func takes as a
        float: how to take an array instead; else ""."""
        if not isinstance(node, gast.Name):
            return ""
        param = inspect.signature(self.pf.pyfunc).parameters.get(node.id)
        if param is None or param.annotation is not inspect.Parameter.empty:
            return ""
        return (f": '{node.id}' has no annotation, so it is a float; write "
                f"{node.id}: ad.array(dtype=float) to take an array")

    def expr_stmt(self, s):
        v = s.value
        if isinstance(v, gast.Constant):
            return  # docstring or bare constant
        if isinstance(v, gast.Call) and getattr(v, "callee", None) is not None:
            if v.callee.kind == "atomic":
                self.atomic(v)
                return
            if v.callee.kind == "print":         # forward only: strings and numbers
                for a in v.args:
                    if not (isinstance(a, gast.Constant) and isinstance(a.value, str)):
                        self.expr(a)
                return
            self.expr(v, top_call=True, statement=True)
            return
        raise self.err("expression statements other than calls are not supported", s)

    def atomic(self, v):
        """``ad.atomic_add(arr, i, ..., value)`` and the others: an array parameter (of
        ints for the bit ones), its indices, a value."""
        if len(v.args) < 3 or not isinstance(v.args[0], gast.Name) or \
                v.args[0].id not in self.arrays:
            raise self.err(f"{v.callee.name}(arr, i, ..., value) needs an array parameter, "
                           "its indices and a value", v)
        dtype = self.dtypes[v.args[0].id]
        if v.callee.name in BIT_ATOMICS and dtype.kind not in "iu":
            raise self.err(f"{v.callee.name} needs an array of ints; '{v.args[0].id}' "
                           f"is an array of {dtype.name}", v)
        for a in v.args[1:]:
            self.expr(a)

    def expr(self, e, top_call=False, statement=False):
        for bad, what in UNSUPPORTED.items():
            if isinstance(e, bad):
                raise self.err(f"{what} are not supported" if what.endswith("s") else
                               f"'{what}' is not supported", e)
        if isinstance(e, gast.Constant):
            if not isinstance(e.value, (bool, int, float)):
                raise self.err(f"constant {e.value!r} is not a number", e)
        elif isinstance(e, gast.Name):
            pass
        elif isinstance(e, gast.BinOp):
            if type(e.op) in BAD_BINOPS:
                raise self.err(f"operator '{BAD_BINOPS[type(e.op)]}' is not supported", e)
            self.expr(e.left)
            self.expr(e.right)
        elif isinstance(e, gast.UnaryOp):
            self.expr(e.operand)
        elif isinstance(e, gast.BoolOp):
            for v in e.values:
                self.expr(v)
        elif isinstance(e, gast.Compare):
            for op in e.ops:
                if type(op) in BAD_CMPOPS:
                    raise self.err(f"comparison '{BAD_CMPOPS[type(op)]}' is not supported", e)
            self.expr(e.left)
            for c in e.comparators:
                self.expr(c)
        elif isinstance(e, gast.IfExp):
            self.expr(e.test)
            self.expr(e.body)
            self.expr(e.orelse)
        elif isinstance(e, gast.Call):
            callee = getattr(e, "callee", None)
            if callee is None:
                raise self.err("unsupported call", e)
            if callee.kind == "atomic":
                self.atomic(e)          # old = ad.atomic_add(a, i, v): Warp's old value
                return
            if callee.kind in ("range", "print"):
                raise self.err(f"{callee.name}() cannot be used here", e)
            if callee.kind == "tid" and (e.args or not top_call):
                raise self.err("ad.tid() takes no arguments and must be assigned directly: "
                               "i = ad.tid() or i, j = ad.tid()", e)
            if callee.kind == "stack" and not top_call:
                raise self.err(f"ad.{callee.name}() must be assigned directly: "
                               f"s = ad.{callee.name}(...)", e)
            if callee.kind == "tid" and self.pf.role != "kernel":
                raise self.err("ad.tid() is only available in kernels", e)
            if callee.kind == "func" and not statement and \
                    callee.target.transformed.norm.n_returns == 0:
                raise self.err(f"'{callee.name}' returns no value; call it as a statement: "
                               f"{callee.name}(...)", e)
            if callee.kind == "func" and not top_call and callee.target.n_returns > 1:
                raise self.err(f"'{callee.name}' returns several values; unpack them in an "
                               "assignment (a, b = f(...))", e)
            for a in e.args:
                self.expr(a)
        elif isinstance(e, gast.Subscript):
            self.subscript(e)
        elif isinstance(e, gast.Attribute):
            raise self.err("arr.shape must be indexed: arr.shape[k]", e)
        elif isinstance(e, gast.Tuple):
            if not top_call:
                raise self.err("tuples are only supported in assignments and returns", e)
            for x in e.elts:
                self.expr(x)
        else:
            raise self.err(f"'{type(e).__name__}' expressions are not supported", e)
