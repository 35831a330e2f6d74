"""Pass gather: a stencil's backward as each gradient element gathering its own sum.

Expects: the backward thread body of pass reverse (before emit lowers it), the SSA
kernel, its grid's dimension count, its thread indices (``parallel.thread_indices``),
the backward ``Plan`` of pass parallel and the names the grid function gives the
launch's dimensions.
Guarantees: a ``Gather`` or None. A ``Gather`` holds, for each gradient array that
threads accumulate into at colliding elements (the plan's ``private`` arrays), the body
of a *receiver*: run once for each element ``r`` of that array, it adds to
``adj_X[r]``, once, what every thread adding into ``adj_X[r]`` adds there (an
owner-computes write, ``adj_X[e0, e1] += adj_X_sum``); and the *rest*: the backward
body without those accumulations (each thread's own elements only). Running every
receiver over its array in parallel, then the rest over the grid in parallel, computes
what the thread bodies compute in any order, without races (up to the order of
floating-point additions). None when it cannot prove that; the plan then stays.

How (loop-index shifting, as PerforAD does): each accumulation's index component ``k``
is thread index ``d_k`` plus a constant ``c``, or ``i + c`` wrapped around a ring
(``parallel.ring_wraps``); the senders of ``r`` are then ``r - c`` and the few threads
whose index wraps onto ``r``. The receiver replays each existing sender's backward and
keeps the accumulations into ``adj_X`` whose index is (or, wrapped, computes to) ``r``,
each sender once. The replay reads what the sender's own thread read: nothing else in
the launch writes those elements before the rest runs.

Refused (None), so the plan's own grid runs: an accumulation whose index is not such a
name (a gathered ``pos[a[i]]``, ``u[i + k]`` in a loop), atomics min/max or a load of a
gathered array's adjoint, an array other than gathered ones that the backward reads
after writing it in the same thread (the replay leaves writes out), loops (their
stacks and latches), ``return``.
"""
import copy
import itertools
from dataclasses import dataclass, replace

import gast

from ..derive import parallel
from ..derive.prune import prune
from ..derive.ir import (AtomicMinMax, Comment, at, const, name, names_in, names_read, unique,
                         walk_stmts)


@dataclass
class Receiver:
    """The receiver of one gathered gradient array ``array`` (an adjoint parameter):
    ``elements`` name its index components (thread function parameters, before the
    launch's dimensions and the backward's parameters), component ``k`` running along
    thread index ``dims[k]``; ``body`` is the thread function's body, ``total`` the name
    of the sum it adds. It runs only where ``array.shape[k]`` equals the launch's
    dimension ``dims[k]`` for every ``k`` (the grid function checks): a thread ``e - c``
    with ``c >= 0`` is then within the launch, unchecked."""
    array: str
    elements: list
    dims: list
    body: list
    total: str
    requires: list      # more tests the grid makes before running it (rings: _requires)


@dataclass
class Gather:
    receivers: list
    rest: list          # the backward body without the gathered accumulations


@dataclass(frozen=True)
class _Candidate:
    """One component of a sender: ``expr`` (of the receiver's element), ``offset`` when it
    is ``element - offset``, or that modulo the ring ``ring`` (provably distinct from
    another such with another offset, on a ring larger than their distance: the grid
    checks it), ``cond`` a test of the element it is only needed under (None: always)."""
    key: str
    expr: object
    offset: int = None
    cond: object = None
    nonnegative: bool = False
    ring: str = None        # ``(e - offset) mod N`` on the ring of size ``ring`` (a name)


def gather(backward, ssa, dims, owner, plan, dim_names):
    """A ``Gather`` for ``backward`` (see the module docstring), or None."""
    if plan.mode not in ("color", "privatize") or not plan.private or backward is None:
        return None
    arrays = set(plan.private)
    if any(isinstance(s, (gast.For, gast.While, gast.Return)) for s in walk_stmts(backward)):
        return None
    accs = _accumulations(backward, arrays)
    if accs is None or not _replay_reads_unwritten(backward, arrays, ssa):
        return None
    lin = [parallel.index_offsets(ssa, owner, d) for d in range(dims)]
    wraps = [parallel.ring_wraps(ssa, owner, lin[d], d) for d in range(dims)]
    sizes = _size_values(ssa)
    taken = names_in(backward) | set(dim_names) | {p.name for p in ssa.norm.pf.params} | \
        {f"adj_{p.name}" for p in ssa.norm.pf.params}
    receivers = []
    for array in sorted(arrays):
        mine = [s for s in accs if s.target.value.id == array]
        if not mine:
            continue                # (its loads do not reach an output: nothing to gather)
        layout = _layout(mine, dims, lin, wraps)
        if layout is None:
            return None
        r = _receiver(backward, array, layout, dims, arrays, sizes, taken, dim_names)
        if r is None:
            return None
        receivers.append(r)
    if not receivers:
        return None
    rest = prune([x for x in (_without(s, arrays) for s in backward) if x is not None], set())
    return Gather(receivers, rest)


# -- what may be gathered -------------------------------------------------------------
def _accumulations(body, arrays):
    """The ``adj_X[...] += v`` statements into ``arrays``, or None when a gathered array
    is used any other way (loaded, stored, min/max, ``-=``...)."""
    accs, ok = [], True
    for s in walk_stmts(body):
        if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Subscript) and \
                isinstance(s.target.value, gast.Name) and s.target.value.id in arrays:
            if isinstance(s, AtomicMinMax) or not isinstance(s.op, (gast.Add, gast.Sub)):
                return None
            if names_read(s.value) & arrays or names_read(s.target.slice) & arrays:
                return None
            accs.append(s)
            continue
        if (names_in(s.test) if isinstance(s, gast.If) else names_in(s)) & arrays:
            ok = False
    return accs if ok and accs else None


def _replay_reads_unwritten(body, arrays, ssa):
    """Whether no array parameter other than ``arrays`` is read after the thread wrote it
    (the receiver's replay of a sender leaves those writes out)."""
    params = {p.name for p in ssa.norm.pf.params if p.is_array}
    params = (params | {f"adj_{p}" for p in params}) - set(arrays)
    return _unwritten_reads(body, params, set()) is not None


def _unwritten_reads(body, params, written):
    """``written`` (arrays of ``params`` written so far) after ``body``, or None when
    ``body`` reads one of them after writing it. Branches are followed separately."""
    for s in body:
        if isinstance(s, gast.If):
            if names_read(s.test) & written:
                return None
            a = _unwritten_reads(s.body, params, set(written))
            b = _unwritten_reads(s.orelse, params, set(written))
            if a is None or b is None:
                return None
            written = a | b
            continue
        if isinstance(s, Comment):
            continue
        if isinstance(s, (gast.Assign, gast.AugAssign)):
            t = s.targets[0] if isinstance(s, gast.Assign) else s.target
            reads = names_read(s.value) | (names_read(t.slice) if isinstance(t, gast.Subscript)
                                           else set())
            if isinstance(s, gast.AugAssign) and isinstance(t, gast.Subscript):
                reads |= {t.value.id}
        else:
            reads = names_in(s)
        if reads & written:
            return None
        written |= {a for a in _written_arrays(s) if a in params}
    return written


def _written_arrays(s):
    if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Subscript):
        return [s.targets[0].value.id]
    if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Subscript):
        return [s.target.value.id]
    return []


def _layout(accs, dims, lin, wraps):
    """[(d, component specs per accumulation)]: for each index component, its thread
    index ``d`` and, per accumulation, ("lin", c) or ("wrap", Wrap); None if any
    component is not such a name or the thread indices differ between accumulations."""
    perm, specs = None, []
    for s in accs:
        sl = s.target.slice
        idx = sl.elts if isinstance(sl, gast.Tuple) else [sl]
        if len(idx) != dims or not all(isinstance(e, gast.Name) for e in idx):
            return None
        ds, spec = [], []
        for e in idx:
            found = [(d, ("lin", lin[d][e.id])) for d in range(dims) if e.id in lin[d]] + \
                [(d, ("ring" if _modular(wraps[d][e.id]) else "wrap", wraps[d][e.id]))
                 for d in range(dims) if e.id in wraps[d]]
            if len(found) != 1:
                return None
            ds.append(found[0][0])
            spec.append(found[0][1])
        if perm is None:
            perm = ds
        if ds != perm or sorted(ds) != list(range(dims)):
            return None
        specs.append((s, spec))
    return perm, specs


def _modular(w):
    """Whether the wrap ``w`` is ``(t + c) mod N`` on a ring larger than ``|c|``."""
    c, m = w.offset, w.const
    return w.kind in ("mod", "ge_sub", "lt_add") or (w.kind in ("eq", "ge_const") and
                                                      (c, m) == (1, 0)) or \
        (w.kind == "lt_const" and (c, m) == (-1, 1))


def _requires(perm, specs, sizes, dim_names):
    """The tests under which ring offsets are told apart statically: every ring of a
    component is the launch's dimension along it and larger than the distance between
    any two of the component's offsets (0 included)."""
    out = []
    for k, d in enumerate(perm):
        offs = {0} | {sp[k][1] if sp[k][0] == "lin" else sp[k][1].offset for _s, sp in specs}
        spread = max(offs) - min(offs)
        for size in sorted({sp[k][1].size for _s, sp in specs if sp[k][0] == "ring"}):
            n = sizes[size]
            out += [_cmp(copy.deepcopy(n), gast.Eq(), name(dim_names[d])),
                    _cmp(copy.deepcopy(n), gast.Gt(), const(spread))]
    return out


# -- the receiver ------------------------------------------------------------------------
def _receiver(body, array, layout, dims, arrays, sizes, taken, dim_names):
    perm, specs = layout
    elements = [unique(taken, f"e{k}") for k in range(dims)]
    total = unique(taken, f"{array}_sum")
    by_dim = {d: k for k, d in enumerate(perm)}
    senders = []
    for _s, spec in specs:
        per_dim = []
        for d in range(dims):
            k = by_dim[d]
            per_dim.append(_candidates(spec[k], name(elements[k]), sizes))
            if per_dim[-1] is None:
                return None
        for vec in itertools.product(*per_dim):
            if all(tuple(c.key for c in vec) != tuple(c.key for c in v) for v in senders):
                senders.append(vec)
    senders.sort(key=lambda vec: any(c.offset is None for c in vec))     # (stable)
    named, lets = {}, []        # a wrapped candidate is computed once, into a local
    for vec in senders:
        for d, c in enumerate(vec):
            if (c.offset is None or c.ring) and not isinstance(c.expr, (gast.Constant, gast.Name)) \
                    and c.key not in named:
                named[c.key] = unique(taken, f"{elements[perm.index(d)]}_w{len(named) + 1}")
                lets.append(gast.Assign(targets=[name(named[c.key], store=True)], value=c.expr,
                                        type_comment=None))
    senders = [tuple(replace(c, expr=name(named[c.key])) if c.key in named else c for c in vec)
               for vec in senders]
    out = [Comment(text=f"{array}[{', '.join(elements)}] gathers what every thread adds to it: "
                        "each thread that may add there replays its backward, keeping only "
                        "that addition (optimize/gather.py)"),
           gast.Assign(targets=[name(total, store=True)], value=const(-0.0), type_comment=None)]
    if lets:
        out += [Comment(text="the threads whose wrapped index may reach this element")] + lets
    for n, vec in enumerate(senders):
        tests = []
        for d, c in enumerate(vec):
            if not c.nonnegative:
                tests.append(_cmp(copy.deepcopy(c.expr), gast.GtE(), const(0)))
            if c.ring is None and (c.offset is None or c.offset < 0):  # (e - c < dim: c >= 0)
                tests.append(_cmp(copy.deepcopy(c.expr), gast.Lt(), name(dim_names[d])))
        tests += [copy.deepcopy(c.cond) for c in vec if c.cond is not None]
        for prev in senders[:n]:
            if any(a.offset is not None and b.offset is not None and a.offset != b.offset
                   for a, b in zip(vec, prev)):
                continue            # provably another thread
            same = [_cmp(copy.deepcopy(a.expr), gast.Eq(), copy.deepcopy(b.expr))
                    for a, b in zip(vec, prev) if a.key != b.key]
            same += [copy.deepcopy(b.cond) for b in prev if b.cond is not None]
            tests.append(gast.UnaryOp(op=gast.Not(), operand=_and(same)))
        where = ", ".join(c.key for c in vec)
        section = [_sender_copy(s, vec, perm, elements, array, arrays, total, specs)
                   for s in body]
        section = prune([s for s in section if s is not None], {total})
        if tests:
            out.append(Comment(text=f"the thread at ({where}), if there is one"))
            out.append(gast.If(test=_and(tests), body=section, orelse=[]))
        else:
            out.append(Comment(text=f"the thread at ({where})"))
            out += section
    out.append(gast.AugAssign(target=_element(array, elements), op=gast.Add(),
                              value=name(total)))
    return Receiver(array, elements, list(perm), out, total,
                    _requires(perm, specs, sizes, dim_names))


def _candidates(spec, e, sizes):
    """The ``_Candidate`` thread indices that may add at element ``e`` through one index
    component ``spec``, or None. Where at most one of the unwrapped thread ``e - c`` and
    the threads that wrap onto ``e`` can exist (every usual ring: ``ip = i + 1; if ip ==
    n0: ip = 0``...), the two are one candidate choosing between them."""
    kind, v = spec
    if kind == "lin":
        return [_linear(e, v)]
    c, m, size = v.offset, v.const, sizes.get(v.size)
    if size is None:
        return None
    if kind == "ring":         # (e - c) mod N, one wrap at most (the grid checks N > |c|)
        key = f"({_src(e)} - {c}) mod {_size_src(size)}"
        if c == 0:
            expr = copy.deepcopy(e)
        elif c > 0:
            expr = gast.IfExp(test=_cmp(copy.deepcopy(e), gast.GtE(), const(c)), body=_plus(e, -c),
                              orelse=_ring_wrap(e, c, size))
        else:
            expr = gast.IfExp(test=_cmp(_plus(e, -c), gast.Lt(), copy.deepcopy(size)),
                              body=_plus(e, -c), orelse=_ring_wrap(e, c, size))
        return [_Candidate(key, expr, offset=c, nonnegative=True, ring=v.size)]
    ns, es = _size_src(size), _src(e)

    def n():
        return copy.deepcopy(size)

    def choose(key, test, then, other):
        return _Candidate(key, gast.IfExp(test=test, body=then, orelse=other))
    if v.kind == "mod":
        return [_Candidate(f"({es} - {c}) % {ns}", gast.BinOp(left=_plus(e, -c), op=gast.Mod(),
                                                            right=n()), nonnegative=True)]
    if v.kind == "ge_sub":     # e - c when e >= c, else the thread that wrapped: e - c + N
        return [choose(f"({es} - {c}) mod {ns}", _cmp(copy.deepcopy(e), gast.GtE(), const(c)),
                       _plus(e, -c), gast.BinOp(left=_plus(e, -c), op=gast.Add(), right=n()))]
    if v.kind == "lt_add":     # e + |c| when below N, else the thread that wrapped
        return [choose(f"({es} + {-c}) mod {ns}", _cmp(_plus(e, -c), gast.Lt(), n()),
                       _plus(e, -c), gast.BinOp(left=_plus(e, -c), op=gast.Sub(), right=n()))]
    first = _linear(e, c)
    if v.kind in ("eq", "ge_const"):         # threads N - c .. wrap to m (eq: only N - c)
        at = _cmp(copy.deepcopy(e), gast.Eq(), const(m))
        if m < c and (v.kind == "eq" or c == 1):     # then e - c < 0: no unwrapped thread
            return [choose(f"{ns} - {c} if {es} == {m} else {first.key}", at,
                           _plus(n(), -c), first.expr)]
        count = 1 if v.kind == "eq" else c
        return [first] + [_Candidate(f"{ns} - {c - t}", _plus(n(), t - c),
                                     cond=copy.deepcopy(at)) for t in range(count)]
    if v.kind == "lt_const":  # threads 0 .. |c| - 1 wrap to N - m
        at = _cmp(copy.deepcopy(e), gast.Eq(),
                  gast.BinOp(left=n(), op=gast.Sub(), right=const(m)))
        if c == -1 and m == 1:                # then e + 1 = N: no unwrapped thread
            return [choose(f"0 if {es} == {ns} - 1 else {first.key}", at, const(0),
                           first.expr)]
        return [first] + [_Candidate(str(t), const(t), cond=copy.deepcopy(at),
                                     nonnegative=True) for t in range(-c)]
    return None


def _ring_wrap(e, c, size):
    """The thread ``e - c`` that wrapped around a ring of ``size`` (N): ``e - c + N`` for
    ``c > 0`` (taken where ``e < c``), ``e - c - N`` for ``c < 0`` (where ``e - c >= N``).
    The element ``e`` lies in ``[0, N)`` (the grid checks that N is the launch's dimension
    along it: ``_requires``), so for the usual ring of offset 1 the wrapped thread is
    ``N - 1`` and for offset -1 it is ``0``: the same numbers, written so that the
    compiler sees them non-negative, which lets it drop the wraparound of negative
    indices and vectorize the gather (the periodic heat stencil's gathered backward:
    24 us a 128x128 call written as ``e + 1 - N``, 9-11 us as ``0``)."""
    if c == 1:
        return gast.BinOp(left=copy.deepcopy(size), op=gast.Sub(), right=const(1))
    if c == -1:
        return const(0)
    return gast.BinOp(left=_plus(e, -c), op=gast.Add() if c > 0 else gast.Sub(),
                      right=copy.deepcopy(size))


def _linear(e, c):
    key = _src(e) if c == 0 else f"{_src(e)} {'-' if c > 0 else '+'} {abs(c)}"
    return _Candidate(key, _plus(e, -c), offset=c, nonnegative=c <= 0)


def _sender_copy(s, vec, perm, elements, array, arrays, total, specs):
    """Statement ``s`` of the backward as the receiver replays it for sender ``vec``:
    the thread index replaced by the sender; accumulations into ``array`` that reach
    the receiver's element added to ``total``; every other array write left out."""
    if isinstance(s, Comment):
        return copy.deepcopy(s)
    if isinstance(s, gast.If):
        body = [x for x in (_sender_copy(b, vec, perm, elements, array, arrays, total, specs)
                            for b in s.body) if x is not None]
        orelse = [x for x in (_sender_copy(b, vec, perm, elements, array, arrays, total, specs)
                              for b in s.orelse) if x is not None]
        return gast.If(test=copy.deepcopy(s.test), body=body, orelse=orelse)
    spec = dict((id(a), sp) for a, sp in specs).get(id(s))
    if spec is not None:
        tests = []
        for k, sp in enumerate(spec):
            c = vec[perm[k]]
            off = sp[1] if sp[0] == "lin" else sp[1].offset if sp[0] == "ring" else None
            if off is not None and c.offset is not None and (sp[0] == "lin") == (c.ring is None)\
                    or sp[0] == "ring" and c.offset is not None and c.ring is None:
                if off != c.offset:
                    return None              # provably another element
                continue                     # provably this one
            if off is not None and c.offset is not None and off != c.offset:
                return None                  # (a ring larger than the offsets' distance)
            idx = s.target.slice.elts[k] if isinstance(s.target.slice, gast.Tuple) \
                else s.target.slice
            tests.append(_cmp(copy.deepcopy(idx), gast.Eq(), name(elements[k])))
        add = gast.AugAssign(target=name(total, store=True), op=copy.deepcopy(s.op),
                             value=copy.deepcopy(s.value))
        at(add, getattr(s, "lineno", None))
        return gast.If(test=_and(tests), body=[add], orelse=[]) if tests else add
    if _written_arrays(s):
        return None                          # the sender's own writes: the rest makes them
    out = copy.deepcopy(s)
    if isinstance(out, gast.Assign) and _is_tid(out.value):
        exprs = [copy.deepcopy(c.expr) for c in vec]
        out.value = exprs[0] if len(exprs) == 1 else gast.Tuple(elts=exprs, ctx=gast.Load())
    return out


def _without(s, arrays):
    """``s`` without the accumulations into ``arrays`` (an emptied ``if`` stays empty)."""
    if isinstance(s, gast.If):
        return gast.If(test=copy.deepcopy(s.test),
                       body=[x for x in (_without(b, arrays) for b in s.body)
                             if x is not None],
                       orelse=[x for x in (_without(b, arrays)
                                           for b in s.orelse) if x is not None])
    if any(a in arrays for a in _written_arrays(s)):
        return None
    return copy.deepcopy(s)


# -- small builders ---------------------------------------------------------------------
def _is_tid(v):
    return isinstance(v, gast.Call) and getattr(v, "callee", None) is not None and \
        v.callee.kind == "tid"


def _size_values(ssa):
    """{name: value} of the names defined once as ``X.shape[k]`` (ring sizes)."""
    counts, values = {}, {}
    for s in walk_stmts(ssa.body):
        if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name):
            n = s.targets[0].id
            counts[n] = counts.get(n, 0) + 1
            v = s.value
            if isinstance(v, gast.Subscript) and isinstance(v.value, gast.Attribute) and \
                    v.value.attr == "shape":
                values[n] = v
    return {n: v for n, v in values.items() if counts[n] == 1}


def _size_src(node):
    """``X.shape[k]`` as text (a sender's description)."""
    return f"{node.value.value.id}.shape[{node.slice.value}]"


def _src(e):
    return e.id


def _plus(e, c):
    if c == 0:
        return copy.deepcopy(e)
    return gast.BinOp(left=copy.deepcopy(e), op=gast.Add() if c > 0 else gast.Sub(),
                      right=const(abs(c)))


def _cmp(a, op, b):
    return gast.Compare(left=a, ops=[op], comparators=[b])


def _and(tests):
    if len(tests) == 1:
        return tests[0]
    return gast.BoolOp(op=gast.And(), values=tests)


def _element(array, elements):
    idx = [name(e) for e in elements]
    sl = idx[0] if len(idx) == 1 else gast.Tuple(elts=idx, ctx=gast.Load())
    return gast.Subscript(value=name(array), slice=sl, ctx=gast.Store())
