"""The user-level target: the IR printed as Python the transformer accepts again.

Generated forward and backward modules spell operations for a backend
(``rt.div``, ``rt.sin``, bounds checks, grid loops). This target prints a
function body as a user would write it instead -- ``x / y``, ``math.sin(x)``,
``ad.tid()``, ``ad.clamp(...)``, calls of funcs by name -- with parameter
annotations, so the result is valid input to ``ad.kernel``/``ad.func``. Higher
derivatives are built that way: the JVP of a func or kernel, printed here, is
transformed again (its reverse mode gives Hessian-vector products; see
adjoint/higher.py).

The backward (pass reverse) is printed the same way, so that forward mode can
differentiate it again (forward over reverse): its ``adj_`` names are legal in
a function made by adjoint (``__adjoint_generated__``, adjoint/derivatives/funcs.py),
its loop stacks are spelled ``ad.stack_float(capacity, first)``,
``s = ad.stack_push(s, k, v)`` and ``ad.stack_read(s, k)`` (calls the frontend
reads back as the same stack nodes, and plain Python runs), a stack's capacity
(the CPU's first size: stacks grow) is the loop's trip count written out, a
func's adjoint is called as ``<func>_vjp``, and a func adjoint's tuple of
results is unpacked into names.

Expects: a tangent body (pass jvp) or a backward (pass reverse) of a transformed
kernel or func. Guarantees:
text of one ``def`` whose locals are definitely assigned (maybe-unassigned
ones start at a typed zero, as in generated modules), bounds checks and
comment nodes left out (the transformer adds its own checks), the user's lines
quoted in comments; the input tree is not changed.
"""
import copy

import gast

from ..rules import RULES, lookup
from ..derive.ir import CheckStmt, Comment, const, unique
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
        rt = isinstance(f, gast.Attribute) and isinstance(f.value, gast.Name) and \
            f.value.id == "rt"
        if callee is None and rt and f.attr in _BY_RUNTIME:
            node.func = _expr(_BY_RUNTIME[f.attr].symbol)
        if callee is None and rt and f.attr == "trip_count":
            return _trip_count(*node.args)
        if callee is None:
            return node
        if callee.kind == "op":
            node.func = _expr(lookup(callee.name).symbol)   # math.sin, abs, ad.clamp
        elif callee.kind == "tid":
            node.func = _expr("ad.tid")
        elif callee.kind == "func":
            node.func = _expr(callee.name + _SUFFIX[callee.part])
        return node

    def visit_StackNew(self, node):
        self.generic_visit(node)
        return _call(f"ad.stack_{node.kind}", node.capacity, node.first)

    def visit_StackPush(self, node):
        self.generic_visit(node)
        return _call("ad.stack_push", node.stack, node.index, node.value)

    def visit_StackRead(self, node):
        self.generic_visit(node)
        return _call("ad.stack_read", node.stack, node.index)


_SUFFIX = {"forward": "", "jvp": "_jvp", "adjoint": "_vjp"}


def _call(fn, *args):
    return gast.Call(func=_expr(fn), args=list(args), keywords=[])


def _trip_count(start, stop, step):
    """``range(start, stop, step)``'s trip count as an expression (a loop stack's first
    size): folded where all are constants, ``stop - start`` for a step of 1, else 8 (the
    stack grows)."""
    if not isinstance(step, gast.Constant) or step.value != 1:
        if all(isinstance(a, gast.Constant) for a in (start, stop, step)):
            return const(len(range(start.value, stop.value, step.value)))
        return const(8)
    if isinstance(start, gast.Constant) and isinstance(stop, gast.Constant):
        return const(max(stop.value - start.value, 0))
    if isinstance(start, gast.Constant) and start.value == 0:
        return copy.deepcopy(stop)
    return gast.BinOp(left=copy.deepcopy(stop), op=gast.Sub(), right=copy.deepcopy(start))


class _Unpack(gast.NodeTransformer):
    """``d = f_adjoint(...)`` then ``d[k]`` -> ``d_0, d_1 = f_vjp(...)`` then ``d_k``: a
    func's tuple of adjoints as names (user code indexes arrays only)."""

    def __init__(self, taken):
        self.parts, self.taken = {}, set(taken)

    def fresh(self, base):
        while base in self.taken:
            base += "_"
        self.taken.add(base)
        return base

    def visit_Assign(self, node):
        v, t = node.value, node.targets[0]
        callee = getattr(v, "callee", None)
        if isinstance(t, gast.Name) and callee is not None and callee.kind == "func" and \
                callee.part == "adjoint" and len(v.args) > 1:
            n = len(callee.target.transformed.pf.params)
            names = [self.fresh(f"{t.id}_{k}") for k in range(n)]
            self.parts[t.id] = names
            node.targets = [gast.Tuple(elts=[gast.Name(id=x, ctx=gast.Store(), annotation=None,
                                                       type_comment=None) for x in names],
                                       ctx=gast.Store())]
            return node
        self.generic_visit(node)
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if isinstance(node.value, gast.Name) and node.value.id in self.parts:
            return gast.Name(id=self.parts[node.value.id][node.slice.value], ctx=gast.Load(),
                             annotation=None, type_comment=None)
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


def function_text(tr, fname, params, body, rewrite=None):
    """Source of ``def fname(params): body`` in user-level spelling. ``params``:
    ``[(name, annotation text)]``; ``body`` from ``tr`` (for the kinds of its names).
    ``rewrite``: a function of the user-level statements (adjoint/derivatives/vector_mode.py's copies of
    the tangent statements, one per direction), applied before they are printed."""
    body = _strip(copy.deepcopy(body))
    decls, ok = declare(body, [n for n, _ in params], tr)
    if not ok:
        raise ValueError(f"'{tr.pf.name}': a local of unknown kind is not definitely assigned")
    body = [s for s in decls if not isinstance(s, Comment)] + body
    taken = {n.id for s in body for n in gast.walk(s) if isinstance(n, gast.Name)}
    unpack = _Unpack(taken)
    body = _with_thread_index(tr, [_Spell().visit(unpack.visit(s)) for s in body], taken)
    if rewrite is not None:
        body = rewrite(body)
    p = Printer(tr.pf.source)
    p.function(fname, [f"{n}: {a}" for n, a in params], body)
    return p.text()


def _with_thread_index(tr, body, taken):
    """``body`` of a kernel of a 2-D or 3-D grid with ``ad.tid()`` unpacked into as many
    names, also where nothing reads them (a backward with nothing to do is ``pass``): how
    many names it unpacks is what makes the printed kernel 2-D."""
    if tr.pf.role != "kernel" or tr.dims < 2 or any(
            isinstance(n, gast.Attribute) and n.attr == "tid" and isinstance(n.value, gast.Name)
            and n.value.id == "ad" for s in body for n in gast.walk(s)):
        return body
    names = [unique(taken, f"tid{d}") for d in range(tr.dims)]
    index = gast.parse(f"{', '.join(names)} = ad.tid()").body[0]
    index.lineno = None         # (no line of the user's to quote)
    return [index] + [s for s in body if not isinstance(s, gast.Pass)]


def backward_params(tr):
    """``[(name, annotation text)]`` of the backward printed as user code: the kernel's or
    func's parameters, then its adjoint parameters (a kernel's ``adj_`` arrays, a func's
    ``adj_ret`` seeds)."""
    params = [(p.name, annotation(p)) for p in tr.pf.params]
    if tr.pf.role == "kernel":
        by_name = {f"adj_{p.name}": p for p in tr.pf.params}
        return params + [(a, annotation(by_name[a])) for a in tr.rev.adj_params]
    return params + [(a, "ad.float64") for a in tr.rev.adj_params]


def backward_text(tr, fname):
    """The backward of ``tr`` as user code (``def fname``): a kernel's thread body with its
    adjoint arrays as parameters, or a func returning its parameters' adjoints."""
    if tr.rev.backward is None:
        raise ValueError(f"'{tr.pf.name}' has no backward (it holds loop stacks: a printed "
                         "backward is differentiated in forward mode only)")
    return function_text(tr, fname, backward_params(tr), tr.rev.backward)
