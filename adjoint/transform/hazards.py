"""Check for in-kernel overwrite hazards (run after ssa).

The backward pass replays the kernel's loads from the arrays as they are
after the launch. A load therefore sees what the forward saw only if nothing
in the kernel wrote that element after (or before, in another thread) the
load. This pass allows one pattern -- a single plain store at the top level of
the kernel, and loads of exactly that element after it -- and refuses every
other mix of reads and writes of one array with file:line.
"""
import gast

from .ir import walk_stmts


def _slice_key(node):
    import ast
    return ast.unparse(gast.gast_to_ast(node))


def check(ssa):
    pf = ssa.norm.pf
    loads, writes = {}, {}
    for s in walk_stmts(ssa.body):
        if isinstance(s, gast.Assign):
            t = s.targets[0]
            if isinstance(t, gast.Subscript):
                writes.setdefault(t.value.id, []).append(s)
            if isinstance(s.value, gast.Subscript) and isinstance(s.value.value, gast.Name):
                loads.setdefault(s.value.value.id, []).append(s)
        elif isinstance(s, gast.AugAssign):
            writes.setdefault(s.target.value.id, []).append(s)
    top = list(ssa.body)
    for arr in sorted(set(loads) & set(writes)):
        ws = writes[arr]
        store = ws[0]
        ok = (len(ws) == 1 and isinstance(store, gast.Assign) and store in top)
        for ld in loads[arr]:
            if not ok or ld in top and top.index(ld) < top.index(store) or \
                    _slice_key(ld.value.slice) != _slice_key(store.targets[0].slice) or \
                    _before(ld, store, top):
                raise pf.error(
                    f"array '{arr}' is both read and written in this kernel (line {ld.lineno} reads "
                    f"it, line {ws[0].lineno} writes it): the backward pass would replay the read "
                    "with the overwritten value. Read from one array and write to another "
                    "(only a load of the element just stored, after the store, is allowed)",
                    ld, stage="hazards")


def _before(load, store, top):
    """Whether ``load`` can run before ``store`` (store at top level)."""
    si = top.index(store)
    for k, s in enumerate(top):
        if s is load or any(x is load for x in walk_stmts([s])):
            return k <= si
    return True


def arrays_used(ssa):
    """(names read, names written) among the array parameters."""
    reads, writes = set(), set()
    for s in walk_stmts(ssa.body):
        if isinstance(s, gast.Assign):
            if isinstance(s.targets[0], gast.Subscript):
                writes.add(s.targets[0].value.id)
            v = s.value
            if isinstance(v, gast.Subscript) and isinstance(v.value, gast.Name):
                reads.add(v.value.id)
        elif isinstance(s, gast.AugAssign):
            writes.add(s.target.value.id)
    return reads, writes
