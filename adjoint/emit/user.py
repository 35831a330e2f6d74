"""The user-level target: the IR printed as Python the transformer accepts again.

Generated forward and backward modules spell operations for a backend
(``rt.div``, ``rt.sin``, bounds checks, grid loops). This target prints a
function body as a user would write it instead -- ``x / y``, ``math.sin(x)``,
``ad.tid()``, ``ad.clamp(...)``, calls of funcs by name -- with parameter
annotations, so the result is valid input to ``ad.kernel``/``ad.func``. Higher
derivatives are built that way: the JVP of a func or kernel, printed here, is
transformed again (its reverse mode gives Hessian-vector products; see
adjoint/higher.py).

Expects: a tangent body (pass jvp) of a transformed kernel or func. Guarantees:
text of one ``def`` whose locals are definitely assigned (maybe-unassigned
ones start at a typed zero, as in generated modules), bounds checks and
comment nodes left out (the transformer adds its own checks), the user's lines
quoted in comments; the input tree is not changed.
"""
import copy

import gast

from ..rules import RULES, lookup
from ..transform.ir import CheckStmt, Comment
from .declare import declare
from .printer import Printer


def _expr(text):
    return gast.parse(text, mode="eval").body


# rt.<runtime> -> the rule it spells (rule templates call math.cos as rt.cos)
_BY_RUNTIME = {r.runtime: r for r in RULES.values() if r.runtime}


class _Spell(gast.NodeTransformer):
    def visit_Call(self, node):
        self.generic_visit(node)
        callee = getattr(node, "callee", None)
        f = node.func
        if callee is None and isinstance(f, gast.Attribute) and isinstance(f.value, gast.Name) \
                and f.value.id == "rt" and f.attr in _BY_RUNTIME:
            node.func = _expr(_BY_RUNTIME[f.attr].symbol)
        if callee is None:
            return node
        if callee.kind == "op":
            node.func = _expr(lookup(callee.name).symbol)   # math.sin, abs, ad.clamp
        elif callee.kind == "tid":
            node.func = _expr("ad.tid")
        elif callee.kind == "func":
            node.func = _expr(callee.name + ("_jvp" if callee.part == "jvp"
                                             else ""))
        return node


def _strip(stmts):
    """``stmts`` without bounds checks and comment nodes (an emptied block gets ``pass``)."""
    out = []
    for s in stmts:
        if isinstance(s, (CheckStmt, Comment)):
            continue
        s = copy.copy(s)
        for field in ("body", "orelse"):
            if isinstance(getattr(s, field, None), list):
                kept = _strip(getattr(s, field))
                setattr(s, field, kept or ([gast.Pass()] if field == "body" else []))
        out.append(s)
    return out


def annotation(param):
    """The annotation text of a parsed parameter: ``ad.array(dtype=ad.float64, ndim=2)``."""
    if param.is_array:
        return f"ad.array(dtype=ad.{param.type.dtype.name}, ndim={param.type.ndim})"
    return "bool" if param.type.name == "bool" else f"ad.{param.type.name}"


def function_text(tr, fname, params, body):
    """Source of ``def fname(params): body`` in user-level spelling. ``params``:
    ``[(name, annotation text)]``; ``body`` from ``tr`` (for the kinds of its names)."""
    body = [_Spell().visit(s) for s in _strip(copy.deepcopy(body))]
    decls, ok = declare(body, [n for n, _ in params], tr)
    if not ok:
        raise ValueError(f"'{tr.pf.name}': a local of unknown kind is not definitely assigned")
    p = Printer(tr.pf.source)
    p.function(fname, [f"{n}: {a}" for n, a in params],
               [s for s in decls if not isinstance(s, Comment)] + body)
    return p.text()
