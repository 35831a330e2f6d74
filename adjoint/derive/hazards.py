"""Check for in-kernel overwrite hazards (run after ssa).

The backward pass replays the kernel's loads from the arrays as they are
after the launch. A load therefore sees what the forward saw only if nothing
in the kernel wrote that element after (or before, in another thread) the
load. This pass allows one pattern -- plain stores, outside every loop, at
indices that include the thread index (no other thread writes there), each of a
distinct element, and loads of exactly an element stored, after its store in
program order (so whether or not the store ran, the element then holds its final
value) -- and refuses every other mix of reads and writes of one array with
file:line.

A float array has one such store. A vector or matrix element is stored one
component at a time (``v[i] = w`` is ``v[i, 0] = w_x``, ``v[i, 1] = w_y``, ...:
frontend/scalarize.py), so its array has several stores; they qualify when
their indices differ only at positions where every one of them holds a
non-negative integer constant (the component), and agree, name for name,
everywhere else (the thread's part). Each then writes its own element: the
same names hold the same values (SSA, outside loops) and the constants differ.
"""
import ast

import gast

from .inline import custom_call_arrays
from .ir import AtomicFetch, AtomicMinMax, atomic_update, walk_stmts
from .parallel import is_exclusive


def _slice_key(node):
    return ast.unparse(gast.gast_to_ast(node))


def _in_loops(stmts):
    """ids of the statements nested inside some loop."""
    out = set()
    for s in walk_stmts(stmts):
        if isinstance(s, (gast.For, gast.While)):
            out |= {id(x) for x in walk_stmts([s]) if x is not s}
    return out


def _components(sl):
    return sl.elts if isinstance(sl, gast.Tuple) else [sl]


def _component_const(node):
    """A non-negative integer constant index (a component), or None."""
    v = getattr(node, "value", None) if isinstance(node, gast.Constant) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _own_stores(ws, looped, owner, dims):
    """{index key: store} when the writes ``ws`` of one array are plain stores outside
    every loop, each at the thread's own index, each of a distinct element of this
    thread's (indices that differ only in constant components: see the module
    docstring); else None."""
    if any(not isinstance(w, gast.Assign) or id(w) in looped or
           not isinstance(w.targets[0], gast.Subscript) or
           not is_exclusive(owner, dims, w.targets[0].slice) for w in ws):
        return None
    idx = [[_slice_key(c) for c in _components(w.targets[0].slice)] for w in ws]
    if len({len(k) for k in idx}) != 1:
        return None
    for pos in range(len(idx[0])):
        if len({k[pos] for k in idx}) > 1 and any(
                _component_const(_components(w.targets[0].slice)[pos]) is None for w in ws):
            return None     # differ at a position that is not a constant component
    stores = {_slice_key(w.targets[0].slice): w for w in ws}
    return stores if len(stores) == len(ws) else None     # no element stored twice


def check(ssa, dims, owner):
    pf = ssa.norm.pf
    loads, writes, called = {}, {}, {}
    arrays = {p.name for p in pf.params if p.is_array}
    order = {}
    for k, s in enumerate(walk_stmts(ssa.body)):
        order[id(s)] = k
        if isinstance(s, gast.Assign):
            t = s.targets[0]
            if isinstance(t, gast.Subscript):
                writes.setdefault(t.value.id, []).append(s)
            if isinstance(s.value, gast.Subscript) and isinstance(s.value.value, gast.Name):
                loads.setdefault(s.value.value.id, []).append(s)
            if isinstance(s.value, AtomicFetch):      # an update, as its statement form
                writes.setdefault(s.value.target.value.id, []).append(atomic_update(s))
            for arr in custom_call_arrays(s, arrays):
                called.setdefault(arr, s)
        elif isinstance(s, gast.AugAssign):
            writes.setdefault(s.target.value.id, []).append(s)
    _check_minmax(pf, writes)
    for arr in sorted(set(called) & set(writes)):
        raise pf.error(f"array '{arr}' is read by func '{called[arr].value.callee.name}' (which "
                       "has a custom gradient or JVP) and written in this kernel (line "
                       f"{writes[arr][0].lineno}): the backward would replay the call with the "
                       "overwritten values. Read from one array and write to another",
                       called[arr], stage="hazards")
    looped = _in_loops(ssa.body)
    for arr in sorted(set(loads) & set(writes)):
        ws = writes[arr]
        stores = _own_stores(ws, looped, owner, dims)
        for ld in loads[arr]:
            store = stores.get(_slice_key(ld.value.slice)) if stores is not None else None
            if store is None or order[id(ld)] < order[id(store)]:
                raise pf.error(
                    f"array '{arr}' is both read and written in this kernel (line {ld.lineno} reads "
                    f"it, line {ws[0].lineno} writes it): the backward pass would replay the read "
                    "with the overwritten value. Read from one array and write to another "
                    "(only a load of an element this thread stored, after its one store outside "
                    "any loop at the thread's own index, is allowed)",
                    ld, stage="hazards")


def _check_minmax(pf, writes):
    """An array updated by ``ad.atomic_min`` (or ``atomic_max``) is written only that way
    in its kernel: the backward finds the value that survived by comparing each thread's
    value with the element the launch left, which another kind of write would change."""
    for arr in sorted(writes):
        ws = writes[arr]
        minmax = [w for w in ws if isinstance(w, AtomicMinMax)]
        if not minmax:
            continue
        first = minmax[0]
        other = [w for w in ws if not isinstance(w, AtomicMinMax) or w.is_min != first.is_min]
        if other:
            fn = "atomic_min" if first.is_min else "atomic_max"
            raise pf.error(
                f"array '{arr}' is updated by ad.{fn} (line {first.lineno}) and written another "
                f"way in the same kernel (line {other[0].lineno}): the backward finds the value "
                f"that survived by comparing with the element the launch left. Use only ad.{fn} "
                "on this array in this kernel", other[0], stage="hazards")


def arrays_used(ssa):
    """(names read, names written) among the array parameters (an ``ad.atomic_min`` or
    ``atomic_max`` both: its backward reads the element the launch left)."""
    reads, writes = set(), set()
    arrays = {p.name for p in ssa.norm.pf.params if p.is_array}
    for s in walk_stmts(ssa.body):
        reads.update(custom_call_arrays(s, arrays))      # read by a func's own code
        if isinstance(s, gast.Assign):
            if isinstance(s.targets[0], gast.Subscript):
                writes.add(s.targets[0].value.id)
            v = s.value
            if isinstance(v, gast.Subscript) and isinstance(v.value, gast.Name):
                reads.add(v.value.id)
            if isinstance(v, AtomicFetch):
                writes.add(v.target.value.id)
                if isinstance(atomic_update(s), AtomicMinMax):
                    reads.add(v.target.value.id)
        elif isinstance(s, gast.AugAssign):
            writes.add(s.target.value.id)
            if isinstance(s, AtomicMinMax):      # its adjoint reads the element left
                reads.add(s.target.value.id)
    return reads, writes
