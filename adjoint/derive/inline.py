"""Pass inline: a call of a func that takes arrays becomes the func's body.

Expects: a ``Normalized`` function (pass normalize) whose calls carry ``Callee``
records; each func called has been transformed (its ``transformed.norm`` is its
normalized body, with its own such calls already inlined).
Guarantees: no call of a func with an array parameter remains. Each ``t = f(a, arr)``
is replaced by ``f``'s normalized body with

- every local of ``f`` renamed by the caller's namer (``f_x``, ``f_returned``...);
- a copy ``f_x = a`` per scalar parameter (aliasing rules as for any copy);
- each array parameter replaced by the caller's array passed to it (which must be an
  array parameter of the caller with the same dtype and number of dimensions);
- its loops renumbered after the caller's, and its final ``return`` assigning ``t``
  (dropped for a func returning nothing, whose call is a statement: pass fence);
- every statement on the call's line (comments and errors quote the call).

Why inline: the func's loads, stores and atomics are then the caller's own, so every
later pass -- the in-kernel overwrite check, activity, bounds checks, the parallel plans,
the arrays a launch reads and writes (the tape) -- sees them without looking into calls,
and the backward's replay of a call leaves its stores out like any other store. A func
with a custom gradient or JVP keeps its call (its gradient is the user's): it may read
arrays, not write them, and the caller's passes count its array arguments as read at
unknown indices (``custom_call_arrays``).
"""
import copy
from dataclasses import replace

import gast

from ..runtime.structs import struct_params
from .ir import BlockRewriter, assign, name, walk_stmts


def has_array_params(func):
    return any(p.is_array for p in func.transformed.pf.params)


def custom_call_arrays(stmt, arrays):
    """The array arguments (names in ``arrays``) of ``t = f(...)`` when ``f`` is a func with a
    custom gradient or JVP, whose call is kept: the caller's passes count them as arrays
    the call reads at indices they cannot see (hazards, parallel, the tape's reads)."""
    if isinstance(stmt, gast.Assign) and isinstance(stmt.value, gast.Call):
        callee = getattr(stmt.value, "callee", None)
        if callee is not None and callee.kind == "func":
            return [a.id for a in stmt.value.args if isinstance(a, gast.Name) and a.id in arrays]
    return []


def _custom(func):
    return func.custom_grad is not None or getattr(func, "custom_jvp", None) is not None


def inline(norm):
    """``norm`` with every call of a func taking arrays replaced by its body (see the
    module); the same object when there is none."""
    arrays = {p.name: p.type for p in norm.pf.params if p.is_array}
    for s in walk_stmts(norm.body):
        if _inlined_call(s) is None and isinstance(s, gast.Assign) and \
                isinstance(s.value, gast.Call) and s.value.callee.kind == "func":
            _check_kept_call(norm.pf, s, arrays)
    if not any(_inlined_call(s) for s in walk_stmts(norm.body)):
        return norm
    namer = copy.deepcopy(norm.namer)
    uids = [s.loop.uid for s in walk_stmts(norm.body) if isinstance(s, (gast.For, gast.While))]
    state = _State(norm.pf, namer, max(uids, default=-1) + 1)
    body = state.block(norm.body)
    return replace(norm, body=body, namer=namer)


def _inlined_call(s):
    """The func a statement ``t = f(...)`` calls, when it is one to inline."""
    if isinstance(s, gast.Assign) and isinstance(s.value, gast.Call):
        callee = getattr(s.value, "callee", None)
        if callee is not None and callee.kind == "func" and callee.part == "forward" and \
                has_array_params(callee.target) and not _custom(callee.target):
            return callee.target
    return None


def _check_kept_call(pf, s, arrays):
    """A call kept as a call (a func with a custom gradient or JVP) passes arrays only to
    array parameters, of their dtype and ndim, and the func only reads them: the
    backward's replay calls its forward again, and the custom adjoint owns its gradient
    (``def g(<f's params>, <adj_ of each float array parameter>, adj_ret)``)."""
    func = s.value.callee.target
    if _custom(func) and any(cls for _, cls in struct_params(func.pyfunc)):
        raise pf.error(f"func '{func.name}' takes a struct and has a custom gradient or JVP: "
                       "not supported (pass the fields it needs)", s, stage="inline")
    params = func.transformed.pf.params
    for p, a in zip(params, s.value.args):
        passed = a.id if isinstance(a, gast.Name) and a.id in arrays else None
        if passed is not None and not p.is_array:
            raise pf.error(f"func '{func.name}' takes a number as '{p.name}', not the array "
                           f"'{passed}'", s, stage="inline")
        if p.is_array and passed is None:
            raise pf.error(f"func '{func.name}' takes an array as '{p.name}': pass an array "
                           "parameter of this kernel or func", s, stage="inline")
        if passed is not None and arrays[passed] != p.type:
            raise pf.error(f"func '{func.name}' takes '{p.name}' as {p.type!r}, but "
                           f"'{passed}' is {arrays[passed]!r}", s, stage="inline")
    if func.transformed.writes:
        raise pf.error(f"func '{func.name}' has a custom gradient or JVP and writes the array "
                       f"'{sorted(func.transformed.writes)[0]}': a func with @ad.func_grad or "
                       "@ad.func_jvp may read arrays but not write them", s, stage="inline")


class _State(BlockRewriter):
    def __init__(self, pf, namer, next_uid):
        self.pf, self.namer, self.next_uid = pf, namer, next_uid
        self.arrays = {p.name: p.type for p in pf.params if p.is_array}

    def stmt(self, s):
        func = _inlined_call(s)
        return self.call(s, func) if func is not None else self.nested(s)

    def err(self, reason, node):
        return self.pf.error(reason, node, stage="inline")

    def call(self, s, func):
        tr = func.transformed
        line = s.lineno
        body = copy.deepcopy(tr.norm.body)
        params = tr.pf.params
        if len(s.value.args) != len(params):
            raise self.err(f"func '{func.name}' takes {len(params)} argument(s), not "
                           f"{len(s.value.args)}", s)
        rename, pre = {}, []
        for p, a in zip(params, s.value.args):
            passed = a.id if isinstance(a, gast.Name) and a.id in self.arrays else None
            if p.is_array:
                if passed is None:
                    raise self.err(f"func '{func.name}' takes an array as '{p.name}': pass an "
                                   "array parameter of this kernel or func", s)
                if self.arrays[passed] != p.type:
                    raise self.err(f"func '{func.name}' takes '{p.name}' as {p.type!r}, but "
                                   f"'{passed}' is {self.arrays[passed]!r}", s)
                rename[p.name] = passed
            elif passed is not None:
                raise self.err(f"func '{func.name}' takes a number as '{p.name}', not the "
                               f"array '{passed}'", s)
        local = {p.name for p in params if not p.is_array}
        for st in walk_stmts(body):
            for n in gast.walk(st):
                if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                    local.add(n.id)
            if isinstance(st, (gast.For, gast.While)) and st.loop.break_flag:
                local.add(st.loop.break_flag)
        for v in sorted(local):
            rename[v] = self.namer.fresh(f"{func.name}_{v}")
        for p, a in zip(params, s.value.args):
            if not p.is_array:
                pre.append(assign(rename[p.name], copy.deepcopy(a), line))
        _Rename(rename).apply(body)
        offset = self.next_uid
        top = 0
        for st in walk_stmts(body):
            for n in gast.walk(st):
                if hasattr(n, "lineno"):
                    if getattr(n, "inlined_from", None) is None:    # (innermost func kept)
                        n.inlined_from = (func.name, tr.pf.source, n.lineno)
                    n.lineno = line
            if isinstance(st, (gast.For, gast.While)):
                top = max(top, st.loop.uid + 1)
                st.loop.uid += offset
                if st.loop.break_flag:
                    st.loop.break_flag = rename[st.loop.break_flag]
        self.next_uid += top
        ret = body.pop()
        assert isinstance(ret, gast.Return), "a normalized func ends with its return"
        vals = ret.value.elts if isinstance(ret.value, gast.Tuple) else [ret.value]
        t = s.targets[0]
        targets = t.elts if isinstance(t, gast.Tuple) else [t]
        post = [assign(name(e.id, store=True), v, line) for e, v in zip(targets, vals)]
        if tr.norm.n_returns == 0:      # (its call was a statement: nothing reads ``t``)
            post = []
        for f in tr.pf.funcs:
            if f not in self.pf.funcs:
                self.pf.funcs.append(f)
        return pre + body + post


class _Rename:
    """Rename the Name nodes of statements (every node once; loop conditions too)."""

    def __init__(self, mapping):
        self.mapping = mapping
        self.seen = set()

    def apply(self, stmts):
        for st in walk_stmts(stmts):
            for n in gast.walk(st):
                if id(n) in self.seen:
                    continue
                self.seen.add(id(n))
                if isinstance(n, gast.Name) and n.id in self.mapping:
                    n.id = self.mapping[n.id]
                if isinstance(n, gast.Call):        # the callee's name is no local
                    self.seen.add(id(n.func))
