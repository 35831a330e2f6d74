"""Check for in-kernel overwrite hazards (run after ssa).

The backward pass replays the kernel's loads from the arrays as they are
after the launch. A load therefore sees what the forward saw only if nothing
in the kernel wrote that element after (or before, in another thread) the
load. This pass allows one pattern -- a single plain store, outside every loop,
at an index that includes the thread index (no other thread writes there), and
loads of exactly that element after it in program order (so whether or not the
store ran, the element then holds its final value) -- and refuses every other
mix of reads and writes of one array with file:line.
"""
import ast

import gast

from .inline import custom_call_arrays
from .ir import AtomicMinMax, walk_stmts
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
        store = ws[0]
        ok = (len(ws) == 1 and isinstance(store, gast.Assign) and id(store) not in looped
              and is_exclusive(owner, dims, store.targets[0].slice))
        for ld in loads[arr]:
            if not ok or order[id(ld)] < order[id(store)] or \
                    _slice_key(ld.value.slice) != _slice_key(store.targets[0].slice):
                raise pf.error(
                    f"array '{arr}' is both read and written in this kernel (line {ld.lineno} reads "
                    f"it, line {ws[0].lineno} writes it): the backward pass would replay the read "
                    "with the overwritten value. Read from one array and write to another "
                    "(only a load of the element just stored, after its one store outside any "
                    "loop at the thread's own index, is allowed)",
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
        elif isinstance(s, gast.AugAssign):
            writes.add(s.target.value.id)
            if isinstance(s, AtomicMinMax):      # its adjoint reads the element left
                reads.add(s.target.value.id)
    return reads, writes
