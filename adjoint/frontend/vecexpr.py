"""The expression half of pass scalarize (frontend/scalarize.py): what an expression
is once its vectors are components.

``Expressions.ev(e)`` gives a ``V`` (a vector's components), a ``Multi`` (a func's
several results, for an assignment to unpack) or a scalar gast expression; the
statements it needs first (temporaries, a func call's unpacking, the branches of
a conditional vector) go to the ``Builder``. Builtins: vecops, vecframes, vecrot.py.
"""
import ast
import copy
from dataclasses import dataclass

import gast
import numpy as np

from ..runtime.vectypes import ALL, ConstructorError, bind, check_keywords, mat_of, vec_of
from . import components
from . import vecops as ops
from . import vecframes, vecrot
from .builder import expr, name
from .vecops import V, VectorUseError


@dataclass(frozen=True)
class VectorSignature:
    """A func's vector parameters and results (None for a scalar): what a call needs
    to pass components and receive them; ``arrays``: for each parameter that is an array
    of vectors, (its vector type's ``base``, its ndim) (None for any other), which an
    array passed to it must match."""
    params: tuple
    returns: tuple
    arrays: tuple = ()

    @property
    def any(self):
        return any(self.params) or any(self.returns)


class Multi:
    """Several values (a func's results), to be unpacked by an assignment."""

    def __init__(self, values):
        self.values = values


def _signature(callee):
    sig = callee.target.transformed.pf.vectors
    return sig or VectorSignature((), ())


BINOPS = {gast.Add: "+", gast.Sub: "-", gast.Mult: "*", gast.Div: "/", gast.MatMult: "@"}


class Expressions:
    """Mixin of pass scalarize's ``_Scalarize``: it provides ``b`` (a ``Builder``),
    ``err``, ``expect``, ``vars``/``comp`` (local vectors and their component names),
    ``arrays``, ``varrays`` and ``narrow`` (array parameters, those of vectors and those of
    narrow ints)."""

    def scalar(self, e, where):
        v = self.ev(e)
        if isinstance(v, (V, Multi)):
            what = v.vt.name if isinstance(v, V) else "several values"
            raise self.err(f"{where} needs a scalar, not {what}", e)
        return v

    def ev(self, e):
        """A ``V``, a ``Multi`` or a scalar gast expression for expression ``e``."""
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
        """A component or row of ``v`` by ``node`` (``v.x``, ``v[0]``, ``m[i, j]``, ``m[i]``;
        an index known only at run time: frontend/components.py): a component's
        expression, or a ``V`` (a row)."""
        if not isinstance(v, V):
            raise self.err("only arrays, vectors, matrices and quaternions can be indexed, "
                           "only vectors and quaternions have .x .y .z .w, and only "
                           "transforms .p .q", node)
        if isinstance(node, gast.Attribute):
            if v.vt.kind == "transform" and node.attr in ("p", "q"):    # Warp's t.p, t.q
                return (vecframes.translation if node.attr == "p" else vecframes.rotation)(v)
            comps = v.vt.comps if v.vt.kind in ("vec", "quat") else ()
            if node.attr not in comps:
                parts = " (its parts: .p, the translation, and .q, the rotation)" \
                    if v.vt.kind == "transform" else ""
                raise self.err(f"a {v.vt.name} has no component '.{node.attr}'{parts}", node)
            return v.comps[comps.index(node.attr)]
        ks = self.component_indices(v.vt, _indices(node), node)
        if any(not isinstance(k, int) for k in ks):
            if v.origin is not None:        # an array's element: index the array
                return components.element(v, ks)
            local = node.value.id if isinstance(node.value, gast.Name) else ""
            return components.read(self.b, v, ks, local or "v", local)
        shape = v.vt.shape
        if len(ks) == len(shape):
            return v.comps[int(np.ravel_multi_index(ks, shape))]
        row = ks[0] * shape[1]
        return V(vec_of(shape[1]), v.comps[row:row + shape[1]])

    def component_indices(self, vt, nodes, node):
        """Indices ``nodes`` of a ``vt``: an int for a constant one (in range), an atom (a
        name) for one known only at run time."""
        shape = vt.shape
        consts = [components.constant(i) for i in nodes]
        if len(nodes) > len(shape) or any(k is not None and not 0 <= k < n
                                          for k, n in zip(consts, shape)):
            shown = tuple("?" if k is None else k for k in consts)
            raise self.err(f"index {shown if len(shown) > 1 else shown[0]} is out of range "
                           f"for a {vt.name} (shape {shape})", node)
        return [k if k is not None else self.b.atom(self.scalar(i, "a component index"), "k")
                for k, i in zip(consts, nodes)]

    def subscript(self, e):
        base = e.value
        if isinstance(base, gast.Attribute) and base.attr == "shape":
            return e
        if isinstance(base, gast.Name) and base.id in self.arrays:
            idx = [self.scalar(i, "an index") for i in _indices(e)]
            if base.id in self.narrow:                  # a uint8's element: an int
                return self.b.call("uint64" if self.narrow[base.id] == "uint64" else "int",
                                   _subscript(base.id, idx))
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
            return V(vt, comps, origin=(base.id, idx))
        return self.select(self.ev(base), e)

    def binop(self, op, left, right, node=None):
        sym = BINOPS.get(type(op))
        lv, rv = isinstance(left, V), isinstance(right, V)
        if not lv and not rv:
            if sym == "@":
                raise self.err("operator '@' takes matrices and vectors", node)
            return gast.BinOp(left=expr(left), op=op, right=expr(right))
        if isinstance(left, Multi) or isinstance(right, Multi):
            raise self.err("this func returns several values: unpack them first", node)
        b = self.b
        kinds = (left.vt.kind if lv else "scalar", right.vt.kind if rv else "scalar")
        if sym in ("+", "-") and lv and rv:
            return ops.cw(b, b.add if sym == "+" else b.sub, left, right)
        if sym == "*" and lv != rv:
            return ops.scale(b, left, right) if lv else ops.scale(b, right, left)
        if sym == "/" and lv and not rv:
            return ops.scale(b, left, right, op=b.div)
        if sym == "/" and rv and not lv and kinds[1] in ("vec", "mat"):    # Warp's 2.0 / v
            return ops.scale(b, right, left, op=lambda c, s: b.div(s, c))
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
                return vecframes.transform_multiply(b, left, right)
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
        if callee.kind == "atomic":
            return self.atomic_value(e)
        if callee.kind == "op" and callee.name in ("min", "max"):
            args = [self.ev(a) for a in e.args]
            if any(isinstance(a, V) for a in args):
                return self.extremum(callee.name, args, e)
            if any(isinstance(a, Multi) for a in args):
                raise self.err(f"{callee.name}() needs scalars, not several values", e)
            e.args = args
            return e
        e.args = [self.scalar(a, f"{callee.name}()") for a in e.args]
        return e

    def extremum(self, op, args, e):
        """Warp's ``min``/``max`` of vectors: of two, componentwise (a vector); of one, its
        least (greatest) component, a scalar; each a call of the scalar rule."""
        if len(args) == 1 and args[0].vt.kind == "vec":
            comps = self.b.atoms(args[0]).comps
            out = comps[0]
            for c in comps[1:]:
                out = self.b.atom(self.b.call(op, out, c), op)
            return out
        if len(args) != 2 or not all(isinstance(a, V) for a in args) or \
                args[0].vt is not args[1].vt or args[0].vt.kind != "vec":
            raise self.err(f"{op}() of vectors takes two vectors of one type (componentwise) "
                           "or one vector (its least or greatest component)", e)
        x, y = self.b.atoms(args[0]), self.b.atoms(args[1])
        return V(x.vt, [self.b.call(op, p, q) for p, q in zip(x.comps, y.comps)])

    def func_call(self, e, callee):
        sig = _signature(callee)
        if sig.any and getattr(callee.target, "custom_jvp", None) is not None:
            raise self.err(f"'{callee.name}' takes or returns vectors and has a hand-written "
                           "JVP (ad.func_jvp): not supported yet", e)
        args = []
        for k, a in enumerate(e.args):
            if isinstance(a, gast.Name) and a.id in self.varrays:
                args.append(self.vector_array_arg(a, k, sig, callee))
                continue
            v = self.ev(a)
            want = sig.params[k] if k < len(sig.params) else None
            if want is not None:
                self.expect(v, want, e)
                args += [expr(c) for c in v.comps]
            elif isinstance(v, (V, Multi)):
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
        return values[0] if len(values) == 1 else Multi(values)

    def vector_array_arg(self, a, k, sig, callee):
        """An array of vectors passed whole to a func: the float array it is made (the
        vector's shape as trailing dimensions), where the func's parameter is an array of
        the same vector shape and ndim (pass inline checks the dtype)."""
        want = sig.arrays[k] if k < len(sig.arrays) else None
        have = self.varrays[a.id]
        if want != have:
            what = f"an array of {want[0].name} with ndim {want[1]}" if want else "no such array"
            raise self.err(f"argument {k + 1} of '{callee.name}' takes {what}; '{a.id}' is an "
                           f"array of {have[0].name} with ndim {have[1]}", a)
        return a

    def vector_call(self, e, fname):
        b = self.b
        kw = {k.arg: k.value for k in e.keywords}
        args = [self.ev(a) for a in e.args]
        if any(isinstance(a, Multi) for a in args):
            raise self.err(f"{fname}(): a func's several results must be unpacked first", e)
        if fname in ALL:
            return self.construct(ALL[fname], args, e)
        if fname == "identity":
            n = kw.get("n", e.args[0] if e.args else None)
            if not (isinstance(n, gast.Constant) and type(n.value) is int and n.value >= 1):
                raise self.err("ad.identity(n=...) needs a constant positive integer n", e)
            return ops.identity(b, n.value)
        if fname in ("vector", "matrix"):
            return self.generic(fname, args, kw, e)
        if kw and set(kw) - {"dtype"}:
            raise self.err(f"{fname}() takes no keyword arguments but dtype", e)
        if fname in ("quat_identity", "transform_identity"):
            return (ops.quat_identity if fname == "quat_identity" else
                    vecframes.transform_identity)(b)
        if fname == "mul":
            if len(args) != 2:
                raise self.err("ad.mul() takes two arguments", e)
            return self.binop(gast.Mult(), *args, e)
        if fname in ("cw_mul", "cw_div"):
            if len(args) != 2:
                raise self.err(f"{fname}() takes two arguments", e)
            return ops.cw(b, b.mul if fname == "cw_mul" else b.div, *args)
        if fname == "transform_get_translation":
            return vecframes.translation(vecframes._tf(args[0], fname))
        if fname == "transform_get_rotation":
            return vecframes.rotation(vecframes._tf(args[0], fname))
        fn = getattr(ops, fname, None) or getattr(vecframes, fname, None) \
            or getattr(vecrot, fname, None)
        if fn is None:
            raise self.err(f"ad.{fname} is not supported inside kernels yet", e)
        try:
            out = fn(b, *args)
        except TypeError:
            raise self.err(f"wrong number of arguments to ad.{fname}()", e) from None
        return Multi(list(out)) if isinstance(out, tuple) else out    # (axis, angle)

    def generic(self, fname, args, kw, e):
        """Warp's ``vector(*components, length=n, dtype=...)`` and ``matrix(*components,
        shape=(r, c), dtype=...)``: zeros with no components, one scalar for every
        component, or every component (a matrix's row by row). The size is a constant;
        ``dtype`` names a float type (the kernel's precision computes it, as every
        vector's)."""
        size_key = "length" if fname == "vector" else "shape"
        extra = set(kw) - {size_key, "dtype"}
        if extra:
            raise self.err(f"{fname}() takes the keywords {size_key} and dtype, not "
                           f"{', '.join(sorted(extra))}", e)
        dtype = kw.get("dtype")
        if dtype is not None and _text(dtype).rpartition(".")[2] not in _FLOAT_NAMES:
            raise self.err(f"{fname}(dtype={_text(dtype)}): vectors and matrices in kernels "
                           "hold floats (float, float32, float64)", e)
        if any(isinstance(a, V) for a in args):
            raise self.err(f"{fname}() takes scalar components (a matrix is not made from "
                           "vectors: pass the components row by row)", e)
        size = kw.get(size_key)
        if size is None:
            if fname == "matrix" or not args:
                raise self.err(f"{fname}() needs a constant {size_key}= here", e)
            shape = (len(args),)
        else:
            shape = _constant_shape(size)
            if shape is None or len(shape) != (1 if fname == "vector" else 2):
                raise self.err(f"{fname}({size_key}=...) needs a constant " +
                               ("integer" if fname == "vector" else "(rows, columns)"), e)
        vt = (vec_of if fname == "vector" else mat_of)(*shape)
        if not args:
            return V(vt, [_c(0.0)] * vt.size)
        if len(args) == 1:
            return V(vt, [self.b.atom(args[0], "s")] * vt.size)
        if len(args) != vt.size:
            raise self.err(f"{fname}() of shape {vt.shape} takes {vt.size} components, not "
                           f"{len(args)}", e)
        return V(vt, args)

    def construct(self, vt, args, e):
        """``ad.<vt>(...)`` from one of the forms its type's constructor takes (the table
        ``Form``s of runtime/vectypes.py that plain Python's constructor binds against too)."""
        if any(k.arg is None for k in e.keywords):
            raise self.err(f"ad.{vt.name}(**...) is not supported: name each argument", e)
        try:
            check_keywords(vt, len(args), [k.arg for k in e.keywords])
            kw = {k.arg: self.ev(k.value) for k in e.keywords}     # (in the order written)
            if any(isinstance(v, Multi) for v in kw.values()):
                raise self.err(f"{vt.name}(): a func's several results must be unpacked "
                               "first", e)
            form, sources = bind(vt, [_shape(a) for a in args],
                                 {k: _shape(v) for k, v in kw.items()})
        except ConstructorError as exc:
            raise self.err(str(exc), e) from None
        vt = vt.base
        if form.broadcast:
            return V(vt, [self.b.atom(args[0], "s")] * vt.size)
        comps = []
        for source in sources:
            value = kw[source] if isinstance(source, str) else \
                args[source] if isinstance(source, int) else [_c(float(c)) for c in source]
            comps += value.comps if isinstance(value, V) else \
                value if isinstance(value, list) else [value]
        return V(vt, comps or [_c(0.0)] * vt.size)


_FLOAT_NAMES = ("float", "float32", "float64")


def _text(node):
    return ast.unparse(gast.gast_to_ast(node))


def _constant_shape(node):
    """The tuple of positive ints a constant ``length=``/``shape=`` gives, or None."""
    items = node.elts if isinstance(node, gast.Tuple) else [node]
    if not all(isinstance(i, gast.Constant) and type(i.value) is int and i.value >= 1
               for i in items):
        return None
    return tuple(i.value for i in items)


def _shape(value):
    """What ``vectypes.bind`` reads of an argument: its type's shape, () for a scalar."""
    return value.vt.shape if isinstance(value, V) else ()


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
