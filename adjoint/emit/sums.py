"""Scalar replacement of the privatize plan's one-element accumulations.

Expects: a lowered CPU thread body (emit/module.py), the arrays its grid's plan
privatizes (derive/parallel.py, mode ``privatize``) and the names that hold the
same value in every thread (the kernel's scalar parameters).
Guarantees: ``find`` names a ``Sum`` for every element ``X[c]`` of a privatized
array ``X`` that the body only ever accumulates into at an index ``c`` every
thread computes alike (integer constants and scalar parameters the body does not
assign: ``loss[0] += v``, ``out[0, k] -= v``), where ``X`` is otherwise only
asked its shape (a bounds check). ``replace`` gives a new body that keeps such a
sum in a local (``loss_at_0 = rt.accumulate(loss_at_0, v)``, which rounds to
the array's dtype after each addition, as the store into ``X`` did), takes the
locals as its last parameters and returns them (a tuple for several) at its end
and at every ``return`` -- a thread stopped by a failed bounds check returns
what it had added before the check. The grid (emit/grid.py) runs each chunk with
the partial sums in registers from zero, stores them once per chunk, and adds the
chunks' sums to ``X[c]`` in chunk order.
Not exact: the terms are added in another order than the plain code's per-thread
adds, so a sum may round otherwise in the last bits (passes.py marks it so).

Why: a store to the chunk's copy of ``X`` in every thread is a loop-carried
memory dependency that LLVM cannot keep in a register (it cannot prove the copy
does not alias the kernel's other arrays), which also blocks vectorizing; and the
copies of neighbouring chunks share a cache line (false sharing).
"""
from dataclasses import dataclass

import gast

from ..derive.ir import const, copy_tree, name, rt_call, target_names, unique, walk_stmts


@dataclass(frozen=True)
class Sum:
    """Element ``array[index]`` (``index``: ints and parameter names), accumulated in
    the local ``local`` of the thread function."""
    array: str
    index: tuple
    local: str

    def element(self, store=False):
        """``array[index]`` as an expression (or a store target)."""
        parts = [const(c) if isinstance(c, int) else name(c) for c in self.index]
        sl = parts[0] if len(parts) == 1 else gast.Tuple(elts=parts, ctx=gast.Load())
        return gast.Subscript(value=name(self.array), slice=sl,
                              ctx=gast.Store() if store else gast.Load())

    def inside(self):
        """The test that ``index`` is inside ``array``'s shape (a thread adds to an
        element outside only after a failed bounds check stopped it: never)."""
        tests = []
        for k, c in enumerate(self.index):
            size = gast.Subscript(value=gast.Attribute(value=name(self.array), attr="shape",
                                                       ctx=gast.Load()),
                                  slice=const(k), ctx=gast.Load())
            if isinstance(c, int):
                tests.append(gast.Compare(left=const(c), ops=[gast.Lt()], comparators=[size])
                             if c >= 0 else gast.Constant(value=False, kind=None))
            else:
                tests.append(gast.Compare(left=const(0), ops=[gast.LtE(), gast.Lt()],
                                          comparators=[name(c), size]))
        return tests[0] if len(tests) == 1 else gast.BoolOp(op=gast.And(), values=tests)


def _index(sl, invariant):
    """The index ``sl`` as a tuple of ints and names, when every component is the same
    in every thread (an integer constant or a name of ``invariant``), else None."""
    out = []
    for e in sl.elts if isinstance(sl, gast.Tuple) else [sl]:
        if isinstance(e, gast.Constant) and isinstance(e.value, int) and \
                not isinstance(e.value, bool):
            out.append(e.value)
        elif isinstance(e, gast.Name) and e.id in invariant:
            out.append(e.id)
        else:
            return None
    return tuple(out)


def accumulated(s, arrays):
    """The target ``X[c]`` of a ``X[c] += v`` / ``X[c] -= v`` statement into one of
    ``arrays`` (not an atomic min or max), else None."""
    if type(s) is not gast.AugAssign or not isinstance(s.op, (gast.Add, gast.Sub)):
        return None
    t = s.target
    if isinstance(t, gast.Subscript) and isinstance(t.value, gast.Name) and \
            t.value.id in arrays:
        return t
    return None


def _accumulation(s, arrays, invariant):
    """(array, index) of a ``X[c] += v`` / ``X[c] -= v`` statement, else None."""
    t = accumulated(s, arrays)
    index = None if t is None else _index(t.slice, invariant)
    return None if index is None else (t.value.id, index)


def straight(body):
    """Whether ``body`` (a thread body, before ``replace``) is straight-line code: no
    loop and no ``return`` (a failed bounds check's, a kernel's own): ``if`` blocks
    only. LLVM can then vectorize a loop of such threads (if-converting the blocks), and
    the grid runs a chunk's threads in blocks whose sums it adds in lanes
    (emit/grid.py ``_in_lanes``); a thread that may stop early or loops is not
    vectorized, and the blocks only cost (about 12% of the springs forward, whose
    gathers are checked), so its chunk carries the sums from thread to thread."""
    return not any(isinstance(s, (gast.For, gast.While, gast.Return)) for s in walk_stmts(body))


def find(body, private, scalars, taken):
    """The ``Sum`` of every element of the arrays ``private`` that ``body`` only
    accumulates into at a thread-invariant index (``scalars``: the kernel's scalar
    parameters; those the body assigns are not invariant), in order of first use;
    ``taken``: names the locals must not reuse."""
    stmts = list(walk_stmts(body))
    assigned = set()
    for s in stmts:
        assigned.update(target_names(s))
        if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Name):
            assigned.add(s.target.id)
    invariant = set(scalars) - assigned
    arrays = set(private)
    found = {}
    sanctioned = set()       # ids of the Name nodes of accepted accumulations
    for s in stmts:
        acc = _accumulation(s, arrays, invariant)
        if acc is not None:
            found.setdefault(acc, None)
            sanctioned.add(id(s.target.value))
    bad = set()
    for s in stmts:
        for node in _own_nodes(s):
            if isinstance(node, gast.Attribute) and node.attr == "shape" and \
                    isinstance(node.value, gast.Name):
                sanctioned.add(id(node.value))
        for node in _own_nodes(s):
            if isinstance(node, gast.Name) and node.id in arrays and id(node) not in sanctioned:
                bad.add(node.id)
    names = set(taken) | {n.id for s in stmts for n in _own_nodes(s) if isinstance(n, gast.Name)}
    out = []
    for array, index in found:
        if array in bad:
            continue
        local = unique(names, "_".join([f"{array}_at"] + [str(c).replace("-", "m") for c in index]))
        out.append(Sum(array, index, local))
    return out


def _own_nodes(s):
    """The expression nodes of statement ``s`` itself (not of its nested blocks)."""
    out = []
    for fld, child in gast.iter_fields(s):
        if fld in ("body", "orelse"):
            continue
        todo = child if isinstance(child, list) else [child]
        for c in todo:
            if isinstance(c, gast.AST):
                out.extend(gast.walk(c))
    return out


def replace(body, sums):
    """A new ``body`` keeping each of ``sums`` in its local and returning the locals
    (see the module's docstring); ``body`` is left as it was."""
    by_element = {(s.array, s.index): s.local for s in sums}
    arrays = {s.array for s in sums}
    invariant = {c for s in sums for c in s.index if isinstance(c, str)}
    locals_ = [s.local for s in sums]

    def result():
        if len(locals_) == 1:
            return name(locals_[0])
        return gast.Tuple(elts=[name(n) for n in locals_], ctx=gast.Load())

    def block(stmts):
        out = []
        for s in stmts:
            acc = _accumulation(s, arrays, invariant)
            if acc is not None and acc in by_element:
                local = by_element[acc]
                v = s.value if isinstance(s.op, gast.Add) else \
                    gast.UnaryOp(op=gast.USub(), operand=s.value)
                new = gast.Assign(targets=[name(local, store=True)],
                                  value=rt_call("accumulate", name(local), v), type_comment=None)
                new.lineno = getattr(s, "lineno", None)
                out.append(new)
                continue
            if isinstance(s, gast.Return):
                s.value = result()
            for fld in ("body", "orelse"):
                if isinstance(getattr(s, fld, None), list):
                    setattr(s, fld, block(getattr(s, fld)))
            info = getattr(s, "loop", None)
            if info is not None:
                info.cond, info.latch = block(info.cond), block(info.latch)
            out.append(s)
        return out
    new = block(copy_tree(body))
    if not (new and isinstance(new[-1], gast.Return)):
        ret = gast.Return(value=result())
        new.append(ret)
    return new
