"""Pass zeroed: adjoint arrays a launch's backward leaves entirely zero, and those it
hands on.

Expects: a kernel's ``Reversed`` (pass reverse), its ``Saved`` (pass store) or None,
its ``Once`` (pass once) or None, its ``Gather`` (pass gather) or None, its
backward ``Plan`` (pass parallel) and its number of thread indices.
Guarantees: ``zeroed`` names the adjoint arrays (``adj_A``) that every backward the
kernel may run (reverse's, the store policy's, their storing variants, the gathered
one) leaves holding only zeros, *provided* the launch's grid equals ``A``'s shape
and ``adj_A``'s memory is no other adjoint buffer of the launch (the runtime checks
both: runtime/steps.py ``mark_zeroed``). ``handed`` names those of them (no gathered
backward) each backward reads only at the thread's own element and never after a
clear of it; on the CPU their clears are emitted under ``if rt_clear:``
(``optional_clears``, emit/module.py), and where the runtime owes the array's zero
(runtime/steps.py ``handing``) it passes false, and may pass a seed in place of the
gradient (runtime/seeds.py): nothing copied, nothing written into the seed.

Why: a launch that stores every element of its output at the thread's index has a
backward that hands ``adj_out[i, j]`` on and clears it; after it the whole of
``out.grad`` is zero, the tape notes it clean (runtime/watch.py), and ``Tape.zero``
skips it.

Why it is safe, on each backward body: nothing adds into ``adj_A``; every other write
is a clear at exactly the thread indices; ``adj_A`` is otherwise only read by element;
some clear runs on every path of every thread (top level or both branches of an
``if``, in no loop, after no ``return``); ``adj_A`` is not private. With the grid equal
to ``A``'s shape every element is some thread's and every write writes 0. The full
proof: docs/semantics.md, "How the passes prove it".
"""
import math
from types import SimpleNamespace

import gast

from ..derive.ir import BlockRewriter, Comment, copy_tree, if_, name, walk_stmts
from ..derive.parallel import thread_indices


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


CLEAR_FLAG = "rt_clear"     # the backward's parameter: write the clears of ``handed`` arrays


def handed(rev, saved, once, gathered, cleared, dims):
    """The names of ``cleared`` (from ``zeroed``) that every backward of a kernel without
    a gathered backward *hands on*: it reads each of their elements only at the thread's
    own element, and never after clearing it (see ``reads_first``). Their clears may then
    be skipped (``rt_clear`` false: ``optional_clears``): the elements read hold what they
    held with the clears, and the runtime owes the whole array's zero afterwards
    (runtime/steps.py) -- and a seed of ``tape.backward`` may be read where it is, not
    copied into the gradient first."""
    if gathered is not None or not cleared:
        return ()
    bodies = [rev.backward] + ([saved.backward] if saved is not None else [])
    if once is not None:
        bodies += [b for b in (once.backward, once.backward_saved) if b is not None]
    return tuple(a for a in cleared if all(reads_first(body, a, dims) for body in bodies))


def reads_first(body, adj, dims):
    """Whether ``body`` (which writes ``adj`` only by clears: ``clears``) reads ``adj`` only
    at the thread's own element, never in a loop, and on no path after a clear of it. A
    thread then reads only its own element, which only it clears: with or without the
    clears, every read sees the value the element had before the launch."""
    owner = thread_indices(SimpleNamespace(body=list(body)))
    return _first(body, adj, owner, dims, False) is not None


def _first(stmts, adj, owner, dims, cleared):
    """Whether ``adj`` may have been cleared after ``stmts`` (run with ``cleared`` before
    them), or None where a read may follow a clear or is not at the thread's element."""
    for s in stmts:
        if isinstance(s, gast.Assign) and _is_clear(s, adj, owner, dims):
            cleared = True
            continue
        if isinstance(s, gast.If):
            if not _reads_own(s.test, adj, owner, dims, cleared):
                return None
            then = _first(s.body, adj, owner, dims, cleared)
            other = _first(s.orelse, adj, owner, dims, cleared)
            if then is None or other is None:
                return None
            cleared = then or other
        elif any(isinstance(n, gast.Name) and n.id == adj for n in _nodes([s])):
            if isinstance(s, (gast.For, gast.While)) or not _reads_own(s, adj, owner, dims,
                                                                        cleared):
                return None     # (in a loop: a later iteration reads after the clear)
    return cleared


def _reads_own(node, adj, owner, dims, cleared):
    """Whether every read of ``adj`` in ``node`` (an expression or a simple statement) is
    of the thread's own element, and there is none when ``cleared``."""
    for n in gast.walk(node):
        if _slot(n, adj) and (cleared or not _own(n.slice, owner, dims)):
            return False
    return True


def optional_clears(body, arrays):
    """``body`` (copied) with each clear of ``arrays`` (``handed``) run only ``if rt_clear``."""
    if not arrays:
        return body

    class Optional(BlockRewriter):
        def stmt(self, s):
            if isinstance(s, gast.Assign) and len(s.targets) == 1 and \
                    any(_slot(s.targets[0], a) for a in arrays):
                return [if_(name(CLEAR_FLAG), [s], [], getattr(s, "lineno", 0))]
            return self.nested(s)
    return Optional().block(copy_tree(body))


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
    return _own(t.slice, owner, dims)


def _own(sl, owner, dims):
    """Whether the index ``sl`` is the thread's own element: one component per thread
    dimension ``d``, a name holding thread index ``d``."""
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
