"""Pass scalarize: vector, matrix, quaternion and transform values become scalars.

Expects: a resolved ``ParsedFunction`` (pass parse): calls of vector types and
builtins carry ``Callee("vector", name)``; parameters may be annotated with a
``VectorType`` (``g: ad.vec3``) or an array of them (``ad.array(dtype=ad.vec3)``).
Guarantees: a ``ParsedFunction`` with no vector left, for pass fence and every
later pass, which therefore see only floats (so gradients, forward mode, the
CUDA and float32 lowerings hold for vectors by construction):

- a local ``v`` of type vec3 is the locals ``v_x, v_y, v_z`` (``m_00 ... m_22`` for
  a mat33, ``t_px ... t_qw`` for a transform; ``<name>_<k>_x`` where the user
  already has a ``v_x``); ``v.x``, ``v[0]``, ``m[1, 2]``, ``m[1]`` (a row) with
  constant indices, and assignments to them, are those locals;
- an array of vectors is a float array with the vector's shape as trailing
  dimensions: ``p[i]`` loads ``p[i, 0], p[i, 1], p[i, 2]``; ``p[i] = v``,
  ``p[i] += v`` and ``ad.atomic_add(p, i, v)`` act componentwise;
- a kernel's vector parameter ``g: ad.vec3`` is a float array of shape (3,),
  read once at the top; a func's vector parameters are scalar parameters
  (``a_x, a_y, a_z``) and its vector results are returned as components (a
  call assigns them to the caller's locals);
- operators and builtins are scalar expressions (vecops.py); ``ParsedFunction.
  vectors`` records the vector signature (what a caller needs).

Anything else a vector cannot do here -- a component index known only at run
time, a vector compared, a vector in a ``while`` condition -- is a
``TransformError`` naming the user's file and line and the construct.
"""
import copy
from dataclasses import dataclass, replace

import gast
import numpy as np

from ..runtime.types import ArrayType
from ..runtime.vectypes import ALL, VectorType, vec_of
from . import vecops as ops
from .builder import Builder, expr, name, reads
from .parse import Param
from .vecops import V, VectorUseError


@dataclass(frozen=True)
class VectorSignature:
    """A func's vector parameters and results (None for a scalar): what a call needs
    to pass components and receive them."""
    params: tuple
    returns: tuple

    @property
    def any(self):
        return any(self.params) or any(self.returns)


class _Multi:
    """Several values (a func's results), to be unpacked by an assignment."""

    def __init__(self, values):
        self.values = values


def scalarize(pf):
    """``pf`` with every vector value made scalars (see the module docstring)."""
    if not _uses_vectors(pf):
        return pf
    return _Scalarize(pf).run()


def _uses_vectors(pf):
    if any(isinstance(p.type, VectorType) or getattr(p.type, "vtype", None) for p in pf.params):
        return True
    for node in gast.walk(pf.node):
        c = getattr(node, "callee", None)
        if c is not None and (c.kind == "vector" or (c.kind == "func" and _signature(c).any)):
            return True
    return False


def _signature(callee):
    sig = callee.target.transformed.pf.vectors
    return sig or VectorSignature((), ())


BINOPS = {gast.Add: "+", gast.Sub: "-", gast.Mult: "*", gast.Div: "/", gast.MatMult: "@"}


class _Scalarize:
    def __init__(self, pf):
        self.pf = pf
        taken = {n.id for n in gast.walk(pf.node) if isinstance(n, gast.Name)}
        self.b = Builder(taken | {p.name for p in pf.params})
        self.vars = {}          # local name -> VectorType
        self.comp = {}          # local name -> its components' names
        self.varrays = {}       # array parameter -> (VectorType, index dimensions)
        self.arrays = {p.name for p in pf.params if isinstance(p.type, ArrayType)}
        self.scalars = set()    # locals assigned a scalar
        self.returns = None
        self.line = pf.node

    def err(self, reason, node=None):
        return self.pf.error(reason, node or self.line, stage="scalarize")

    # -- parameters ------------------------------------------------------------------
    def params(self):
        out, prelude, sig = [], [], []
        for p in self.pf.params:
            vt = p.type if isinstance(p.type, VectorType) else None
            av = getattr(p.type, "vtype", None)
            sig.append(vt)
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
        return out, prelude, tuple(sig)

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
        sig = VectorSignature(psig, tuple(self.returns or ()))
        return replace(self.pf, node=fdef, params=params, vectors=sig)

    # -- statements ------------------------------------------------------------------
    def block(self, stmts):
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
            s.body, s.orelse = self.block(s.body), self.block(s.orelse)
            return [s]
        if isinstance(s, gast.For):
            s.iter.args = [self.scalar(a, "range()") for a in s.iter.args] \
                if isinstance(s.iter, gast.Call) else s.iter.args
            s.body, s.orelse = self.block(s.body), self.block(s.orelse)
            return [s]
        if isinstance(s, gast.While):
            with self.b.block() as pre:
                s.test = self.scalar(s.test, "a while condition")
            if pre:
                raise self.err("a vector operation in a while condition is not supported: "
                               "compute it into a variable before the loop and at the end of "
                               "its body", s.test)
            s.body, s.orelse = self.block(s.body), self.block(s.orelse)
            return [s]
        if isinstance(s, gast.Return) and s.value is not None:
            return self.return_(s)
        return [s]

    def return_(self, s):
        elts = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
        values = [self.ev(e) for e in elts]
        if any(isinstance(v, _Multi) for v in values):
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
        value = self.ev(value_node)
        if isinstance(target, gast.Name):
            if isinstance(value, _Multi):
                if len(value.values) != 1:
                    raise self.err("this func returns several values: unpack them "
                                   "(a, b = f(...))", s)
                value = value.values[0]
            return self.bind(target.id, value, s)
        if isinstance(target, gast.Tuple):
            if isinstance(value, _Multi):
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
            if isinstance(value_node, gast.Tuple):
                raise self.err("tuple assignment (a, b = x, y) is not supported", s)
            for t in target.elts:
                if isinstance(t, gast.Name) and t.id in self.vars:
                    raise self.err(f"'{t.id}' is a {self.vars[t.id].name}; it cannot be "
                                   "assigned a scalar", t)
            return [gast.Assign(targets=[target], value=value, type_comment=None)]
        if isinstance(value, _Multi):
            raise self.err("this func returns several values: unpack them (a, b = f(...))", s)
        return self.store(target, value, s)

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

    def store(self, target, value, s, aug=None):
        """``target = value`` (``aug``: ``target += value`` with that gast operator) for a
        subscript or attribute target."""
        ref = self.place(target)
        if ref[0] == "array":        # an element of an array of vectors, or of floats
            _, arr, idx, vt = ref
            if vt is None:
                if isinstance(value, V):
                    raise self.err(f"cannot store a {value.vt.name} into an element of the "
                                   f"float array '{arr}'", s)
                return [self.assign_node(_subscript(arr, idx), value, aug)]
            self.expect(value, vt, s)
            return [self.assign_node(_subscript(arr, idx + [_c(int(i)) for i in np.unravel_index(
                k, vt.shape)]), c, aug) for k, c in enumerate(value.comps)]
        _, names, vt = ref               # components of a local vector
        if vt is None:
            if isinstance(value, V):
                raise self.err(f"cannot assign a {value.vt.name} to a component", s)
            return [self.assign_node(name(names[0]), value, aug)]
        self.expect(value, vt, s)
        comps = value.comps
        if aug is None and any(names[j] in reads(c) for i, c in enumerate(comps)
                               for j in range(i)):
            comps = self.b.atoms(V(value.vt, comps), force=True).comps
        return [self.assign_node(name(n), c, aug) for n, c in zip(names, comps)]

    def assign_node(self, target, value, aug):
        target = copy.deepcopy(target)
        target.ctx = gast.Store()
        if aug is None:
            return gast.Assign(targets=[target], value=expr(value), type_comment=None)
        return gast.AugAssign(target=target, op=aug, value=expr(value))

    def expect(self, value, vt, s):
        if not isinstance(value, V) or value.vt is not vt.base:
            got = value.vt.name if isinstance(value, V) else "a scalar"
            raise self.err(f"expected a {vt.base.name} here, got {got}", s)

    def place(self, t):
        """What an assignment target names: ("array", arr, [index atoms], vt or None) or
        ("local", [component names], vt or None)."""
        if isinstance(t, gast.Subscript) and isinstance(t.value, gast.Name) and \
                t.value.id in self.arrays:
            arr = t.value.id
            idx = [self.scalar(e, "an index") for e in _indices(t)]
            if arr in self.varrays:
                vt, nd = self.varrays[arr]
                if len(idx) != nd:
                    raise self.err(f"'{arr}' is an array of {vt.name} with {nd} index "
                                   f"dimension(s), indexed with {len(idx)}: give "
                                   f"{nd}, then take components of the {vt.name}", t)
                return ("array", arr, idx, vt)
            return ("array", arr, idx, None)
        if isinstance(t, (gast.Subscript, gast.Attribute)):
            base = t.value
            if not isinstance(base, gast.Name) or base.id not in self.vars:
                raise self.err("only components of a local vector, matrix or quaternion "
                               "(v[0], v.x, m[i, j], m[i]) can be assigned to", t)
            vt = self.vars[base.id]
            names = self.comp[base.id]
            sel = self.select(V(vt, names), t)
            if isinstance(sel, V):
                return ("local", sel.comps, sel.vt)
            return ("local", [sel], None)
        raise self.err(f"cannot assign to {type(t).__name__.lower()}", t)

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
        if callee.kind == "print":
            args = []
            for a in call.args:
                v = self.ev(a)
                args += [expr(c) for c in v.comps] if isinstance(v, V) else [v]
            call.args = args
            return [s]
        v = self.ev(call)
        if isinstance(v, (V, _Multi)):
            return []       # a vector computed and dropped: nothing to do
        s.value = v
        return [s]

    # -- expressions -----------------------------------------------------------------
    def scalar(self, e, where):
        v = self.ev(e)
        if isinstance(v, (V, _Multi)):
            what = v.vt.name if isinstance(v, V) else "several values"
            raise self.err(f"{where} needs a scalar, not {what}", e)
        return v

    def ev(self, e):
        """A ``V``, a ``_Multi`` or a scalar gast expression for expression ``e``."""
        if isinstance(e, gast.Name):
            if e.id in self.vars:
                return V(self.vars[e.id], [name(n) for n in self.comp[e.id]])
            if e.id in self.varrays:
                raise self.err(f"'{e.id}' is an array of {self.varrays[e.id][0].name}: index "
                               f"it ({e.id}[i])", e)
            return e
        if isinstance(e, gast.Constant):
            return e
        if isinstance(e, gast.Attribute):
            if e.attr == "shape":
                return e
            return self.select(self.ev(e.value), e)
        if isinstance(e, gast.Subscript):
            return self.subscript(e)
        if isinstance(e, gast.Call):
            return self.call(e)
        if isinstance(e, gast.BinOp):
            return self.binop(e.op, self.ev(e.left), self.ev(e.right), e)
        if isinstance(e, gast.UnaryOp):
            v = self.ev(e.operand)
            if isinstance(v, V):
                if isinstance(e.op, gast.USub):
                    return V(v.vt, [self.b.neg(c) for c in v.comps])
                if isinstance(e.op, gast.UAdd):
                    return v
                raise self.err(f"'{type(e.op).__name__}' of a {v.vt.name} is not supported", e)
            e.operand = v
            return e
        if isinstance(e, gast.Compare):
            e.left = self.scalar(e.left, "a comparison")
            e.comparators = [self.scalar(c, "a comparison") for c in e.comparators]
            return e
        if isinstance(e, gast.BoolOp):
            first = self.scalar(e.values[0], "'and'/'or'")
            rest = []
            for v in e.values[1:]:
                with self.b.block() as pre:
                    rest.append(self.scalar(v, "'and'/'or'"))
                if pre:
                    raise self.err("a vector operation after 'and'/'or' is not supported: "
                                   "compute it into a variable first", v)
            e.values = [first] + rest
            return e
        if isinstance(e, gast.IfExp):
            return self.ifexp(e)
        if isinstance(e, gast.Tuple):
            raise self.err("tuples are only supported in assignments and returns", e)
        return e

    def ifexp(self, e):
        test = self.scalar(e.test, "a condition")
        with self.b.block() as body_pre:
            body = self.ev(e.body)
        with self.b.block() as else_pre:
            orelse = self.ev(e.orelse)
        if not body_pre and not else_pre and not isinstance(body, V) and \
                not isinstance(orelse, V):
            e.test, e.body, e.orelse = test, body, orelse
            return e
        if isinstance(body, V) != isinstance(orelse, V) or (
                isinstance(body, V) and body.vt is not orelse.vt):
            raise self.err("both sides of 'a if c else b' must have the same type", e)
        if isinstance(body, V):
            names = self.b.fresh_group("sel", body.vt.comps)
            out = V(body.vt, [name(n) for n in names])
        else:
            names = [self.b.fresh("sel")]
            out = name(names[0])
        for pre, v in ((body_pre, body), (else_pre, orelse)):
            comps = v.comps if isinstance(v, V) else [v]
            pre += [gast.Assign(targets=[name(n, True)], value=expr(c), type_comment=None)
                    for n, c in zip(names, comps)]
        self.b.emit_if(test, body_pre, else_pre)
        return out

    def select(self, v, node):
        """A component or row of ``v`` by ``node`` (``v.x``, ``v[0]``, ``m[i, j]``, ``m[i]``):
        a component's expression, or a ``V`` (a row)."""
        if not isinstance(v, V):
            raise self.err("only arrays, vectors, matrices and quaternions can be indexed, "
                           "and only vectors and quaternions have .x .y .z .w", node)
        if isinstance(node, gast.Attribute):
            comps = v.vt.comps if v.vt.kind in ("vec", "quat") else ()
            if node.attr not in comps:
                raise self.err(f"a {v.vt.name} has no component '.{node.attr}'", node)
            return v.comps[comps.index(node.attr)]
        idx = _indices(node)
        ks = []
        for i in idx:
            if not (isinstance(i, gast.Constant) and isinstance(i.value, int) and
                    not isinstance(i.value, bool)):
                raise self.err(f"a {v.vt.name} is indexed with a constant integer "
                               "(a component index known only at run time is not supported)",
                               node)
            ks.append(i.value)
        shape = v.vt.shape
        if len(ks) > len(shape) or any(not 0 <= k < n for k, n in zip(ks, shape)):
            raise self.err(f"index {tuple(ks) if len(ks) > 1 else ks[0]} is out of range for a "
                           f"{v.vt.name} (shape {shape})", node)
        if len(ks) == len(shape):
            return v.comps[int(np.ravel_multi_index(ks, shape))]
        row = ks[0] * shape[1]
        return V(vec_of(shape[1]), v.comps[row:row + shape[1]])

    def subscript(self, e):
        base = e.value
        if isinstance(base, gast.Attribute) and base.attr == "shape":
            return e
        if isinstance(base, gast.Name) and base.id in self.arrays:
            idx = [self.scalar(i, "an index") for i in _indices(e)]
            if base.id not in self.varrays:
                return _subscript(base.id, idx)
            vt, nd = self.varrays[base.id]
            if len(idx) != nd:
                raise self.err(f"'{base.id}' is an array of {vt.name} with {nd} index "
                               f"dimension(s), indexed with {len(idx)}: give {nd}, then take "
                               f"components ({base.id}[i].x, {base.id}[i][0])", e)
            comps = [_subscript(base.id, copy.deepcopy(idx) + [_c(int(k)) for k in
                                                                np.unravel_index(j, vt.shape)])
                     for j in range(vt.size)]
            return V(vt, comps)
        return self.select(self.ev(base), e)

    def binop(self, op, left, right, node=None):
        sym = BINOPS.get(type(op))
        lv, rv = isinstance(left, V), isinstance(right, V)
        if not lv and not rv:
            if sym == "@":
                raise self.err("operator '@' takes matrices and vectors", node)
            return gast.BinOp(left=expr(left), op=op, right=expr(right))
        if isinstance(left, _Multi) or isinstance(right, _Multi):
            raise self.err("this func returns several values: unpack them first", node)
        b = self.b
        kinds = (left.vt.kind if lv else "scalar", right.vt.kind if rv else "scalar")
        if sym in ("+", "-") and lv and rv:
            return ops.cw(b, b.add if sym == "+" else b.sub, left, right)
        if sym == "*" and lv != rv:
            return ops.scale(b, left, right) if lv else ops.scale(b, right, left)
        if sym == "/" and lv and not rv:
            return ops.scale(b, left, right, op=b.div)
        if sym in ("*", "@") and lv and rv:
            if kinds[0] == "mat" and kinds[1] == "vec":
                return ops.matvec(b, left, right)
            if kinds[0] == "vec" and kinds[1] == "mat":
                return ops.vecmat(b, left, right)
            if kinds == ("mat", "mat"):
                return ops.matmat(b, left, right)
            if kinds == ("quat", "quat") and sym == "*":
                return ops.quat_mul(b, left, right)
            if kinds == ("transform", "transform") and sym == "*":
                return ops.transform_multiply(b, left, right)
        names = [left.vt.name if lv else "a scalar", right.vt.name if rv else "a scalar"]
        hint = " (use ad.cw_mul for a componentwise product)" if kinds == ("vec", "vec") else ""
        raise VectorUseError(f"operator '{sym or type(op).__name__}' of {names[0]} and "
                             f"{names[1]} is not supported{hint}")

    def call(self, e):
        callee = getattr(e, "callee", None)
        if callee is None:
            return e
        if callee.kind == "vector":
            return self.vector_call(e, callee.name)
        if callee.kind == "func":
            return self.func_call(e, callee)
        e.args = [self.scalar(a, f"{callee.name}()") for a in e.args]
        return e

    def func_call(self, e, callee):
        sig = _signature(callee)
        args = []
        for k, a in enumerate(e.args):
            v = self.ev(a)
            want = sig.params[k] if k < len(sig.params) else None
            if want is not None:
                self.expect(v, want, e)
                args += [expr(c) for c in v.comps]
            elif isinstance(v, (V, _Multi)):
                raise self.err(f"argument {k + 1} of '{callee.name}' is a scalar, not a "
                               f"{v.vt.name if isinstance(v, V) else 'tuple'}", a)
            else:
                args.append(v)
        e.args = args
        if not any(sig.returns):
            return e
        values, targets = [], []
        for vt in sig.returns:
            if vt is None:
                n = self.b.fresh("ret")
                targets.append(n)
                values.append(name(n))
            else:
                names = self.b.fresh_group(callee.name, vt.comps)
                targets += names
                values.append(V(vt, [name(n) for n in names]))
        self.b.emit(gast.Assign(targets=[gast.Tuple(elts=[name(n, True) for n in targets],
                                                    ctx=gast.Store())] if len(targets) > 1
                                else [name(targets[0], True)], value=e, type_comment=None))
        return values[0] if len(values) == 1 else _Multi(values)

    def vector_call(self, e, fname):
        b = self.b
        kw = {k.arg: k.value for k in e.keywords}
        args = [self.ev(a) for a in e.args]
        if any(isinstance(a, _Multi) for a in args):
            raise self.err(f"{fname}(): a func's several results must be unpacked first", e)
        if fname in ALL:
            return self.construct(ALL[fname], args, kw, e)
        if fname == "identity":
            n = kw.get("n", e.args[0] if e.args else None)
            if not (isinstance(n, gast.Constant) and n.value in (2, 3, 4)):
                raise self.err("ad.identity(n=...) needs a constant n of 2, 3 or 4", e)
            return ops.identity(b, n.value)
        if kw and set(kw) - {"dtype"}:
            raise self.err(f"{fname}() takes no keyword arguments but dtype", e)
        if fname in ("quat_identity", "transform_identity"):
            return getattr(ops, fname)(b)
        if fname == "mul":
            if len(args) != 2:
                raise self.err("ad.mul() takes two arguments", e)
            return self.binop(gast.Mult(), *args, e)
        if fname in ("cw_mul", "cw_div"):
            if len(args) != 2:
                raise self.err(f"{fname}() takes two arguments", e)
            return ops.cw(b, b.mul if fname == "cw_mul" else b.div, *args)
        if fname == "transform_get_translation":
            return ops.translation(ops._tf(args[0], fname))
        if fname == "transform_get_rotation":
            return ops.rotation(ops._tf(args[0], fname))
        fn = getattr(ops, fname, None)
        if fn is None:
            raise self.err(f"ad.{fname} is not supported inside kernels yet", e)
        try:
            return fn(b, *args)
        except TypeError:
            raise self.err(f"wrong number of arguments to ad.{fname}()", e) from None

    def construct(self, vt, args, kw, e):
        if set(kw) - {"dtype"}:
            raise self.err(f"ad.{vt.name}() takes no keyword arguments but dtype", e)
        vt = vt.base
        if not args:
            return V(vt, [_c(0.0)] * vt.size)
        if len(args) == 1 and not isinstance(args[0], V):
            s = self.b.atom(args[0], "s")
            return V(vt, [s] * vt.size)
        comps = []
        for a in args:
            comps += a.comps if isinstance(a, V) else [a]
        if vt.kind == "mat" and any(isinstance(a, V) for a in args):
            raise self.err(f"ad.{vt.name}() from vectors is not supported (Warp has read them "
                           "as columns, numpy reads rows): pass the components row by row", e)
        if len(comps) != vt.size:
            raise self.err(f"ad.{vt.name}() takes {vt.size} components (or one value for "
                           f"all), got {len(comps)}", e)
        return V(vt, comps)


def _c(value):
    return gast.Constant(value=value, kind=None)


def _indices(sub):
    return list(sub.slice.elts) if isinstance(sub.slice, gast.Tuple) else [sub.slice]


def _subscript(arr, idx):
    sl = idx[0] if len(idx) == 1 else gast.Tuple(elts=list(idx), ctx=gast.Load())
    return gast.Subscript(value=name(arr), slice=sl, ctx=gast.Load())


def _locate(node, where):
    for n in gast.walk(node):
        if isinstance(n, (gast.stmt, gast.expr)) and getattr(n, "lineno", None) is None:
            n.lineno = where.lineno
            n.col_offset = getattr(where, "col_offset", 0)
            n.end_lineno = getattr(where, "end_lineno", where.lineno)
            n.end_col_offset = getattr(where, "end_col_offset", 0)

