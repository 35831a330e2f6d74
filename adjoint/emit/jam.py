"""Two threads a pass: a parallel or privatize plan's threads, run in pairs through a
loop they share (unroll-and-jam of the grid's thread loop with a loop of the body).

Expects: the lowered CPU thread body of a 1-D grid whose plan runs its threads in
parallel, privatizing ``private`` (none for plan parallel: derive/parallel.py), with
its declarations and its float32 spelling (emit/precision.py); the name of the thread
index, the function's parameters and the kernel's scalar parameters.
Guarantees: ``paired`` gives ``(params, body)`` of a function that runs the threads
``tid0`` and ``tid0_b`` (a fresh name) together, or None when it does not apply. The
input is left as it was; the same input gives the same tree. A top-level ``for`` whose
``range`` both threads compute alike runs once for both (see ``_plan`` for "alike"); in
it, what both compute alike (the index, loads of arrays no thread writes, a bounds
check) is computed once, ``X[c] += a`` and ``X[c] += b`` into one private element
become ``X[c] += a + b``, and every other statement runs for the first thread, then
the second.

Why it is allowed: the plan already lets threads run in any order and at once, and
interleaving two threads' statements is one such order. Only the order of additions
into a private element changes (``X[c] + (a + b)``): as deterministic as before (the
pairs are fixed by the chunks), not bit for bit the same; a parallel plan is bit for bit.
Why: it halves the read-modify-writes of a chunk's copy and the loads LLVM cannot reuse
past them (all-pairs kernels), and runs two loop-carried chains side by side
(docs/backends.md, "All pairs: two threads a pass").

Not applied to: grids of more than one dimension; bodies with no loop that joins an add
or carries a value; a loop that may ``break``/``continue`` or recomputes a ``while``-like
condition; a ``return`` other than the one after a failed bounds check's ``rt.fault``; a
body that assigns a parameter, other than the privatize plan's one-element sums
(emit/sums.py), which the pair function takes, adds both threads' values into, returns.
"""
import dataclasses

import gast

from ..derive.ir import Comment, Float32, LoopInfo, comment, copy_tree, name, unique, walk_stmts
from .sums import accumulated

_PURE_RT = {"trip_count", "range_outside", "index_outside_loop"}   # rt helpers: values only
_SYNTAX = (gast.Constant, gast.Name, gast.BinOp, gast.UnaryOp, gast.Compare, gast.BoolOp,
           gast.IfExp, gast.Tuple, gast.Attribute, gast.Call, gast.Subscript, gast.operator,
           gast.unaryop, gast.cmpop, gast.boolop, gast.expr_context)


def paired(body, tid, params, scalars, private, sums=()):
    """``(params, body)`` of the pair function of a thread function (module docstring),
    or None where it does not apply. ``sums``: the parameters in which the thread
    function keeps one-element sums (emit/sums.py: ``s = rt.accumulate(s, v)``, returned
    at every ``return``); the pair function adds both threads' values into them, the
    first thread's then the second's, statement by statement, and returns them."""
    sums = set(sums)
    assigned = _assignments(body)
    if any(p in assigned and p not in sums for p in params) or \
            not _accumulates_only(body, sums) or not _returns_only_after_faults(body, sums):
        return None
    tail = []
    if sums:        # (the thread function's last statement returns its sums)
        body, tail = body[:-1], [copy_tree(body[-1])]
    assigned = {n: c for n, c in assigned.items() if n not in sums}
    arrays = [p for p in params if p != tid and p not in scalars]
    nodes = [node for s in body for node in _nodes(s)]     # (walked once: bodies are long)
    parents = _parents(nodes)
    readonly = {a for a in arrays if a not in _escaping(nodes, parents, arrays, written=True)}
    summable = set(private) - _escaping(nodes, parents, private, written=False)
    once, jams, alike = _plan(body, set(scalars) - set(assigned), set(assigned), readonly,
                              summable)
    if not jams:
        return None
    taken = {n.id for n in nodes if isinstance(n, gast.Name)} | set(params)
    second = {tid: unique(taken, f"{tid}_b")}
    for n in sorted(set(assigned) - alike):
        second[n] = unique(taken, f"{n}_b")
    adds = (", and their adds into one element of "
            + ", ".join(repr(a) for a in sorted(summable)) + " as one add") if summable else ""
    out = [comment(f"threads {tid} and {second[tid]} together (emit/jam.py): each loop whose "
                   "range they share runs once for both, what they compute alike once"
                   + adds)]
    for k, s in enumerate(body):
        if k in jams:
            out.append(_jammed(s, *jams[k], tid, second, summable, taken))
        elif isinstance(s, Comment) or k in once:
            out.append(copy_tree(s))             # (computed alike: once, for both)
        else:
            out += [copy_tree(s), _second(s, second)]
    params2 = [tid, second[tid]] + [p for p in params if p != tid]
    return params2, out + tail


def _plan(body, scalars, assigned, readonly, summable):
    """``(once, jams, alike)``: the top-level statements run once for both threads (by
    index), the loops run once for both (index: (one iteration's statements, the names
    it computes alike, its counter or None, the names alike in it)), and every name
    both threads hold alike (not renamed for the second).

    A name is alike when each statement assigning it assigns a value computed alike and
    runs once for both threads: at the top level, or at the top level of a loop run once
    for both (there not read before it in an iteration: the second thread's part of the
    iteration would read the new value where the first read the old one), or as such a
    loop's target or counter. Found optimistically: every assigned name a candidate,
    those with an assignment that is not so dropped, until none is. No loop runs once
    for both (``jams`` empty) unless one of them joins two adds or carries a value of
    each thread's from one iteration to the next: a pair function costs compile time,
    and the joined adds (and the loads they share), or the two threads' chains of
    dependent operations run side by side, are what pays for it."""
    cand = set(assigned)
    while True:
        alike = scalars | cand
        once, jams, bad, joined = set(), {}, set(), False
        counters = set()
        for k, s in enumerate(body):
            n = _single(s)
            if n is not None:
                if n in cand and _alike(s.value, alike, readonly):
                    once.add(k)
                    if isinstance(s.value, gast.Constant) and s.value.value == 0:
                        counters.add(n)
                else:
                    bad.add(n)
                continue
            if _alike_check(s, alike):
                once.add(k)
                continue
            loop = _jammable(s, alike)
            if loop is not None:
                inner = _assignments(loop)          # (a name assigned once there)
                counter = _counted(loop, {c for c in counters & cand if inner.get(c) == 1})
                shared = {n for n in _alike_in(loop, alike, readonly) if inner[n] == 1}
                inside = alike | shared
                joins = _joinable(loop, summable, inside)
                chains = _carried(loop, {counter})
                if s.target.id in cand and (counter is not None or joins or chains):
                    jams[k] = (loop, shared | {s.target.id}, counter, inside)
                    joined |= joins or chains
                    bad |= set(inner) - shared - {counter}
                    continue
            bad |= set(_assignments([s]))
        if not bad & cand:
            return once, jams if joined else {}, alike
        cand -= bad


def _counted(stmts, counters):
    """The counter ``c`` of a loop whose iteration starts with ``c += 1`` (``c = 0``
    before it, assigned nowhere else: after the loop, its trip count), else None.
    Run once for both threads, the loop counts once: in the second thread's part of
    an iteration ``c`` reads as in the first's."""
    first = next((x for x in stmts if not isinstance(x, Comment)), None)
    if type(first) is gast.AugAssign and isinstance(first.op, gast.Add) and \
            isinstance(first.target, gast.Name) and first.target.id in counters and \
            isinstance(first.value, gast.Constant) and first.value.value == 1:
        return first.target.id
    return None


def _nodes(s):
    out = list(gast.walk(s))
    for st in walk_stmts([s]):
        info = getattr(st, "loop", None)
        if info is not None:
            for x in info.cond + info.latch:
                out += list(gast.walk(x))
    return out


def _numbered(taken, base):
    k, out = 0, base
    while out in taken:
        k += 1
        out = f"{base}_{k}"
    taken.add(out)
    return out


def _assignments(body):
    """{name: how many statements assign it} (loops' latches included)."""
    count = {}
    for s in walk_stmts(body):
        targets = []
        if isinstance(s, gast.Assign) and not isinstance(s.targets[0], gast.Subscript):
            targets = [n.id for n in gast.walk(s.targets[0]) if isinstance(n, gast.Name)]
        elif isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Name):
            targets = [s.target.id]
        elif isinstance(s, gast.For):
            targets = [n.id for n in gast.walk(s.target) if isinstance(n, gast.Name)]
        for t in targets:
            count[t] = count.get(t, 0) + 1
    return count


def _is_fault(s):
    return isinstance(s, gast.Expr) and isinstance(s.value, gast.Call) and \
        isinstance(s.value.func, gast.Attribute) and s.value.func.attr == "fault" and \
        isinstance(s.value.func.value, gast.Name) and s.value.func.value.id == "rt"


def _accumulates_only(body, sums):
    """Whether every assignment to a name of ``sums`` is ``s = rt.accumulate(s, v)``,
    ``v`` not reading ``sums``."""
    for s in walk_stmts(body):
        targets = s.targets if isinstance(s, gast.Assign) else \
            [s.target] if isinstance(s, (gast.AugAssign, gast.For)) else []
        hit = {n.id for t in targets for n in gast.walk(t) if isinstance(n, gast.Name)} & sums
        if not hit:
            continue
        v = s.value if isinstance(s, gast.Assign) else None
        if not (len(hit) == 1 and len(targets) == 1 and isinstance(targets[0], gast.Name) and
                isinstance(v, gast.Call) and isinstance(v.func, gast.Attribute) and
                v.func.attr == "accumulate" and len(v.args) == 2 and
                isinstance(v.args[0], gast.Name) and v.args[0].id == targets[0].id and
                not any(isinstance(n, gast.Name) and n.id in sums for n in gast.walk(v.args[1]))):
            return False
    return True


def _returns_sums(s, sums):
    """Whether ``return`` statement ``s`` returns nothing (no ``sums``) or the sums,
    in the order emit/sums.py returns them (one name, or a tuple of them)."""
    v = s.value
    if not sums:
        return v is None
    names = v.elts if isinstance(v, gast.Tuple) else [v]
    return all(isinstance(n, gast.Name) for n in names) and \
        {n.id for n in names} == sums and len(names) == len(sums)


def _returns_only_after_faults(body, sums=frozenset()):
    """Whether every ``return`` ends a failed bounds check's report (``rt.fault(...);
    return``), returning nothing or the ``sums``, and, with ``sums``, the body's last
    statement returns them."""
    if sums and not (body and isinstance(body[-1], gast.Return) and
                     _returns_sums(body[-1], sums)):
        return False
    body = body[:-1] if sums else body

    def block(stmts):
        for k, s in enumerate(stmts):
            if isinstance(s, gast.Return) and (not _returns_sums(s, sums) or k == 0 or
                                              not _is_fault(stmts[k - 1])):
                return False
            for fld in ("body", "orelse"):
                if not block(getattr(s, fld, None) or []):
                    return False
            info = getattr(s, "loop", None)
            if info is not None and not (block(info.cond) and block(info.latch)):
                return False
        return True
    return block(body)


def _parents(nodes):
    out = {}
    for node in nodes:
        for child in gast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _escaping(nodes, parents, arrays, written):
    """The arrays of ``arrays`` used other than by reading elements (``written``) or
    other than by adding into elements (not ``written``); asking an array its shape is
    neither. ``nodes``: every node of the body; ``parents``: ``_parents(nodes)``."""
    arrays = set(arrays)
    out = set()
    for node in nodes:
        if not (isinstance(node, gast.Name) and node.id in arrays):
            continue
        up = parents.get(id(node))
        if isinstance(up, gast.Attribute) and up.attr == "shape":
            continue
        if isinstance(up, gast.Subscript) and up.value is node:
            if written and isinstance(up.ctx, gast.Load):
                continue
            above = parents.get(id(up))
            if not written and type(above) is gast.AugAssign and above.target is up and \
                    isinstance(above.op, (gast.Add, gast.Sub)):
                continue
        out.add(node.id)
    return out


def _alike(e, alike, readonly):
    """Whether every thread computes expression ``e`` alike, given the names ``alike``:
    from those, constants, ops, shapes and elements of the arrays ``readonly``."""
    bases = set()           # ids of the array names e reads an element or the shape of
    for node in gast.walk(e):      # (and of the names of the ops it calls: min, max, abs)
        if isinstance(node, gast.Call) and isinstance(node.func, gast.Name):
            bases.add(id(node.func))
        if isinstance(node, gast.Attribute) and node.attr == "shape" and \
                isinstance(node.value, gast.Name):
            bases.add(id(node.value))
        elif isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
                node.value.id in readonly:
            bases.add(id(node.value))
    for node in gast.walk(e):
        if not isinstance(node, _SYNTAX + (Float32,)):
            return False
        if isinstance(node, gast.Name) and node.id not in alike and node.id != "rt" and \
                id(node) not in bases:
            return False
        if isinstance(node, gast.Call):
            callee = getattr(node, "callee", None)
            pure_rt = isinstance(node.func, gast.Attribute) and node.func.attr in _PURE_RT
            if not (callee is not None and callee.kind == "op" or pure_rt):
                return False
        if isinstance(node, gast.Subscript) and not (
                isinstance(node.value, gast.Name) and id(node.value) in bases or
                isinstance(node.value, gast.Attribute) and node.value.attr == "shape"):
            return False
        if isinstance(node, gast.Attribute) and not (
                node.attr == "shape" or isinstance(node.value, gast.Name) and node.value.id == "rt"):
            return False
    return True


def _single(s):
    """The name a plain ``name = value`` statement assigns, else None."""
    if type(s) is gast.Assign and isinstance(s.targets[0], gast.Name):
        return s.targets[0].id
    return None


def _defines(s, names):
    n = _single(s)
    return n is not None and n in names


def _alike_check(s, invariant):
    """Whether ``s`` is a bounds check every thread makes alike (``if <test>:
    rt.fault(rt_status, site, a, b, c); return``, all of it from ``invariant``)."""
    if not (isinstance(s, gast.If) and not s.orelse and len(s.body) == 2 and
            _is_fault(s.body[0]) and isinstance(s.body[1], gast.Return)):
        return False
    return _alike(s.test, invariant, ()) and \
        all(_alike(a, invariant, ()) for a in s.body[0].value.args[1:])


def _jammable(s, alike):
    """The statements of one iteration of ``s`` (its body, then its latch) when ``s`` is
    a ``for`` over a range every thread computes alike, that cannot break or continue."""
    if not isinstance(s, gast.For) or s.orelse or not isinstance(s.target, gast.Name):
        return None
    it = s.iter
    if not (isinstance(it, gast.Call) and isinstance(it.func, gast.Name) and
            it.func.id == "range" and not it.keywords and
            all(_alike(a, alike, ()) for a in it.args)):
        return None
    info = getattr(s, "loop", None)
    if info is not None and (info.cond or info.break_flag):
        return None
    stmts = list(s.body) + (list(info.latch) if info is not None else [])
    if _breaks(stmts):
        return None
    return stmts


def _breaks(stmts):
    """Whether a ``break`` or ``continue`` in ``stmts`` (not in a nested loop) leaves
    or ends their loop's iteration."""
    for s in stmts:
        if isinstance(s, (gast.Break, gast.Continue)):
            return True
        if isinstance(s, gast.If) and (_breaks(s.body) or _breaks(s.orelse)):
            return True
    return False


def _alike_in(stmts, alike, readonly):
    """Names of ``alike`` that one iteration (``stmts``) assigns at its top level, from
    names computed alike and elements of arrays no thread writes, and does not read
    before."""
    out, named = set(), set()       # (named: every name the statements before use)
    for s in stmts:
        n = _single(s)
        if n is not None and n in alike and n not in named and \
                _alike(s.value, alike, readonly):
            out.add(n)
        named.update(x.id for x in _nodes(s) if isinstance(x, gast.Name))
    return out


def _element(s, summable, alike):
    """``(array, index source)`` of a top-level ``X[c] += v`` / ``-=`` into a summable
    array at an index every thread computes alike, else None."""
    t = accumulated(s, summable)
    if t is None or not _alike(t.slice, alike, ()):
        return None
    return t.value.id, gast.dump(t.slice)


def _carried(stmts, counters):
    """Whether one iteration (``stmts``) reads a name it assigns before assigning it (a
    value carried from the iteration before, such as a sum ``s_2 = s_1 + t; s_1 =
    s_2``: each iteration waits for the last one's), other than ``counters``. (Such a
    name is never computed once for both threads: ``_alike_in`` leaves it out.)"""
    assigned = _assignments(stmts)
    seen = set()
    for s in stmts:
        for node in _nodes(s):
            if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Load) and \
                    node.id in assigned and node.id not in seen and node.id not in counters:
                return True
        seen |= set(_assignments([s]))
    return False


def _joinable(stmts, summable, alike):
    return any(_element(s, summable, alike) is not None for s in stmts)


class _Rename(gast.NodeTransformer):
    """Rename the names of ``names`` (in a copy), loops' latches and break flags too."""

    def __init__(self, names):
        self.names = names

    def visit_Name(self, node):
        node.id = self.names.get(node.id, node.id)
        return node

    def generic_visit(self, node):
        node = super().generic_visit(node)
        info = getattr(node, "loop", None)
        if isinstance(info, LoopInfo):
            node.loop = dataclasses.replace(
                info, break_flag=self.names.get(info.break_flag, info.break_flag),
                cond=[self.visit(x) for x in info.cond],
                latch=[self.visit(x) for x in info.latch],
                carried=[self.names.get(c, c) for c in info.carried])
        return node


class _Unlined(gast.NodeTransformer):
    """Drop line numbers (the printer quotes the user's line once, for the first
    thread) and comments."""

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if isinstance(node, gast.stmt) and hasattr(node, "lineno"):
            node.lineno = None
        for fld in ("body", "orelse"):
            stmts = getattr(node, fld, None)
            if isinstance(stmts, list) and stmts:
                kept = [x for x in stmts if not isinstance(x, Comment)]
                setattr(node, fld, kept or [gast.Pass()])
        return node


def _second(s, second):
    """Statement ``s`` for the second thread: its names renamed, without line notes."""
    return _Unlined().visit(_Rename(second).visit(copy_tree(s)))


def _jammed(s, stmts, shared, counter, alike, tid, second, summable, taken):
    """The loop ``s`` running both threads' iterations (``stmts``: one iteration;
    ``shared``: the names it computes alike, computed once; ``counter``: its iteration
    counter, counted once (_counted); ``alike``: every name computed alike there, left
    as it is for the second thread)."""
    first = [copy_tree(x) for x in stmts]
    later = [_second(x, second) for x in stmts
             if not isinstance(x, Comment) and not _defines(x, shared) and
             not _alike_check(x, alike) and
             not (counter is not None and x is _first_statement(stmts))]
    # the two threads' adds into one element, as one add (where each adds there once)
    keys_a = [_element(x, summable, alike) for x in first]
    keys_b = [_element(x, summable, alike) for x in later]
    for key in sorted({k for k in keys_a if k is not None}):
        if keys_a.count(key) != 1 or keys_b.count(key) != 1:
            continue
        ka, kb = keys_a.index(key), keys_b.index(key)
        a, b = first[ka], later[kb]
        tmp = _numbered(taken, f"{key[0]}_add")
        first[ka] = gast.Assign(targets=[name(tmp, store=True)], value=a.value,
                                type_comment=None)
        first[ka].lineno = getattr(a, "lineno", None)
        op = gast.Add() if type(a.op) is type(b.op) else gast.Sub()
        later[kb] = gast.AugAssign(target=b.target, op=a.op,
                                   value=gast.BinOp(left=name(tmp), op=op, right=b.value))
    note = comment(f"the same iteration for thread {second[tid]}")
    loop = gast.For(target=copy_tree(s.target), iter=copy_tree(s.iter),
                    body=first + [note] + later, orelse=[], type_comment=None)
    loop.lineno = getattr(s, "lineno", None)
    return loop


def _first_statement(stmts):
    return next(x for x in stmts if not isinstance(x, Comment))
