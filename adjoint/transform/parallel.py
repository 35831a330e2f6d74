"""Pass 8, parallel: how each kernel's grid may run on several cores.

Expects: an ``SSA`` kernel that passed the hazard check.
Guarantees: a ``Plan`` for the forward and one for the backward pass.

An array access is *exclusive* when every thread index (``i, j = ad.tid()``,
or a copy of it) is one of its indices (``out[i]``, ``out[j, i]``,
``out[0, i]``): distinct threads then differ in some index and touch distinct
elements. Otherwise threads may collide.

- ``parallel``: every write is exclusive; threads run in any order.
- ``privatize``: the only colliding writes accumulate (``+=``, atomics in the
  forward; adjoints of gathered loads in the backward) into arrays nothing
  else writes or reads: each chunk of threads accumulates into its own zeroed
  copy and the copies are added at the end -- race-free, no atomics.
- ``serial``: a plain store may collide (the last writer wins), so the forward
  runs threads in order and the backward in reverse order, which hands each
  stored element's adjoint to the thread whose value survived.
"""
from dataclasses import dataclass, field

import gast

from .ir import walk_stmts


@dataclass
class Plan:
    mode: str                                   # parallel, privatize or serial
    private: list = field(default_factory=list)  # arrays (forward) / adjoint params (backward)
    reason: str = ""


@dataclass
class Access:
    array: str
    kind: str          # load, store or accum
    exclusive: bool


def _tid_names(ssa, dims):
    """SSA names holding thread index d (d = 0..dims-1), through copies."""
    owner = {}
    for s in walk_stmts(ssa.body):
        if not isinstance(s, gast.Assign):
            continue
        t, v = s.targets[0], s.value
        if isinstance(v, gast.Call) and getattr(v, "callee", None) is not None and v.callee.kind == "tid":
            elts = t.elts if isinstance(t, gast.Tuple) else [t]
            for d, e in enumerate(elts):
                owner[e.id] = d
        elif isinstance(t, gast.Name) and isinstance(v, gast.Name) and v.id in owner:
            owner[t.id] = owner[v.id]
    return owner


def is_exclusive(owner, dims, sl):
    """Whether the index ``sl`` contains every thread index as one of its components."""
    idx = sl.elts if isinstance(sl, gast.Tuple) else [sl]
    ds = {owner.get(a.id) for a in idx if isinstance(a, gast.Name)}
    return all(d in ds for d in range(dims))


def accesses(ssa, dims):
    owner = _tid_names(ssa, dims)

    def exclusive(sl):
        return is_exclusive(owner, dims, sl)

    out = []
    for s in walk_stmts(ssa.body):
        if isinstance(s, gast.Assign):
            t, v = s.targets[0], s.value
            if isinstance(t, gast.Subscript):
                out.append(Access(t.value.id, "store", exclusive(t.slice)))
            if isinstance(v, gast.Subscript) and isinstance(v.value, gast.Name):
                out.append(Access(v.value.id, "load", exclusive(v.slice)))
        elif isinstance(s, gast.AugAssign):
            out.append(Access(s.target.value.id, "accum", exclusive(s.target.slice)))
    return out


def plan(ssa, dims, adj_arrays):
    acc = accesses(ssa, dims)
    colliding_store = [a for a in acc if a.kind == "store" and not a.exclusive]
    if colliding_store:
        why = f"'{colliding_store[0].array}' is stored at an index other threads may also store to"
        return Plan("serial", reason=why), Plan("serial", reason=why)
    stored = {a.array for a in acc if a.kind == "store"}
    loaded = {a.array for a in acc if a.kind == "load"}
    fwd_private = sorted({a.array for a in acc if a.kind == "accum" and not a.exclusive})
    mixed = [a for a in fwd_private if a in stored or a in loaded]
    if mixed:
        why = f"'{mixed[0]}' is both accumulated at colliding indices and stored or read"
        return Plan("serial", reason=why), Plan("serial", reason=why)
    forward = Plan("privatize", fwd_private, "colliding accumulations") if fwd_private else Plan("parallel")
    written = stored | {a.array for a in acc if a.kind == "accum"}
    bwd_private = sorted({a.array for a in acc if a.kind == "load" and not a.exclusive
                          and a.array in adj_arrays})
    if any(a in written for a in bwd_private):
        return forward, Plan("serial", reason="an array is read at colliding indices and written")
    backward = Plan("privatize", [f"adj_{a}" for a in bwd_private], "gathered loads") \
        if bwd_private else Plan("parallel")
    return forward, backward
