"""Pass 7e, zeroed: adjoint arrays a launch's backward leaves entirely zero.

Expects: a kernel's ``Reversed`` (pass reverse), its ``Saved`` (pass store) or None,
its ``Once`` (pass once) or None, its ``Gather`` (pass gather) or None, its
backward ``Plan`` (pass parallel) and its number of thread indices.
Guarantees: ``zeroed`` names the adjoint arrays (``adj_A``) that every backward the
kernel may run (reverse's, the store policy's, their storing variants, the gathered
one) leaves holding only zeros, *provided* the launch's grid equals ``A``'s shape
and ``adj_A``'s memory is no other adjoint buffer of the launch (the runtime checks
both: runtime/steps.py ``mark_zeroed``).

Why: a launch that stores every element of its output at the thread's index
(``out[i, j] = ...``) has a backward that hands ``adj_out[i, j]`` on and clears it
(DESIGN.md, "A store replaces a value"). After the backward, the whole of
``out.grad`` is zero; the tape notes it clean (runtime/watch.py), so ``Tape.zero``
and ``zero_()`` skip it, and a backward adding into it may store instead
(transform/once.py). The hand-written pair zeroes nothing either.

The proof, on each backward body as it runs (not the user's source). For ``adj_A``:

- nothing adds into it: no ``adj_A[...] += v``, no atomic min/max into it;
- every other write to it is a clear ``adj_A[t0, ..., tD-1] = 0`` whose index
  has exactly one component per thread dimension, component ``d`` a name holding
  thread index ``d`` on every path (``parallel.thread_indices``);
- the name ``adj_A`` appears nowhere else but as the array of an element read
  (``adj_A[k]`` loaded, at any index: a read changes nothing): never passed
  whole (to a func's hand-written adjoint), never rebound;
- some clear runs on every path of every thread: it stands at the top level of
  the body, or in both branches of an ``if`` that does, recursively -- never in
  a loop (which may run zero times) and after no statement holding a ``return``
  (an early exit: a kernel's own ``return`` lowers to a guard, so its store is
  under an ``if`` already; a failed bounds check returns too, but then the
  launch raises and nothing is noted);
- ``adj_A`` is not one of the backward plan's private arrays (whose chunk copies
  are added back after the threads ran).

Then with the grid equal to ``A``'s shape, thread ``t`` clears element ``t`` and
every element is some thread's; every write in the launch writes 0, in any order
of the threads. The gathered backward's rest is the body less the gathered
accumulations (it keeps every clear: checked as a body); its receivers must not
write ``adj_A`` at all. The runtime also refuses an ``adj_A`` sharing memory with
another adjoint buffer of the launch: runtime/buffers.py ``call_unaliased`` adds
that one's scratch into it after the threads ran.
"""
import math
from types import SimpleNamespace

import gast

from .ir import Comment, walk_stmts
from .parallel import thread_indices


def zeroed(rev, saved, once, gathered, plan, dims):
    """The names in ``rev.adj_params`` (``adj_A``) that every backward of the kernel
    leaves all zero (see the module docstring), in ``adj_params`` order."""
    if rev.backward is None:
        return ()
    bodies = [rev.backward]
    if saved is not None:
        bodies.append(saved.backward)
    if once is not None:
        bodies += [b for b in (once.backward, once.backward_saved) if b is not None]
    if gathered is not None:
        bodies.append(gathered.rest)
    private = set(plan.private) if plan is not None else set()
    out = []
    for a in rev.adj_params:
        if a in private or a[len("adj_"):] in private:
            continue
        if not all(clears(body, a, dims) for body in bodies):
            continue
        if gathered is not None and any(_writes(r.body, a) for r in gathered.receivers):
            continue
        out.append(a)
    return tuple(out)


def rest_clears(gathered, cleared):
    """The names of ``cleared`` (from ``zeroed``) that the gathered backward's rest
    clears, when clearing them is all it does (besides naming values: no call but the
    thread index, no other write), else (): the runtime may then skip the rest and owe those zeros instead
    (runtime/owed.py, runtime/steps.py)."""
    if gathered is None or not cleared:
        return ()
    found = set()
    for s in walk_stmts(gathered.rest):
        if isinstance(s, Comment):
            continue
        if not isinstance(s, gast.Assign) or any(
                isinstance(n, gast.Call) and getattr(getattr(n, "callee", None), "kind",
                                                     None) != "tid"
                for n in gast.walk(s.value)):
            return ()           # (the thread's index is no call in the emitted code)
        t = s.targets[0]
        if len(s.targets) == 1 and isinstance(t, gast.Subscript) and \
                isinstance(t.value, gast.Name) and t.value.id in cleared:
            found.add(t.value.id)
        elif not all(isinstance(n, (gast.Name, gast.Tuple, gast.Store))
                     for t in s.targets for n in gast.walk(t)):
            return ()
    return tuple(a for a in cleared if a in found)


def clears(body, adj, dims):
    """Whether ``body`` writes ``adj`` only by clearing it at the thread's own element,
    does so on every path, and uses the name otherwise only to read elements."""
    owner = thread_indices(SimpleNamespace(body=list(body)))
    allowed = set()
    for node in _nodes(body):
        if isinstance(node, gast.Assign) and any(_slot(t, adj) for t in node.targets):
            if len(node.targets) != 1 or not _is_clear(node, adj, owner, dims):
                return False
            allowed.add(id(node.targets[0].value))
        elif isinstance(node, gast.Subscript) and isinstance(node.ctx, gast.Load) and \
                _slot(node, adj):
            allowed.add(id(node.value))
    for node in _nodes(body):
        if isinstance(node, gast.Name) and node.id == adj and id(node) not in allowed:
            return False        # added into, passed whole, rebound, ...
    return _always(body, adj, owner, dims)


def _writes(body, adj):
    """Whether ``body`` may write ``adj``: any use of the name but an element read."""
    reads = {id(n.value) for n in _nodes(body)
             if isinstance(n, gast.Subscript) and isinstance(n.ctx, gast.Load) and _slot(n, adj)}
    return any(isinstance(n, gast.Name) and n.id == adj and id(n) not in reads
               for n in _nodes(body))


def _always(stmts, adj, owner, dims):
    """Whether a clear of ``adj`` runs on every path through ``stmts``, before any exit."""
    for s in stmts:
        if isinstance(s, gast.Assign) and _is_clear(s, adj, owner, dims):
            return True
        if isinstance(s, gast.If) and _always(s.body, adj, owner, dims) and \
                _always(s.orelse, adj, owner, dims):
            return True
        if any(isinstance(x, (gast.Return, gast.Raise)) for x in walk_stmts([s])):
            return False
    return False


def _is_clear(s, adj, owner, dims):
    """``adj[t0, ..., tD-1] = 0``, component ``d`` holding thread index ``d`` (``+0.0``:
    a clean buffer holds the bits ``zero_()`` writes, never ``-0.0``)."""
    t = s.targets[0]
    v = s.value.value if isinstance(s.value, gast.Constant) else None
    if not (_slot(t, adj) and type(v) in (int, float) and v == 0 and math.copysign(1, v) > 0):
        return False
    sl = t.slice
    comps = list(sl.elts) if isinstance(sl, gast.Tuple) else [sl]
    return len(comps) == dims and all(
        isinstance(c, gast.Name) and owner.get(c.id) == d for d, c in enumerate(comps))


def _nodes(body):
    """Every node in ``body``, the statements of loops' conditions and latches included
    (some more than once)."""
    for s in walk_stmts(body):
        yield from gast.walk(s)


def _slot(node, adj):
    return isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
        node.value.id == adj
