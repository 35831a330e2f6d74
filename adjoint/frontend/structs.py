"""Struct parameters (``@ad.struct``, runtime/structs.py) in the parser.

Expects: a parsed function's signature and tree (pass parse uses it).
Guarantees: ``StructParams.flatten`` gives one ``(name, type)`` per leaf field of a
struct parameter (``b: Body`` -> ``b_x``, ``b_mass``, ...; ``runtime.structs.leaves``
order, the order ``launch`` flattens an instance in); ``field`` turns ``b.x`` into the
name ``b_x`` (``b.x.shape`` into ``b_x.shape``, ``b.g.x`` of a vector into ``b_g.x``);
``expand`` turns a struct passed whole to a func into its leaves, after checking the
func takes that struct there.
``construct`` makes a struct built in the function (``s = Body()``, Warp's zeroed
instance) locals of the same leaf names, each zero; its fields are then assigned
(``s.x = v``, ``s.g.y = w``), read and passed whole to a func as a parameter's are.
Every other use of a struct is an error naming it.
"""
import inspect

import gast

from ..runtime.structs import flat_name, is_struct, layout, leaves
from ..runtime.vectypes import VectorType


class StructParams:
    """The struct parameters of one function: ``{param: (struct class, {path: name})}``."""

    def __init__(self, taken):
        self.taken = set(taken)
        self.params = {}
        self.locals = set()         # those of ``params`` built in the function

    def flatten(self, pname, cls):
        """``[(leaf name, leaf type)]`` of struct parameter ``pname``; a name that would
        clash with another name of the function gets trailing underscores."""
        names, out = {}, []
        for path, ftype in leaves(cls):
            n = flat_name(pname, path)
            while n in self.taken:
                n += "_"
            self.taken.add(n)
            names[path] = n
            out.append((n, ftype))
        self.params[pname] = (cls, names)
        return out

    def __contains__(self, pname):
        return pname in self.params

    @staticmethod
    def _chain(node):
        attrs = []
        while isinstance(node, gast.Attribute):
            attrs.append(node.attr)
            node = node.value
        return node, attrs[::-1]

    def field(self, node, pf):
        """The expression ``node`` (an attribute chain on a struct parameter) stands for,
        or None when its base is no struct parameter."""
        base, attrs = self._chain(node)
        if not (isinstance(base, gast.Name) and base.id in self.params):
            return None
        cls, names = self.params[base.id]
        store = not isinstance(node.ctx, gast.Load)
        if store and base.id not in self.locals:
            raise pf.error(f"fields of struct parameter '{base.id}' cannot be assigned in a "
                           "kernel or func (store into an array field: s.arr[i] = v)", node)
        for k in range(len(attrs), 0, -1):
            leaf = names.get(tuple(attrs[:k]))
            if leaf is None:
                continue
            rest = attrs[k:]
            out = gast.copy_location(gast.Name(id=leaf, ctx=node.ctx if store and not rest
                                               else gast.Load(), annotation=None,
                                               type_comment=None), node)
            vector = isinstance(dict(leaves(cls)).get(tuple(attrs[:k])), VectorType)
            if rest == ["shape"] or (rest and vector):
                # b.x.shape, and b.g.x, b.pose.p.x of a vector field (checked by scalarize)
                for k, a in enumerate(rest):
                    ctx = node.ctx if k == len(rest) - 1 else gast.Load()
                    out = gast.copy_location(gast.Attribute(value=out, attr=a, ctx=ctx), node)
                return out
            if rest:
                raise pf.error(f"'{'.'.join([base.id] + attrs)}': field "
                               f"'{'.'.join([base.id] + attrs[:k])}' has no attribute "
                               f"'{rest[0]}'", node)
            return out
        sub = self._struct_at(cls, attrs)
        if sub is None:
            raise pf.error(f"struct '{layout(cls).name}' has no field "
                           f"'{'.'.join(attrs)}' (fields: "
                           f"{', '.join(f for f, _ in layout(cls).fields)})", node)
        raise pf.error(f"'{'.'.join([base.id] + attrs)}' is a struct: use its fields, or pass "
                       "it whole to a func", node)

    def construct(self, node, cls, pf, zero_vector):
        """``s = Cls()`` (``node``, ``cls`` a struct class): the assignments of ``s``'s leaf
        locals, each zero (``zero_vector(vt)``: a vector type's zero, a call node)."""
        what = layout(cls).name
        t = node.targets[0] if len(node.targets) == 1 else None
        if not isinstance(t, gast.Name):
            raise pf.error(f"a {what} built in a kernel or func is assigned to a name: "
                           f"s = {what}()", node)
        if node.value.args or node.value.keywords:
            raise pf.error(f"{what}() takes no arguments in a kernel or func: build it "
                           f"empty (zeroed, as in Warp), then assign its fields", node)
        if t.id in self.params and t.id not in self.locals:
            raise pf.error(f"'{t.id}' is a struct parameter; it cannot be assigned", node)
        if t.id not in self.params:
            self.flatten(t.id, cls)
            self.locals.add(t.id)
        elif self.params[t.id][0] is not cls:
            raise pf.error(f"'{t.id}' is a {layout(self.params[t.id][0]).name}; it cannot "
                           f"be assigned a {what}", node)
        out = []
        for path, ftype in leaves(cls):
            if isinstance(ftype, VectorType):
                value = zero_vector(ftype)
            elif getattr(ftype, "kind", None) in ("f", "i", "u", "b"):
                value = gast.Constant(value={"f": 0.0, "b": False}.get(ftype.kind, 0),
                                      kind=None)
            else:
                raise pf.error(f"a {what} built in a kernel or func cannot hold arrays (its "
                               f"field '{'.'.join(path)}'): pass a struct of arrays as a "
                               "parameter", node)
            leaf = gast.Name(id=self.params[t.id][1][path], ctx=gast.Store(), annotation=None,
                             type_comment=None)
            out.append(gast.Assign(targets=[leaf], value=value, type_comment=None))
        for s in out:
            for n in gast.walk(s):
                gast.copy_location(n, node)
        return out

    @staticmethod
    def _struct_at(cls, attrs):
        for a in attrs:
            ftype = dict(layout(cls).fields).get(a)
            if not is_struct(ftype):
                return None
            cls = ftype
        return cls

    def expand(self, args, callee, pf, node):
        """``args`` of a call with each struct passed whole (``b``, ``b.shape_of``: a nested
        struct) replaced by its leaves; ``callee`` (a func, or None for anything else) must
        take that struct at that position."""
        out, pos = [], 0
        sig = list(inspect.signature(callee.pyfunc).parameters.values()) \
            if callee is not None else []
        for a in args:
            base, attrs = self._chain(a)
            if not (isinstance(base, gast.Name) and base.id in self.params):
                out.append(a)
                pos += 1
                continue
            cls, names = self.params[base.id]
            sub = self._struct_at(cls, attrs) if attrs else cls
            if sub is None:                         # a leaf field: resolved by the visitor
                out.append(a)
                pos += 1
                continue
            what = ".".join([base.id] + attrs)
            want = sig[pos].annotation if pos < len(sig) else None
            if callee is None or want is not sub:
                target = f"func '{callee.name}'" if callee is not None else "this call"
                raise pf.error(f"struct '{what}' ({layout(sub).name}) is passed to {target}, "
                               f"which does not take a {layout(sub).name} there", node)
            prefix = tuple(attrs)
            for path, _ in leaves(cls):
                if path[:len(prefix)] == prefix:
                    out.append(gast.copy_location(gast.Name(
                        id=names[path], ctx=gast.Load(), annotation=None, type_comment=None), a))
            pos += 1
        return out

    def bare(self, node, pf):
        """Error for a struct parameter used as a value (``node`` a Name)."""
        cls, _ = self.params[node.id]
        return pf.error(f"'{node.id}' is a struct ({layout(cls).name}): use its fields "
                        f"({node.id}.{layout(cls).fields[0][0]}), or pass it whole to a func",
                        node)
