"""Pass cover: adjoint arrays a storing backward writes at every element.

Expects: a kernel's ``Once`` (pass once) or None, its ``Gather`` (pass gather) or
None, its backward ``Plan`` (pass parallel), its number of thread indices and the
names of its integer scalar parameters.
Guarantees: ``covered`` returns, for each adjoint array ``adj_A`` of ``once.arrays``
whose every storing backward stores into each of its elements before anything reads
it, ``(A, extents)``: one extent per index component of the store, ``("dim", d)``
(thread index ``d`` runs over the grid's dimension ``d``), ``("param", n)`` or
``("const", c)`` (a loop ``for k in range(n)`` or ``range(c)``). The store covers the
whole array when each extent equals the array's size in that dimension at the launch
(runtime/owed.py ``covers`` checks it).

Why: ``zero_()`` of a large gradient on the CPU is deferred (runtime/owed.py): the
memory is only zeroed when someone looks at it. A backward that stores ``adj_W[i, k] =
0.0 + v`` at every ``(i, k)`` never looks: it leaves every element as the zeroed memory
would have, so the zero is never written, as in a hand-written pair.

Why it is safe, on each storing body: ``adj_A`` appears once, as the store's target;
no ``if``/``while`` is around the store and nothing but a failed check's ``return``
can skip it; each loop around it runs ``range(0, c, 1)`` with ``c`` the trip count of
an unassigned integer parameter or constant; the index is the thread indices and the
loops' variables; ``adj_A`` is not private and the backward is not gathered. A
gathered backward stores through its receivers instead (emit/spec.py
``gather_clean``: extents ``("dim", d)`` where the array's shape is the launch's grid,
else it zero-fills first). The full proof: docs/semantics.md, "How the passes prove it".
"""
from types import SimpleNamespace

import gast

from .once import assigned_names, is_range
from ..derive.parallel import thread_indices


def covered(once, gathered, plan, dims, scalars):
    """``((A, extents), ...)`` for the arrays of ``once`` every storing backward covers
    (see the module docstring), in ``once.arrays`` order."""
    if gathered is not None:        # the receivers' storing variant (emit/module.py)
        if once is not None:
            return ()
        return tuple((r.array[len("adj_"):], tuple(("dim", d) for d in r.dims))
                     for r in gathered.receivers)
    if once is None:
        return ()
    bodies = [b for b in (once.backward, once.backward_saved) if b is not None]
    private = set(plan.private) if plan is not None else set()
    out = []
    for a in once.arrays:
        name = a[len("adj_"):]
        if a in private or name in private:
            continue
        found = {extents(body, a, dims, set(scalars)) for body in bodies}
        if len(found) == 1 and None not in found:
            out.append((name, found.pop()))
    return tuple(out)


def extents(body, adj, dims, scalars):
    """The extents of the one store into ``adj`` in ``body`` when it covers the array
    (module docstring), else None."""
    uses = [n for s in body for n in gast.walk(s) if isinstance(n, gast.Name) and n.id == adj]
    if len(uses) != 1:
        return None
    path = _path(body, uses[0], [])
    if path is None:
        return None
    loops, store = path
    if not (isinstance(store, gast.Assign) and len(store.targets) == 1 and
            isinstance(store.targets[0], gast.Subscript) and store.targets[0].value is uses[0]):
        return None
    assigned = assigned_names(body)
    counts = []
    for block, loop in loops:
        n = _count(block, loop, scalars, assigned)
        if n is None:
            return None
        counts.append(n)
    owner = thread_indices(SimpleNamespace(body=list(body)))
    sl = store.targets[0].slice
    comps = list(sl.elts) if isinstance(sl, gast.Tuple) else [sl]
    out, used = [], []
    for c in comps:
        if not isinstance(c, gast.Name):
            return None
        if owner.get(c.id) is not None:
            key = ("dim", owner[c.id])
            out.append(key)
        else:
            k = _loop_of(c.id, loops, store)
            if k is None:
                return None
            key = ("loop", k)
            out.append(counts[k])
        if key in used:
            return None
        used.append(key)
    if len(used) != dims + len(loops):
        return None
    return tuple(out)


def _path(stmts, node, loops):
    """``(loops, statement)``: the statement of ``stmts`` holding ``node`` and the loops
    around it, each as ``(the block holding the loop, the loop)``, outermost first;
    None when it is under anything else or may be skipped."""
    for s in stmts:
        if any(n is node for n in gast.walk(s)):
            if isinstance(s, gast.For):
                if any(n is node for n in gast.walk(s.target)) or \
                        any(n is node for n in gast.walk(s.iter)) or s.orelse or \
                        any(isinstance(x, (gast.Break, gast.Continue, gast.Return))
                            for x in gast.walk(s)):
                    return None
                return _path(s.body, node, loops + [(stmts, s)])
            if isinstance(s, (gast.Assign, gast.AugAssign)):
                return loops, s
            return None
        if any(isinstance(x, (gast.Break, gast.Continue)) for x in gast.walk(s)) and \
                not isinstance(s, (gast.For, gast.While)):
            return None
        if any(isinstance(x, gast.Return) for x in gast.walk(s)) and not _fault(s):
            return None
    return None


def _fault(s):
    """``if ...: rt.fault(...); return``: a failed check, after which the launch raises."""
    if not (isinstance(s, gast.If) and not s.orelse and len(s.body) == 2 and
            isinstance(s.body[1], gast.Return) and isinstance(s.body[0], gast.Expr)):
        return False
    call = s.body[0].value
    return isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute) and \
        call.func.attr == "fault" and not any(isinstance(x, gast.Return)
                                              for x in gast.walk(s.test))


def _count(block, loop, scalars, assigned):
    """The extent of ``loop`` (in ``block``): ``("param", n)`` or ``("const", c)``."""
    if not (isinstance(loop.target, gast.Name) and is_range(loop.iter)):
        return None
    start_stop_step = _range(loop.iter)
    if start_stop_step is None:
        return None
    count = start_stop_step
    if isinstance(count, gast.Name) and count.id not in scalars:
        if assigned.count(count.id) > 2:
            return None
        return _counted(block[:block.index(loop)], count.id, scalars, assigned)
    return _bound(count, scalars, assigned)


def _counted(before, c, scalars, assigned):
    """The extent counted into ``c`` by the statements ``before`` a loop."""
    for k, s in enumerate(before):
        if not (isinstance(s, gast.Assign) and len(s.targets) == 1 and
                isinstance(s.targets[0], gast.Name) and s.targets[0].id == c):
            continue
        v = s.value
        if isinstance(v, gast.Call) and isinstance(v.func, gast.Attribute) and \
                v.func.attr == "trip_count" and len(v.args) == 3 and not v.keywords and \
                _is_const(v.args[0], 0) and _is_const(v.args[2], 1) and \
                assigned.count(c) == 1:
            return _bound(v.args[1], scalars, assigned)
        if _is_const(v, 0) and assigned.count(c) == 2:
            for t in before[k + 1:]:
                if isinstance(t, gast.For) and t.body and _increments(t.body[0], c):
                    n = _range(t.iter) if is_range(t.iter) else None
                    if n is None or t.orelse or any(isinstance(x, (gast.Break, gast.Continue))
                                                    for x in gast.walk(t)):
                        return None
                    return _bound(n, scalars, assigned)
        return None
    return None


def _increments(s, c):
    return isinstance(s, gast.AugAssign) and isinstance(s.op, gast.Add) and \
        isinstance(s.target, gast.Name) and s.target.id == c and _is_const(s.value, 1)


def _range(call):
    """The stop of ``range(stop)`` or ``range(0, stop, 1)``, else None."""
    args = call.args
    if len(args) == 1:
        return args[0]
    if len(args) == 3 and _is_const(args[0], 0) and _is_const(args[2], 1):
        return args[1]
    return None


def _bound(n, scalars, assigned):
    if isinstance(n, gast.Constant) and type(n.value) is int:
        return ("const", n.value)
    if isinstance(n, gast.Name) and n.id in scalars and n.id not in assigned:
        return ("param", n.id)
    return None


def _loop_of(name, loops, store):
    """The position in ``loops`` of the loop whose iteration ``name`` holds: its target,
    or ``name = 0 + v * 1`` at the top of its body before what holds the store (the
    loop's body assigning neither again; what the name holds outside the loop does
    not matter)."""
    for k, (_, loop) in enumerate(loops):
        v, inside = loop.target.id, assigned_names(loop.body)
        if name == v and v not in inside:
            return k
        inner = loops[k + 1][1] if k + 1 < len(loops) else store
        for s in loop.body[:loop.body.index(inner)]:
            if isinstance(s, gast.Assign) and len(s.targets) == 1 and \
                    isinstance(s.targets[0], gast.Name) and s.targets[0].id == name and \
                    inside.count(name) == 1 and v not in inside and _is_iteration(s.value, v):
                return k
    return None


def _is_iteration(v, it):
    """``0 + it * 1``."""
    return isinstance(v, gast.BinOp) and isinstance(v.op, gast.Add) and \
        _is_const(v.left, 0) and isinstance(v.right, gast.BinOp) and \
        isinstance(v.right.op, gast.Mult) and isinstance(v.right.left, gast.Name) and \
        v.right.left.id == it and _is_const(v.right.right, 1)


def _is_const(node, value):
    return isinstance(node, gast.Constant) and type(node.value) is int and node.value == value
