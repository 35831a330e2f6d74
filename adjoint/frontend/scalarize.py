"""Pass scalarize: vector, matrix, quaternion and transform values become scalars.

Expects: a resolved ``ParsedFunction`` (pass parse): calls of vector types and
builtins carry ``Callee("vector", name)``; parameters may be annotated with a
``VectorType`` (``g: ad.vec3``) or an array of them (``ad.array(dtype=ad.vec3)``).
Guarantees: a ``ParsedFunction`` with no vector left: every later pass sees only
floats (gradients, forward mode, CUDA and float32 hold for vectors by construction):

- a local ``v`` of type vec3 is the locals ``v_x, v_y, v_z`` (``m_00 ... m_22`` for
  a mat33, ``t_px ... t_qw`` for a transform; ``<name>_<k>_x`` where the user
  already has a ``v_x``); ``v.x``, ``v[0]``, ``m[1, 2]``, ``m[1]`` (a row) with
  constant indices, and assignments to them, are those locals; with an index known
  only at run time (``v[k]``, ``m[k, j]``), a select chain over them
  (frontend/components.py);
- an array of vectors is a float array with the vector's shape as trailing
  dimensions: ``p[i]`` loads ``p[i, 0], p[i, 1], p[i, 2]``; ``p[i] = v``,
  ``p[i] += v`` and ``ad.atomic_add(p, i, v)`` act componentwise; a component of
  an element is that float element, read or assigned alone (``p[i].x``, ``p[i][k]``
  is ``p[i, k]``, ``p[i][k] = s`` is ``p[i, k] = s``);
- a kernel's vector parameter ``g: ad.vec3`` is a float array of shape (3,),
  read once at the top; a func's vector parameters are scalar parameters
  (``a_x, a_y, a_z``) and its vector results are returned as components (a
  call assigns them to the caller's locals);
- operators and builtins are scalar expressions (vecops.py); ``ParsedFunction.vectors``
  records the vector signature (what a caller needs).

Narrow-int elements load as ints, converted as stored (``a[i] = ad.uint8(v)``). What a
vector cannot do here (a comparison, a ``while`` condition) is a ``TransformError`` naming
the user's file, line and construct. In full: docs/semantics.md, "Vectors become scalars".
"""
import copy
from dataclasses import replace

import gast
import numpy as np

from ..derive.ir import BlockRewriter
from ..runtime.types import NARROW_INTS, ArrayType
from ..runtime.vectypes import VectorType
from .annotations import Param
from .builder import Builder, expr, name, reads
from .places import Places
from .vecexpr import Expressions, Multi, VectorSignature, _c, _locate, _signature, _subscript
from .vecops import V, VectorUseError


def scalarize(pf):
    """``pf`` with every vector value made scalars and every narrow int element an int
    (see the module docstring)."""
    if not _uses_vectors(pf) and not _narrow_arrays(pf):
        return pf
    return _Scalarize(pf).run()


def _narrow_arrays(pf):
    """{array parameter: its dtype's name} for the arrays of ints narrower than int32
    (``ad.array(dtype=ad.uint8)``, also uint32)."""
    return {p.name: p.type.dtype.name for p in pf.params
            if isinstance(p.type, ArrayType) and p.type.dtype in NARROW_INTS}


def _uses_vectors(pf):
    if any(isinstance(p.type, VectorType) or getattr(p.type, "vtype", None) for p in pf.params):
        return True
    for node in gast.walk(pf.node):
        c = getattr(node, "callee", None)
        if c is not None and (c.kind == "vector" or (c.kind == "func" and _signature(c).any)):
            return True
    return False


class _Scalarize(Places, Expressions, BlockRewriter):
    def __init__(self, pf):
        self.pf = pf
        taken = {n.id for n in gast.walk(pf.node) if isinstance(n, gast.Name)}
        self.b = Builder(taken | {p.name for p in pf.params})
        self.vars = {}          # local name -> VectorType
        self.comp = {}          # local name -> its components' names
        self.varrays = {}       # array parameter -> (VectorType, index dimensions)
        self.arrays = {p.name for p in pf.params if isinstance(p.type, ArrayType)}
        self.narrow = _narrow_arrays(pf)    # array -> its dtype's name (uint8, ...)
        self.scalars = set()    # locals assigned a scalar
        self.returns = None
        self.line = pf.node

    def err(self, reason, node=None):
        return self.pf.error(reason, node or self.line, stage="scalarize")

    # -- parameters ------------------------------------------------------------------
    def params(self):
        out, prelude, sig, arrays = [], [], [], []
        for p in self.pf.params:
            vt = p.type if isinstance(p.type, VectorType) else None
            av = getattr(p.type, "vtype", None)
            sig.append(vt)
            arrays.append((av.base, p.type.ndim) if av is not None else None)
            if av is not None:
                self.varrays[p.name] = (av.base, p.type.ndim)
                out.append(Param(p.name, ArrayType(p.type.dtype, p.type.ndim + len(av.shape))))
            elif vt is not None and self.pf.role == "kernel":
                out.append(Param(p.name, ArrayType(vt.dtype, len(vt.shape))))
                names = self.components(p.name, vt)
                for k, n in enumerate(names):
                    idx = np.unravel_index(k, vt.shape)
                    prelude.append(gast.Assign(targets=[name(n, True)],
                                               value=_subscript(p.name, [_c(int(i)) for i in idx]),
                                               type_comment=None))
            elif vt is not None:
                names = self.components(p.name, vt)
                out += [Param(n, np.dtype(vt.dtype)) for n in names]
            else:
                out.append(p)
        return out, prelude, (tuple(sig), tuple(arrays))

    def components(self, var, vt):
        vt = vt.base
        known = self.vars.get(var)
        if known is not None and known is not vt:
            raise self.err(f"'{var}' holds a {known.name} and cannot also hold a {vt.name}")
        if var in self.scalars:
            raise self.err(f"'{var}' holds a scalar and cannot also hold a {vt.name}")
        if var not in self.comp:
            self.comp[var] = self.b.fresh_group(var, vt.comps)
            self.vars[var] = vt
        return self.comp[var]

    def run(self):
        params, prelude, psig = self.params()
        fdef = copy.deepcopy(self.pf.node)
        for s in prelude:
            gast.copy_location(s, fdef)
            _locate(s, fdef)
        body = prelude + self.block(fdef.body)
        fdef.body = body
        fdef.args.args = [gast.Name(id=p.name, ctx=gast.Param(), annotation=None,
                                    type_comment=None) for p in params]
        sig = VectorSignature(psig[0], tuple(self.returns or ()), psig[1])
        return replace(self.pf, node=fdef, params=params, vectors=sig)

    # -- statements ------------------------------------------------------------------
    def block(self, stmts):
        """``BlockRewriter.block``, with the statements each one's expressions need (the
        builder's) before it, located at it."""
        out = []
        for s in stmts:
            self.line = s
            with self.b.block() as pre:
                try:
                    new = self.stmt(s)
                except VectorUseError as exc:
                    raise self.err(str(exc), s) from None
            for n in pre + new:
                _locate(n, s)
            out += pre + new
        return out

    def stmt(self, s):
        if isinstance(s, gast.Assign):
            return self.assign(s.targets[0], s.value, s) if len(s.targets) == 1 else [s]
        if isinstance(s, gast.AugAssign):
            return self.augassign(s)
        if isinstance(s, gast.Expr):
            return self.expr_stmt(s)
        if isinstance(s, gast.If):
            s.test = self.scalar(s.test, "an if condition")
        elif isinstance(s, gast.For):
            s.iter.args = [self.scalar(a, "range()") for a in s.iter.args] \
                if isinstance(s.iter, gast.Call) else s.iter.args
        elif isinstance(s, gast.While):
            with self.b.block() as pre:
                s.test = self.scalar(s.test, "a while condition")
            if pre:
                raise self.err("a vector operation in a while condition is not supported: "
                               "compute it into a variable before the loop and at the end of "
                               "its body", s.test)
        if isinstance(s, (gast.If, gast.For, gast.While)):
            return self.nested(s)       # (its blocks: block() above)
        if isinstance(s, gast.Return) and s.value is not None:
            return self.return_(s)
        return [s]

    def return_(self, s):
        elts = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
        values = [self.ev(e) for e in elts]
        if any(isinstance(v, Multi) for v in values):
            raise self.err("return f(...) of a func with several results: unpack them first", s)
        kinds = [v.vt if isinstance(v, V) else None for v in values]
        if self.returns is not None and list(self.returns) != kinds:
            raise self.err("every return of a func must return the same vector types", s)
        self.returns = kinds
        flat = []
        for v in values:
            flat += [expr(c) for c in v.comps] if isinstance(v, V) else [v]
        s.value = flat[0] if len(flat) == 1 else gast.Tuple(elts=flat, ctx=gast.Load())
        return [s]

    def assign(self, target, value_node, s):
        if isinstance(value_node, gast.Tuple):
            return self.assign_tuple(target, value_node, s)
        value = self.ev(value_node)
        if isinstance(target, gast.Name):
            if isinstance(value, Multi):
                if len(value.values) != 1:
                    raise self.err("this func returns several values: unpack them "
                                   "(a, b = f(...))", s)
                value = value.values[0]
            return self.bind(target.id, value, s)
        if isinstance(target, gast.Tuple):
            if isinstance(value, Multi):
                if len(target.elts) != len(value.values):
                    raise self.err(f"{len(target.elts)} names for {len(value.values)} values", s)
                out = []
                for t, v in zip(target.elts, value.values):
                    if not isinstance(t, gast.Name):
                        raise self.err("tuple assignment targets must be plain names", t)
                    out += self.bind(t.id, v, s)
                return out
            if isinstance(value, V):
                raise self.err(f"cannot unpack a {value.vt.name} into names; use its "
                               "components (v.x, v[0])", s)
            for t in target.elts:
                if isinstance(t, gast.Name) and t.id in self.vars:
                    raise self.err(f"'{t.id}' is a {self.vars[t.id].name}; it cannot be "
                                   "assigned a scalar", t)
            return [gast.Assign(targets=[target], value=value, type_comment=None)]
        if isinstance(value, Multi):
            raise self.err("this func returns several values: unpack them (a, b = f(...))", s)
        return self.store(target, value, s)

    def assign_tuple(self, target, value_node, s):
        """``a, b = x, y`` (a swap: ``a, b = b, a``). Of scalars only, it stays as written
        (pass normalize gives it Python's meaning); with a vector among the values, each
        value is first copied into fresh names (every value is read before any name is
        assigned), then each name is bound to its copy."""
        if not isinstance(target, gast.Tuple) or len(target.elts) != len(value_node.elts) \
                or not all(isinstance(t, gast.Name) for t in target.elts):
            raise self.err("a tuple of values is assigned to as many plain names "
                           "(a, b = x, y)", s)
        values = [self.ev(e) for e in value_node.elts]
        if any(isinstance(v, Multi) for v in values):
            raise self.err("this func returns several values: unpack them first "
                           "(a, b = f(...))", s)
        if not any(isinstance(v, V) for v in values):
            for t in target.elts:
                if t.id in self.vars:
                    raise self.err(f"'{t.id}' is a {self.vars[t.id].name}; it cannot be "
                                   "assigned a scalar", t)
            self.scalars.update(t.id for t in target.elts)
            return [gast.Assign(targets=[target], value=gast.Tuple(
                elts=[expr(v) for v in values], ctx=gast.Load()), type_comment=None)]
        held = []
        for v in values:
            if isinstance(v, V):
                held.append(self.b.atoms(v, force=True))
            elif isinstance(v, (float, gast.Constant)):
                held.append(v)
            else:
                copy_ = self.b.fresh("t")
                self.b.assign(copy_, v)
                held.append(name(copy_))
        out = []
        for t, v in zip(target.elts, held):
            out += self.bind(t.id, v, s)
        return out

    def bind(self, var, value, s):
        if isinstance(value, V):
            if var in self.arrays:
                raise self.err(f"cannot assign to the array parameter '{var}'", s)
            names = self.components(var, value.vt)
            comps = value.comps
            if any(names[j] in reads(c) for i, c in enumerate(comps) for j in range(i)):
                comps = self.b.atoms(V(value.vt, [expr(c) for c in comps]), force=True).comps
            return [gast.Assign(targets=[name(n, True)], value=expr(c), type_comment=None)
                    for n, c in zip(names, comps)]
        if var in self.vars:
            raise self.err(f"'{var}' is a {self.vars[var].name}; it cannot be assigned a "
                           "scalar", s)
        self.scalars.add(var)
        return [gast.Assign(targets=[name(var, True)], value=expr(value), type_comment=None)]

    def narrowed(self, arr, value, aug, s):
        """A value stored into the narrow int array ``arr``: converted as Warp (C) converts,
        ``ad.uint8(value)``, so every backend stores the same wrapped int."""
        if aug is not None:
            raise self.err(f"'{arr}' is an array of {self.narrow[arr]}: it is stored into "
                           "(=), not accumulated into (+=, atomics), which int32 and int64 "
                           "arrays are", s)
        return self.b.call(self.narrow[arr], value)

    def augassign(self, s):
        t = s.target
        if isinstance(t, gast.Name):
            if t.id in self.vars:
                binop = gast.BinOp(left=name(t.id), op=s.op, right=s.value)
                return self.assign(name(t.id, True), binop, s)
            value = self.ev(s.value)
            if isinstance(value, V):
                raise self.err(f"'{t.id}' is a scalar; it cannot be incremented by a "
                               f"{value.vt.name}", s)
            s.value = value
            return [s]
        ref = self.place(t)
        value = self.ev(s.value)
        if ref[0] == "dynamic":
            return self.store_dynamic(ref, value, s.op, s)
        if ref[0] == "local":
            current = V(ref[2], [name(n) for n in ref[1]]) if ref[2] else name(ref[1][0])
            return self.store(t, self.binop(s.op, current, value, s), s)
        return self.store(t, value, s, aug=s.op)

    def expr_stmt(self, s):
        call = s.value
        callee = getattr(call, "callee", None)
        if callee is None or not isinstance(call, gast.Call):
            return [s]
        if callee.kind == "atomic" and call.args and isinstance(call.args[0], gast.Name) \
                and call.args[0].id in self.varrays:
            arr = call.args[0].id
            vt, nd = self.varrays[arr]
            idx = [self.scalar(e, "an index") for e in call.args[1:-1]]
            if len(idx) != nd:
                raise self.err(f"{callee.name}({arr}, ...): '{arr}' is an array of {vt.name} "
                               f"with {nd} index dimension(s); give {nd} indices and a "
                               f"{vt.name}", call)
            value = self.ev(call.args[-1])
            self.expect(value, vt, s)
            out = []
            for k, c in enumerate(value.comps):
                where = [_c(int(i)) for i in np.unravel_index(k, vt.shape)]
                node = gast.Call(func=copy.deepcopy(call.func),
                                 args=[name(arr)] + copy.deepcopy(idx) + where + [expr(c)],
                                 keywords=[])
                node.callee = callee
                out.append(gast.Expr(value=node))
            return out
        if callee.kind == "atomic" and call.args and isinstance(call.args[0], gast.Name) \
                and call.args[0].id in self.narrow:
            self.narrow_atomic(call, s)
            return [s]
        if callee.kind == "print":
            args = []
            for a in call.args:
                v = self.ev(a)
                args += [expr(c) for c in v.comps] if isinstance(v, V) else [v]
            call.args = args
            return [s]
        v = self.ev(call)
        if isinstance(v, (V, Multi)):
            return []       # a vector computed and dropped: nothing to do
        s.value = v
        return [s]

    def narrow_atomic(self, call, s):
        """An atomic on a narrow int array: only a uint32's bits (Warp's flags), the value
        wrapped to 32 bits."""
        arr, callee = call.args[0].id, call.callee
        if callee.name in ("atomic_and", "atomic_or", "atomic_xor") and \
                self.narrow[arr] == "uint32":
            call.args[-1] = expr(self.narrowed(arr, self.ev(call.args[-1]), None, s))
            return
        self.narrowed(arr, None, callee.name, s)

    def atomic_value(self, call):
        """The value an atomic returns (Warp's: the element's old value), of an array of
        scalars; its indices and value scalars."""
        arr = call.args[0].id
        if arr in self.varrays:
            raise self.err(f"the old value {call.callee.name}() returns of '{arr}', an array "
                           f"of {self.varrays[arr][0].name}, is not supported: call it as a "
                           f"statement, {call.callee.name}({arr}, i, v)", call)
        call.args = [call.args[0]] + [self.scalar(a, f"{call.callee.name}()")
                                      for a in call.args[1:]]
        if arr in self.narrow:
            self.narrow_atomic(call, self.line)
        return call

    # -- expressions -----------------------------------------------------------------

