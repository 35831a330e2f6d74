"""Pass once: adjoint arrays a launch's backward adds into at most once per element.

Expects: a kernel's backward body (pass reverse, or the store policy's, pass
store), its number of thread indices and its adjoint array parameters.
Guarantees: ``stored_once`` names the adjoint arrays (``adj_W``) into each of whose
elements the whole launch -- every thread, every iteration -- adds at most once;
``storing`` returns a new body in which those additions are plain stores.

Why: a gradient buffer that is *clean* (all zero, runtime/watch.py) before the
launch ends up the same whether such an element is added to or stored: ``0.0 + v``
either way. The store reads nothing, so the backward moves half the memory. The
runtime picks the storing variant only when every such buffer is clean
(runtime/tape.py, runtime/launch.py). The store is spelled ``adj_W[i, k] = 0.0 + v``
so that its bits are those of the addition (``-0.0`` becomes ``+0.0`` in both).

Why it is safe, on the backward as it runs: the array's adjoint is added into by
exactly one statement ``adj_A[idx] += v`` and otherwise only read or cleared (which
leave a zero element zero); ``idx`` holds a name for every thread index and, for every
``for`` around it (no ``while``), the loop's variable or ``start + it * step``. Two
executions of the statement then differ in some component of ``idx``. Anything else
proves nothing. The full proof: docs/semantics.md, "How the passes prove it".
"""
import copy
from dataclasses import dataclass
from types import SimpleNamespace

import gast

from ..derive.ir import at, const, names_in_target
from ..derive.parallel import thread_indices


@dataclass(frozen=True)
class Once:
    arrays: tuple           # the adjoint parameters stored rather than added into (adj_W, ...)
    backward: list          # the backward, storing into them
    backward_saved: list    # the store policy's backward (pass store), storing; or None


def once(rev, saved, dims):
    """The ``Once`` of a kernel from its ``Reversed`` and its ``Saved`` (or None), or
    None when no adjoint array is proven (or the kernel has no backward)."""
    if rev.backward is None:
        return None
    arrays = stored_once(rev.backward, dims, rev.adj_params)
    if saved is not None:       # one set for both backwards: one runtime check
        also = stored_once(saved.backward, dims, rev.adj_params)
        arrays = tuple(a for a in arrays if a in also)
    if not arrays:
        return None
    return Once(arrays, storing(rev.backward, arrays),
                None if saved is None else storing(saved.backward, arrays))


def stored_once(body, dims, adj_params):
    """The names in ``adj_params`` whose every element ``body`` adds into at most once
    per launch (see the module docstring), in ``adj_params`` order."""
    adj = set(adj_params)
    additions, allowed, refused = {a: [] for a in adj_params}, set(), set()
    for node in gast.walk(gast.Module(body=list(body), type_ignores=[])):
        if isinstance(node, gast.AugAssign) and _adj_slot(node.target, adj):
            additions[node.target.value.id].append(node)
            allowed.add(id(node.target.value))
        elif isinstance(node, gast.Assign) and _adj_slot(node.targets[0], adj):
            if _is_zero(node.value):
                allowed.add(id(node.targets[0].value))
            else:
                refused.add(node.targets[0].value.id)
        elif isinstance(node, gast.Subscript) and isinstance(node.ctx, gast.Load) and \
                _adj_slot(node, adj):
            allowed.add(id(node.value))
    for node in gast.walk(gast.Module(body=list(body), type_ignores=[])):
        if isinstance(node, gast.Name) and node.id in adj and id(node) not in allowed:
            refused.add(node.id)                # passed whole: to a func's adjoint, ...
    owner = thread_indices(SimpleNamespace(body=list(body)))
    out = []
    for a in adj_params:
        if a in refused or len(additions[a]) != 1:
            continue
        loops = _enclosing(body, additions[a][0], [])
        if loops is not None and _injective(additions[a][0], loops, owner, dims):
            out.append(a)
    return tuple(out)


def storing(body, arrays):
    """A copy of ``body`` whose addition into each of ``arrays`` (from ``stored_once``)
    is the store ``adj_A[idx] = 0.0 + v``."""
    return [_Store(set(arrays)).visit(copy.deepcopy(s)) for s in body]


class _Store(gast.NodeTransformer):
    def __init__(self, arrays):
        self.arrays = arrays

    def visit_AugAssign(self, node):
        if _adj_slot(node.target, self.arrays):
            value = gast.BinOp(left=const(0.0), op=gast.Add(), right=node.value)
            return at(gast.Assign(targets=[node.target], value=value, type_comment=None),
                      getattr(node, "lineno", None))
        return node


def _adj_slot(node, names):
    return isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
        node.value.id in names


def _is_zero(node):
    return isinstance(node, gast.Constant) and node.value == 0 and type(node.value) is not bool


def _enclosing(stmts, target, loops):
    """The loops around statement ``target`` in ``stmts``, outermost first, each as
    (loop, the statement of its body that holds ``target``); None when not found or
    inside a ``while``."""
    for s in stmts:
        if s is target:
            return loops
        if isinstance(s, gast.If):
            for block in (s.body, s.orelse):
                found = _enclosing(block, target, loops)
                if found is not None:
                    return found
        elif isinstance(s, (gast.For, gast.While)):
            for k, inner in enumerate(s.body):
                found = _enclosing([inner], target, loops + [(s, k)])
                if found is not None:
                    return None if isinstance(s, gast.While) else found
    return None


def _components(slot):
    sl = slot.slice
    return list(sl.elts) if isinstance(sl, gast.Tuple) else [sl]


def _injective(stmt, loops, owner, dims):
    names = {c.id for c in _components(stmt.target) if isinstance(c, gast.Name)}
    if not all(any(owner.get(n) == d for n in names) for d in range(dims)):
        return False
    return all(_counts(loop, k, names) for loop, k in loops)


def _counts(loop, k, names):
    """Whether one of ``names`` differs in every iteration of ``loop``, whose body's
    statement ``k`` holds the addition."""
    it = loop.target.id if isinstance(loop.target, gast.Name) else None
    if it is None or not is_range(loop.iter):
        return False
    assigned = assigned_names(loop.body)
    if it in names and it not in assigned:
        return True
    for s in loop.body[:k]:
        if not (isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name)):
            continue
        n = s.targets[0].id
        if n in names and assigned.count(n) == 1 and _affine(s.value, it, assigned):
            return True
    return False


def is_range(node):
    return isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
        node.func.id == "range" and not node.keywords


def _affine(v, it, assigned):
    """``start + it * step`` (or ``it * step + start``), start and step unchanged by the loop."""
    if not (isinstance(v, gast.BinOp) and isinstance(v.op, gast.Add)):
        return False
    for start, term in ((v.left, v.right), (v.right, v.left)):
        if isinstance(term, gast.BinOp) and isinstance(term.op, gast.Mult) and \
                _fixed(start, assigned):
            for a, step in ((term.left, term.right), (term.right, term.left)):
                if isinstance(a, gast.Name) and a.id == it and _fixed(step, assigned) and \
                        not (isinstance(step, gast.Constant) and step.value == 0):
                    return True
    return False


def _fixed(atom, assigned):
    if isinstance(atom, gast.Constant):
        return type(atom.value) is int
    return isinstance(atom, gast.Name) and atom.id not in assigned


def assigned_names(stmts):
    """Every name assigned anywhere in ``stmts`` (nested blocks included), with repeats
    (also used by pass cover)."""
    out = []
    for node in gast.walk(gast.Module(body=list(stmts), type_ignores=[])):
        if isinstance(node, gast.Assign):
            for t in node.targets:
                out += sorted(names_in_target(t))
        elif isinstance(node, (gast.AugAssign, gast.For)):
            out += sorted(names_in_target(node.target))
    return out
