"""Pass parallel: how each kernel's grid may run on several cores.

Expects: an ``SSA`` kernel that passed the hazard check. Guarantees: a ``Plan`` for the
forward and one for the backward pass.

An array access is *exclusive* when every thread index (``i, j = ad.tid()``,
or a copy of it) is one of its indices (``out[i]``, ``out[j, i]``,
``out[0, i]``): distinct threads then differ in some index and touch distinct
elements. Otherwise threads may collide.

- ``parallel``: every write is exclusive; threads run in any order.
- ``privatize``: the only colliding writes accumulate (``+=``, atomics in the
  forward; adjoints of gathered loads in the backward) into arrays nothing
  else writes or reads: each chunk of threads accumulates into its own zeroed
  copy and the copies are added at the end -- race-free, no atomics.
- ``color``: like privatize, but every access to the colliding arrays is at the
  thread's own row plus or minus a constant (a stencil): rows are split into blocks
  at least twice that radius high; even blocks run in parallel, then odd blocks, so
  two threads running at once never touch one element (no private copies). A row
  wrapped around a ring of ``N = X.shape[0]`` rows (``ip = i + 1; if ip == N: ip =
  0``, ``(i + c) % N``: ``ring_wraps``) is within the radius *on the ring*; the
  number of blocks is even (or one), so the first and the last block, which meet
  across the seam, never run at once. This needs ``dim0 <= N``: every thread reads
  ``X[i, ...]``, and the launch checks ``dim0 <= X.shape[0]`` before any thread runs.
- ``serial``: an ``atomic_min``/``max``/``and_``/``or_``/``xor``, or an atomic whose
  old value is taken (``old = ad.atomic_add(a, i, v)``), may collide (the CPU has no
  such atomics; their backward only reads), or a plain store may collide (the last
  writer wins): the forward runs threads in order and the backward in reverse,
  which hands each stored element's adjoint to the thread whose value survived.
"""
from dataclasses import dataclass, field

import gast

from .inline import custom_call_arrays
from .ir import AtomicBits, AtomicFetch, AtomicMinMax, walk_stmts


@dataclass
class Plan:
    mode: str                                   # parallel, privatize, color or serial
    private: list = field(default_factory=list)  # arrays (forward) / adjoint params (backward)
    reason: str = ""
    radius: int = 0                             # color: rows an access may be from its thread's


@dataclass
class Access:
    array: str
    kind: str          # load, store, accum, minmax, bits or fetch (an atomic's old value)
    exclusive: bool
    row: tuple = None  # (component, offset) when a component is thread index 0 + offset


def _definitions(ssa):
    """{name: [value, ...]}: the value of every assignment to each name, in any block
    (branch merges and loop back-edges assign one name several times). A definition
    whose value is not a plain expression -- a loop target, an element of a tuple
    unpacked from a func call -- is recorded as ``None`` (unknown)."""
    defs = {}
    for s in walk_stmts(ssa.body):
        if isinstance(s, gast.For):
            defs.setdefault(s.target.id, []).append(None)
        if not isinstance(s, gast.Assign):
            continue
        t, v = s.targets[0], s.value
        if isinstance(t, gast.Name):
            defs.setdefault(t.id, []).append(v)
        elif isinstance(t, gast.Tuple):
            is_tid = isinstance(v, gast.Call) and getattr(v, "callee", None) is not None \
                and v.callee.kind == "tid"
            for d, e in enumerate(t.elts):
                defs.setdefault(e.id, []).append(("tid", d) if is_tid else None)
    return defs


def _agreed(defs, fact):
    """{name: value} for every name all of whose definitions have the same known fact.

    ``fact(value, known)`` gives a definition's fact from the facts already known (or
    None). Facts are only ever added once every definition agrees, so a name assigned
    the thread index on one path and anything else on another (``ip = i + 1; if ip ==
    n: ip = 0``) has no fact: a merge of an offset with another value is not an offset.
    """
    known = {}
    changed = True
    while changed:
        changed = False
        for n, values in defs.items():
            if n in known:
                continue
            facts = [fact(v, known) if v is not None else None for v in values]
            if facts and facts[0] is not None and all(f == facts[0] for f in facts):
                known[n] = facts[0]
                changed = True
    return known


def grid_dims(ssa):
    """How many thread indices a kernel unpacks from ``ad.tid()`` (1 when it reads none)."""
    for st in walk_stmts(ssa.body):
        if isinstance(st, gast.Assign) and isinstance(st.value, gast.Call) and \
                getattr(st.value, "callee", None) is not None and st.value.callee.kind == "tid":
            t = st.targets[0]
            return len(t.elts) if isinstance(t, gast.Tuple) else 1
    return 1


def thread_indices(ssa):
    """{SSA name: d} for the names holding thread index d on every path, through copies:
    computed once per kernel (pass pipeline) and given to the passes that need it."""
    def fact(v, known):
        if isinstance(v, tuple):
            return v[1]
        if isinstance(v, gast.Call) and getattr(v, "callee", None) is not None and \
                v.callee.kind == "tid":
            return 0
        if isinstance(v, gast.Name):
            return known.get(v.id)
        return None
    return _agreed(_definitions(ssa), fact)


def is_exclusive(owner, dims, sl):
    """Whether the index ``sl`` contains every thread index as one of its components."""
    idx = sl.elts if isinstance(sl, gast.Tuple) else [sl]
    ds = {owner.get(a.id) for a in idx if isinstance(a, gast.Name)}
    return all(d in ds for d in range(dims))


def _row_offsets(ssa, owner):
    """Names equal to thread index 0 plus a constant, or wrapped around a ring (their
    distance from the row on it), on every path: {name: offset}."""
    linear = index_offsets(ssa, owner, 0)
    wraps = ring_wraps(ssa, owner, linear, 0)
    return {**{n: w.distance for n, w in wraps.items()}, **linear}


def index_offsets(ssa, owner, d):
    """Names equal to thread index ``d`` plus a constant on every path: {name: offset}."""
    rows = {n for n, k in owner.items() if k == d}

    def fact(v, known):
        def off(e):
            if not isinstance(e, gast.Name):
                return None
            return 0 if e.id in rows else known.get(e.id)
        if isinstance(v, gast.Name):
            return off(v)
        if isinstance(v, gast.BinOp) and isinstance(v.op, (gast.Add, gast.Sub)):
            a, b = v.left, v.right
            if off(a) is not None and _int_const(b) is not None:
                return off(a) + (_int_const(b) if isinstance(v.op, gast.Add) else -_int_const(b))
            if isinstance(v.op, gast.Add) and off(b) is not None and _int_const(a) is not None:
                return off(b) + _int_const(a)
        return None
    defs = {n: vs for n, vs in _definitions(ssa).items() if n not in rows}
    return {**_agreed(defs, fact), **{n: 0 for n in rows}}


@dataclass(frozen=True)
class Wrap:
    """A thread index ``t`` plus ``offset`` wrapped around a ring of ``size`` (a name
    ``N = X.shape[k]``) by one of the ``kind`` patterns of ``ring_wraps``; ``const`` is
    the ``m`` of that pattern (0 where it has none), ``distance`` a bound on how far
    the value is from ``t`` on the ring."""
    offset: int
    kind: str           # mod, eq, ge_sub, ge_const, lt_add, lt_const
    size: str
    const: int = 0

    @property
    def distance(self):
        c, m = self.offset, self.const
        return {"mod": abs(c), "eq": c + m, "ge_sub": c, "ge_const": c + m, "lt_add": -c,
                "lt_const": -c - 1 + m}[self.kind]


def ring_wraps(ssa, owner, linear, d):
    """{name: Wrap} for the names that hold thread index ``d`` plus a constant wrapped
    around a ring of ``N`` values. ``linear``: the names equal to the index plus a
    constant (``index_offsets``). Recognized, with ``a = t + c`` in ``linear``:

    - ``w = a % N`` (kind mod): distance ``|c|``;
    - ``w = a; if a == N: w = m`` (c > 0; only thread ``N - c`` wraps; eq): ``c + m``;
    - ``w = a; if a >= N: w = a - N`` (ge_sub) or ``w = m`` (ge_const) (c > 0): ``c``
      or ``c + m``;
    - ``w = a; if a < 0: w = a + N`` (lt_add) or ``w = N - m`` (lt_const; c < 0, m >= 1;
      threads ``0 .. |c| - 1`` wrap): ``|c|`` or ``|c| - 1 + m``;

    (``m`` a non-negative integer constant), and plain copies of such names. ``N`` must
    be ``X.shape[k]`` of an array ``X`` that every thread reads or stores at an index
    whose component ``k`` is thread index ``d`` (a top-level access of a kernel without
    ``return``): then the launch has checked ``dim_d <= N`` before any thread ran, which
    the even/odd argument needs: every thread that wraps, and every row it reaches, is
    within the radius of row 0 or of row ``dim0 - 1``, so only the first and the last
    block (different phases) can meet there."""
    defs = _definitions(ssa)
    if any(isinstance(s, gast.Return) for s in walk_stmts(ssa.body)):
        return {}
    rings = _ring_sizes(ssa, owner, defs, d)
    if not rings:
        return {}

    def single(n):
        vs = defs.get(n, [])
        return vs[0] if len(vs) == 1 else None

    def resolve(v):
        """Follow plain copies of singly defined names."""
        seen = 0
        while isinstance(v, gast.Name) and single(v.id) is not None and seen < 32:
            v, seen = single(v.id), seen + 1
        return v

    def is_ring(e):
        return isinstance(e, gast.Name) and e.id in rings

    def is_const(e, low=0):
        c = _int_const(e)
        return c if c is not None and c >= low else None

    out = {}
    for n, vs in defs.items():
        v = vs[0] if len(vs) == 1 else None
        if isinstance(v, gast.BinOp) and isinstance(v.op, gast.Mod) and \
                isinstance(v.left, gast.Name) and v.left.id in linear and is_ring(v.right):
            out[n] = Wrap(linear[v.left.id], "mod", v.right.id)
    for st in walk_stmts(ssa.body):
        if not (isinstance(st, gast.If) and isinstance(st.test, gast.Name)):
            continue
        test = resolve(st.test)
        if not (isinstance(test, gast.Compare) and len(test.ops) == 1 and
                isinstance(test.left, gast.Name) and test.left.id in linear):
            continue
        a, op, rhs = test.left.id, test.ops[0], test.comparators[0]
        c = linear[a]
        for n, wrapped, kept in _merges(st, defs):
            if not (isinstance(kept, gast.Name) and kept.id == a):
                continue
            w = resolve(wrapped)
            wrap = None
            if c > 0 and is_ring(rhs) and isinstance(op, (gast.Eq, gast.GtE)):
                m = is_const(w)
                if m is not None:
                    wrap = Wrap(c, "eq" if isinstance(op, gast.Eq) else "ge_const", rhs.id, m)
                elif isinstance(op, gast.GtE) and _is_binop(w, gast.Sub, a, rhs.id):
                    wrap = Wrap(c, "ge_sub", rhs.id)
            elif c < 0 and _int_const(rhs) == 0 and isinstance(op, gast.Lt):
                if _is_binop(w, gast.Add, a, None, rings):
                    wrap = Wrap(c, "lt_add", w.right.id)
                elif _is_binop(w, gast.Add, None, a, rings):
                    wrap = Wrap(c, "lt_add", w.left.id)
                elif isinstance(w, gast.BinOp) and isinstance(w.op, gast.Sub) and \
                        is_ring(w.left) and is_const(w.right, 1) is not None:
                    wrap = Wrap(c, "lt_const", w.left.id, is_const(w.right, 1))
            if wrap is not None:
                out[n] = wrap
    changed = True
    while changed:                   # plain copies of ring names
        changed = False
        for n, vs in defs.items():
            if n not in out and n not in linear and len(vs) == 1 and \
                    isinstance(vs[0], gast.Name) and vs[0].id in out:
                out[n] = out[vs[0].id]
                changed = True
    return out


def _is_binop(e, op, left, right, rings=None):
    """``e`` is ``left <op> right`` of Names (``None``: a ring size from ``rings``)."""
    if not (isinstance(e, gast.BinOp) and isinstance(e.op, op) and
            isinstance(e.left, gast.Name) and isinstance(e.right, gast.Name)):
        return False

    def ok(node, want):
        return node.id in rings if want is None else node.id == want
    return ok(e.left, left) and ok(e.right, right)


def _merges(st, defs):
    """(name, value in the if-branch, value in the else-branch) for every name defined
    exactly twice, once at the top of each branch of the ``if`` statement ``st``."""
    body = {s.targets[0].id: s.value for s in st.body if isinstance(s, gast.Assign)
            and isinstance(s.targets[0], gast.Name)}
    other = {s.targets[0].id: s.value for s in st.orelse if isinstance(s, gast.Assign)
             and isinstance(s.targets[0], gast.Name)}
    return [(n, body[n], other[n]) for n in body if n in other and len(defs.get(n, [])) == 2]


def _ring_sizes(ssa, owner, defs, d=0):
    """Names ``N = X.shape[k]`` (defined once) of arrays ``X`` that every thread reads or
    stores at an index whose component ``k`` is thread index ``d`` (a top-level statement
    of the kernel: the launch checks ``dim_d <= X.shape[k]`` before any thread runs)."""
    read_by_all = set()
    for s in ssa.body:
        if not isinstance(s, gast.Assign):
            continue
        for sub in (s.value, s.targets[0]):      # a load or a store every thread makes
            if isinstance(sub, gast.Subscript) and isinstance(sub.value, gast.Name):
                sl = sub.slice
                for k, e in enumerate(sl.elts if isinstance(sl, gast.Tuple) else [sl]):
                    if isinstance(e, gast.Name) and owner.get(e.id) == d:
                        read_by_all.add((sub.value.id, k))
    sizes = set()
    for n, vs in defs.items():
        v = vs[0] if len(vs) == 1 else None
        if isinstance(v, gast.Subscript) and _int_const(v.slice) is not None and \
                isinstance(v.value, gast.Attribute) and v.value.attr == "shape" and \
                isinstance(v.value.value, gast.Name) and \
                (v.value.value.id, _int_const(v.slice)) in read_by_all:
            sizes.add(n)
    return sizes


def _int_const(node):
    if isinstance(node, gast.Constant) and isinstance(node.value, int) and \
            not isinstance(node.value, bool):
        return node.value
    return None


def accesses(ssa, dims, owner):
    offsets = _row_offsets(ssa, owner)

    def exclusive(sl):
        return is_exclusive(owner, dims, sl)

    def row(sl):
        idx = sl.elts if isinstance(sl, gast.Tuple) else [sl]
        for k, a in enumerate(idx):
            if isinstance(a, gast.Name) and a.id in offsets:
                return (k, offsets[a.id])
        return None

    out = []
    arrays = {p.name for p in ssa.norm.pf.params if p.is_array}
    for s in walk_stmts(ssa.body):
        # a func with a custom gradient reads its arrays anywhere (and its adjoint adds there)
        out += [Access(a, "load", False) for a in custom_call_arrays(s, arrays)]
        if isinstance(s, gast.Assign):
            t, v = s.targets[0], s.value
            if isinstance(t, gast.Subscript):
                out.append(Access(t.value.id, "store", exclusive(t.slice), row(t.slice)))
            if isinstance(v, gast.Subscript) and isinstance(v.value, gast.Name):
                out.append(Access(v.value.id, "load", exclusive(v.slice), row(v.slice)))
            if isinstance(v, AtomicFetch):          # old = ad.atomic_add(a, i, v)
                out.append(Access(v.target.value.id, "fetch", exclusive(v.target.slice),
                                  row(v.target.slice)))
        elif isinstance(s, gast.AugAssign):
            kind = "minmax" if isinstance(s, AtomicMinMax) else \
                "bits" if isinstance(s, AtomicBits) else "accum"
            out.append(Access(s.target.value.id, kind, exclusive(s.target.slice),
                              row(s.target.slice)))
    return out


def _radius(acc, arrays):
    """Largest row offset when every access to ``arrays`` is row + constant at one
    index position, else None."""
    rows = [a.row for a in acc if a.array in arrays]
    if not rows or None in rows or len({r[0] for r in rows}) != 1:
        return None
    return max(abs(r[1]) for r in rows)


def _private_plan(acc, arrays, names, why):
    radius = _radius(acc, arrays)
    if radius is not None:
        return Plan("color", names, why, radius)
    return Plan("privatize", names, why)


def plan(ssa, dims, owner, adj_arrays):
    """(forward, backward) Plans; ``owner``: the thread indices (``thread_indices``)."""
    acc = accesses(ssa, dims, owner)
    colliding_store = [a for a in acc if a.kind == "store" and not a.exclusive]
    if colliding_store:
        why = f"'{colliding_store[0].array}' is stored at an index other threads may also store to"
        return Plan("serial", reason=why), Plan("serial", reason=why)
    stored = {a.array for a in acc if a.kind in ("store", "minmax", "bits", "fetch")}
    colliding_minmax = [a for a in acc if a.kind in ("minmax", "bits", "fetch") and
                        not a.exclusive]
    loaded = {a.array for a in acc if a.kind == "load"}
    fwd_private = sorted({a.array for a in acc if a.kind == "accum" and not a.exclusive})
    mixed = [a for a in fwd_private if a in stored or a in loaded]
    if mixed:
        why = f"'{mixed[0]}' is both accumulated at colliding indices and stored or read"
        return Plan("serial", reason=why), Plan("serial", reason=why)
    forward = _private_plan(acc, set(fwd_private), fwd_private, "colliding accumulations") \
        if fwd_private else Plan("parallel")
    if colliding_minmax:
        # (the CPU has no atomic min; the backward only reads, so it keeps its plan)
        which = {"minmax": "ad.atomic_min/atomic_max", "bits": "ad.atomic_and/atomic_or/atomic_xor",
                 "fetch": "an atomic whose old value is taken"}[colliding_minmax[0].kind]
        forward = Plan("serial", reason=f"'{colliding_minmax[0].array}' is updated by "
                       f"{which} at an index other threads may also update")
    written = stored | {a.array for a in acc if a.kind == "accum"}
    bwd_private = sorted({a.array for a in acc if a.kind == "load" and not a.exclusive
                          and a.array in adj_arrays})
    if any(a in written for a in bwd_private):
        return forward, Plan("serial", reason="an array is read at colliding indices and written")
    backward = _private_plan(acc, set(bwd_private), [f"adj_{a}" for a in bwd_private],
                             "gathered loads") if bwd_private else Plan("parallel")
    return forward, backward


def tangent_plan(forward, tangent_names):
    """The forward plan of a kernel's JVP: its tangent arrays (``tangent_names``: {array:
    tangent}) are written where their arrays are, so they are privatized with them."""
    dots = [tangent_names[a] for a in forward.private if a in tangent_names]
    return Plan(forward.mode, list(forward.private) + dots, forward.reason, forward.radius)
