"""Pass unroll (optimization, exact): a small constant-range loop whose variable indexes
vector, matrix or quaternion components, written out once per iteration before scalarize.

Warp programs walk a vector's components with a loop (``for k in range(3): s += v[i][k] *
w[k]``). Scalarized as written, each ``w[k]`` of a local vector is a select chain over its
components (frontend/components.py), and the loop stays a loop whose backward replays it
from a stack. Written out, ``w[0]``, ``w[1]``, ``w[2]`` are constant components:
straight-line scalar code with neither (the component-store kernel of
tests/frontend/test_component_index.py printed 19,000 lines before this pass).

A loop is unrolled when all of these hold (else it is left as it is, and still right):

- it is ``for k in range(...)`` with constant int arguments (parse has replaced a
  module's constants by their values) and 1 to ``MAX_TRIPS`` iterations, no ``else``;
- its variable is the index, or part of the index, of a subscript of something other
  than an array parameter (a local or vector parameter ``w[k]``, ``m[k, 2 - k]``, an
  array element's component ``a[i][k]``, a struct's field ``s.v[k]``);
- its body has no ``break``, ``continue`` or ``return`` of its own, never assigns its
  variable, and the copies stay within ``MAX_STATEMENTS`` statements.

Loops nested in it are considered first, so ``for k ...: for j ...: o[i][k, j] = m[k, j]``
becomes nine statements, and again in each copy (``for j in range(k, 3)`` has a constant
range there), as long as the copies stay within ``MAX_STATEMENTS``. Each copy is the body
with the variable's reads replaced by the iteration's value, keeping the body's source lines (the generated code's line
comments show the loop's line as written). Where the variable is read after the loop (or
anywhere outside it) the copies end with ``k = last``, the value Python leaves in it.

Written out, a loop can prove a local assigned that the loop could not (``for j in
range(k, 3)`` may run no time; its copies for ``k = 1, 2`` run): so that a kernel is
refused or accepted alike with the pass on and off, the function as written is checked
for reads before assignment first (frontend/assigned.py, as pass fence does).

Exact: the copies run the same operations in the same order as the loop, forward, and
the backward adds the same adjoints in the same (reversed) order, so values, gradients
and tangents are the same bit for bit. ``ADJOINT_OPTIMIZE=-unroll`` leaves the loops
(and their select chains), the form a reader of the rule-by-rule code sees with every
optimization off.
"""
import copy
from dataclasses import replace

import gast

from ..derive.ir import value_names
from . import assigned
from .components import constant

MAX_TRIPS = 16          # iterations, at most (Warp's default ``max_unroll``)
MAX_STATEMENTS = 512    # statements the copies of one loop make, at most


def unroll(pf):
    """``pf`` with its eligible loops written out, or ``pf`` itself where none is."""
    arrays = frozenset(p.name for p in pf.params if p.is_array)
    fdef = copy.deepcopy(pf.node)
    if not _Unroll(arrays, fdef).block(fdef.body):
        return pf
    assigned.check(pf)      # (refused as with the pass off: see the module's docstring)
    return replace(pf, node=fdef)


class _Unroll:
    def __init__(self, arrays, fdef):
        self.arrays, self.fdef = arrays, fdef

    def block(self, stmts):
        """Rewrite ``stmts`` in place, inner loops first; whether anything was unrolled."""
        changed, out = False, []
        for s in stmts:
            for field in ("body", "orelse"):
                inner = getattr(s, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], gast.stmt):
                    changed |= self.block(inner)
            copies = self.unrolled(s) if isinstance(s, gast.For) else None
            if copies is None:
                out.append(s)
            else:
                out += copies
                changed = True
        stmts[:] = out
        return changed

    def unrolled(self, loop):
        """The statements that replace ``loop``, or None where it stays a loop."""
        trips = _trips(loop)
        if trips is None or not isinstance(loop.target, gast.Name):
            return None
        k = loop.target.id
        if not _indexes_components(loop.body, k, self.arrays) or not _plain(loop.body, k):
            return None
        if len(trips) * _count(loop.body) > MAX_STATEMENTS:
            return None
        out = []
        for value in trips:
            for s in copy.deepcopy(loop.body):
                out.append(_Substitute(k, value).visit(s))
        again = copy.deepcopy(out)      # inner loops whose range was k's: constant now
        if self.block(again) and _count(again) <= MAX_STATEMENTS:
            out = again
        if _read_outside(self.fdef, loop, k):
            last = gast.Assign(targets=[gast.Name(id=k, ctx=gast.Store(), annotation=None,
                                                  type_comment=None)],
                               value=gast.Constant(value=trips[-1], kind=None),
                               type_comment=None)
            out.append(gast.copy_location(last, loop))
            gast.copy_location(last.targets[0], loop)
            gast.copy_location(last.value, loop)
        return out


def _trips(loop):
    """The values of ``loop``'s variable: a ``range`` of constant ints, 1 to MAX_TRIPS of
    them, and no ``else``; else None."""
    it = loop.iter
    if loop.orelse or not (isinstance(it, gast.Call) and isinstance(it.func, gast.Name)
                           and it.func.id == "range" and not it.keywords
                           and 1 <= len(it.args) <= 3):
        return None
    args = [constant(_Substitute(None, None).visit(copy.deepcopy(a))) for a in it.args]  # folded
    if None in args:
        return None
    if len(args) == 3 and args[2] == 0:
        return None
    values = list(range(*args))
    return values if 1 <= len(values) <= MAX_TRIPS else None


def _indexes_components(body, k, arrays):
    """Whether ``k`` is read in the index of a subscript of anything but an array
    parameter (``a[i, k]`` of an array parameter ``a`` is an array index, not this)."""
    for s in body:
        for n in gast.walk(s):
            if isinstance(n, gast.Subscript) and any(
                    m.id == k for m in value_names(n.slice)) and not (
                    isinstance(n.value, gast.Name) and n.value.id in arrays):
                return True
    return False


def _plain(body, k):
    """No ``break``/``continue`` of this loop's own, no ``return``, and ``k`` never
    assigned (nor a function, lambda or comprehension inside)."""
    def walk(stmts, nested):
        for s in stmts:
            if isinstance(s, (gast.Break, gast.Continue)) and not nested:
                return False
            for n in gast.walk(s):
                if isinstance(n, (gast.Lambda, gast.Return, gast.ListComp, gast.GeneratorExp,
                                  gast.SetComp, gast.DictComp, gast.Yield, gast.YieldFrom,
                                  gast.FunctionDef, gast.Global, gast.Nonlocal)):
                    return False
                if isinstance(n, gast.Name) and n.id == k and not isinstance(n.ctx, gast.Load):
                    return False
            loops = isinstance(s, (gast.For, gast.While))
            for field in ("body", "orelse"):
                inner = getattr(s, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], gast.stmt):
                    if not walk(inner, nested or loops):
                        return False
        return True
    return walk(body, False)


def _count(stmts):
    return sum(1 for s in stmts for n in gast.walk(s) if isinstance(n, gast.stmt))


def _read_outside(fdef, loop, k):
    """Whether ``k`` may be read anywhere in ``fdef`` outside ``loop``: not counting the
    reads in the body of another ``for k`` loop, which see that loop's own ``k``."""
    stack = [fdef]
    while stack:
        n = stack.pop()
        if n is loop:
            continue
        if isinstance(n, gast.Name) and n.id == k and isinstance(n.ctx, gast.Load):
            return True
        if isinstance(n, gast.For) and isinstance(n.target, gast.Name) and n.target.id == k:
            stack += [n.iter] + n.orelse
            continue
        stack.extend(gast.iter_child_nodes(n))
    return False


_FOLD = {gast.Add: lambda a, b: a + b, gast.Sub: lambda a, b: a - b,
         gast.Mult: lambda a, b: a * b}


class _Substitute(gast.NodeTransformer):
    """Every read of the loop variable replaced by the iteration's value, and the ``+``,
    ``-`` and ``*`` of two ints this makes folded (``m[k, 2 - k]``: ``m[0, 2]``), so that
    scalarize sees a constant component. (Only these: ``//`` and ``%`` round differently
    in Warp's dialect, and they are left to the code that computes them.) With ``k`` None it
    only folds, as for a ``range``'s arguments (``range(-1, 2)``, ``range(N - 1)``)."""

    def __init__(self, k, value):
        self.k, self.value = k, value

    def visit_Name(self, node):
        if node.id == self.k and isinstance(node.ctx, gast.Load):
            return gast.copy_location(gast.Constant(value=self.value, kind=None), node)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        fold = _FOLD.get(type(node.op))
        if fold and constant(node.left) is not None and constant(node.right) is not None:
            value = fold(constant(node.left), constant(node.right))
            if abs(value) < 2 ** 31:
                return gast.copy_location(gast.Constant(value=value, kind=None), node)
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, gast.USub) and constant(node.operand) is not None:
            return gast.copy_location(gast.Constant(value=-constant(node.operand), kind=None), node)
        return node
