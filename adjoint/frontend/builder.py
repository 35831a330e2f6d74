"""The ``Builder``: how pass scalarize writes scalar code (vecops.py uses it).

It builds gast expressions with structural constants folded (a Python float
operand is a structural constant: see vecops.py), stores subexpressions used
more than once in fresh locals (``atom``) and collects the statements that
must run before the statement being rewritten. Fresh names are deterministic:
the first name ``<base>``, ``<base>_1``, ... not used anywhere in the function.
"""
import contextlib

import gast

from ..rules import lookup
from .parse import Callee
from .vecops import V

_OPS = {"+": gast.Add, "-": gast.Sub, "*": gast.Mult, "/": gast.Div}
_CMP = {">": gast.Gt, ">=": gast.GtE, "<": gast.Lt, "<=": gast.LtE}


def name(id_, store=False):
    return gast.Name(id=id_, ctx=gast.Store() if store else gast.Load(), annotation=None,
                     type_comment=None)


def const(value):
    return gast.Constant(value=value, kind=None)


def expr(e):
    """A component as a gast expression (a structural float becomes a constant)."""
    return const(e) if isinstance(e, float) else e


def reads(e):
    """The names an expression reads."""
    if isinstance(e, float):
        return set()
    return {n.id for n in gast.walk(e) if isinstance(n, gast.Name)}


class Builder:
    def __init__(self, taken):
        self.taken = set(taken)
        self.stmts = []

    # -- names -----------------------------------------------------------------------
    def fresh(self, base):
        out, k = base, 0
        while out in self.taken:
            k += 1
            out = f"{base}_{k}"
        self.taken.add(out)
        return out

    def fresh_group(self, stem, suffixes):
        """Names ``<stem>_<suffix>`` (``<stem>_<k>_<suffix>``), all free, for one vector."""
        k = 0
        while True:
            base = stem if k == 0 else f"{stem}_{k}"
            names = [f"{base}_{s}" for s in suffixes]
            if not any(n in self.taken for n in names):
                self.taken.update(names)
                return names
            k += 1

    # -- statements ------------------------------------------------------------------
    def assign(self, target, value):
        self.stmts.append(gast.Assign(targets=[name(target, store=True)], value=expr(value),
                                      type_comment=None))

    def emit(self, stmt):
        self.stmts.append(stmt)

    @contextlib.contextmanager
    def block(self):
        """Collect the statements emitted inside the ``with`` into a list of their own."""
        outer, self.stmts = self.stmts, []
        inner = self.stmts
        try:
            yield inner
        finally:
            self.stmts = outer

    def if_stmt(self, test, body, orelse):
        return gast.If(test=test, body=body or [gast.Pass()], orelse=orelse)

    def emit_if(self, test, body, orelse):
        self.stmts.append(self.if_stmt(test, body, orelse))

    def atom(self, e, base="t"):
        """``e`` if it is a name or a constant, else a fresh local holding it."""
        if isinstance(e, (float, gast.Name, gast.Constant)):
            return e
        n = self.fresh(base)
        self.assign(n, e)
        return name(n)

    def atoms(self, v, force=False):
        """``v`` with every component an atom (stored in ``<t>_x``, ... where needed;
        ``force``: every name too, a copy of the values before their names are reassigned)."""
        kept = (float, gast.Constant) if force else (float, gast.Name, gast.Constant)
        if all(isinstance(c, kept) for c in v.comps):
            return v
        names = self.fresh_group("t", v.vt.comps)
        comps = []
        for n, c in zip(names, v.comps):
            if isinstance(c, kept):
                comps.append(c)
            else:
                self.assign(n, c)
                comps.append(name(n))
        return V(v.vt, comps)

    def load(self, n):
        return name(n)

    # -- expressions (structural constants folded) -----------------------------------
    def binop(self, op, x, y):
        if isinstance(x, float) and isinstance(y, float):
            return {"+": x + y, "-": x - y, "*": x * y}[op] if op != "/" else x / y
        return gast.BinOp(left=expr(x), op=_OPS[op](), right=expr(y))

    def add(self, x, y):
        if isinstance(x, float) and x == 0.0:
            return y
        if isinstance(y, float) and y == 0.0:
            return x
        return self.binop("+", x, y)

    def sub(self, x, y):
        if isinstance(y, float) and y == 0.0:
            return x
        if isinstance(x, float) and x == 0.0:
            return self.neg(y)
        return self.binop("-", x, y)

    def mul(self, x, y):
        for a, b in ((x, y), (y, x)):
            if isinstance(a, float) and a == 0.0:
                return 0.0
            if isinstance(a, float) and a == 1.0:
                return b
        return self.binop("*", x, y)

    def div(self, x, y):
        if isinstance(x, float) and x == 0.0:
            return 0.0
        return self.binop("/", x, y)

    def neg(self, x):
        if isinstance(x, float):
            return -x
        return gast.UnaryOp(op=gast.USub(), operand=x)

    def call(self, key, *args):
        """A call of the rule ``key`` (``sin``, ``length3``), spelled as parse spells it."""
        rule = lookup(key)
        node = gast.Call(func=rule.callee_expr(), args=[expr(a) for a in args], keywords=[])
        node.callee = Callee("op", key)
        return node

    def compare(self, x, op, y):
        return gast.Compare(left=expr(x), ops=[_CMP[op]()], comparators=[expr(y)])

    def both(self, x, y):
        return gast.BoolOp(op=gast.And(), values=[x, y])
