"""Assignment targets of pass scalarize (frontend/scalarize.py): where a value goes.

Expects: mixed into ``_Scalarize`` (its ``arrays``, ``varrays``, ``vars``, ``comp``,
``narrow``, ``b`` and ``err``, and vecexpr.py's ``Expressions``).
Guarantees: ``place`` names what a target is: ("local", component names, vt or None),
("array", arr, index atoms, vt or None) for an element or component of an array, or
("dynamic", ...) for a local's component at an index known at run time
(frontend/components.py); ``store`` turns ``target = value`` (or ``target op= value``)
into scalar assignments, one per component, and refuses a value of the wrong type
with a ``TransformError`` naming the line.
"""
import copy

import gast
import numpy as np

from ..runtime.vectypes import vec_of
from . import components
from .builder import expr, name, reads
from .vecexpr import _c, _indices, _subscript
from .vecops import V


class Places:
    """The assignment-target methods of ``_Scalarize``."""

    def store(self, target, value, s, aug=None):
        """``target = value`` (``aug``: ``target += value`` with that gast operator) for a
        subscript or attribute target."""
        ref = self.place(target)
        if ref[0] == "dynamic":      # a local's component at an index known at run time
            return self.store_dynamic(ref, value, aug, s)
        if ref[0] == "array":        # an element of an array of vectors, or of floats
            _, arr, idx, vt, *base = ref     # (base: where a transform's part starts)
            if vt is None:
                if isinstance(value, V):
                    what = f"a component of an element of '{arr}'" if arr in self.varrays \
                        else f"an element of the float array '{arr}'"
                    raise self.err(f"cannot store a {value.vt.name} into {what}", s)
                if arr in self.narrow:
                    value = self.narrowed(arr, value, aug, s)
                return [self.assign_node(_subscript(arr, idx), value, aug)]
            self.expect(value, vt, s)
            return [self.assign_node(_subscript(arr, idx + [_c(int(i) + (base[0] if base and j == 0
                                                                          else 0))
                                                            for j, i in enumerate(np.unravel_index(
                k, vt.shape))]), c, aug) for k, c in enumerate(value.comps)]
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

    def store_dynamic(self, ref, value, aug, s):
        return components.store_dynamic(self, ref, value, aug, s)

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
            root, items = components.target_path(t, self.arrays)
            if isinstance(root, gast.Subscript) and root.value.id in self.varrays:
                return self.element_place(root, items, t)
            if not isinstance(root, gast.Name) or root.id not in self.vars:
                raise self.err("only components of a local vector, matrix or quaternion "
                               "(v[0], v.x, m[i, j], m[i]) or of an element of an array of "
                               "them (y[i].x, y[i][k]) can be assigned to", t)
            vt = self.vars[root.id]
            names = self.comp[root.id]
            if isinstance(t, gast.Attribute) and root is t.value:   # v.x, t.p
                sel = self.select(V(vt, names), t)
                if isinstance(sel, V):
                    return ("local", sel.comps, sel.vt)
                return ("local", [sel], None)
            ks = self.component_indices(vt, [self.index_of(vt, items, k) for k in
                                             range(len(items))], t)
            row = vec_of(vt.shape[1]) if len(ks) < len(vt.shape) else None
            if any(not isinstance(k, int) for k in ks):
                return ("dynamic", names, vt, ks, row, root.id)
            first = int(np.ravel_multi_index(ks + [0] * (len(vt.shape) - len(ks)), vt.shape))
            return ("local", names[first:first + (row.size if row else 1)], row)
        raise self.err(f"cannot assign to {type(t).__name__.lower()}", t)

    def index_of(self, vt, items, k):
        """Item ``k`` of a target's path as an index node (``.x`` is 0 where the dimension
        it names is a vector's, a quaternion's or a matrix row's)."""
        item = items[k]
        if not isinstance(item, str):
            return item
        letters = vt.comps if len(vt.shape) == 1 and vt.kind in ("vec", "quat") else "xyzw"
        if k != len(vt.shape) - 1 or vt.kind == "transform" or \
                item not in letters[:vt.shape[k]]:
            raise self.err(f"'.{item}' does not name a component here (a {vt.name})", self.line)
        return _c(letters.index(item))

    def element_place(self, root, items, t):
        """("array", arr, [index atoms], vt or None) for a component or row of an element of
        the array of vectors ``root.value`` (``y[i].x``, ``y[i][k]``, ``y[i, j][0]``): only
        that component of the element is written (frontend/components.py)."""
        arr = root.value.id
        vt, nd = self.varrays[arr]
        idx = [self.scalar(e, "an index") for e in _indices(root)]
        if len(idx) != nd:
            raise self.err(f"'{arr}' is an array of {vt.name} with {nd} index dimension(s), "
                           f"indexed with {len(idx)}: give {nd}, then take components "
                           f"({arr}[i].x, {arr}[i][0])", t)
        if vt.kind == "transform":      # t[i].p, t[i].q: the element's components 0..2, 3..6
            base, vt, items = components.transform_field(vt, items, lambda m: self.err(m, t))
            if not items:
                return ("array", arr, idx, vt, base)
            ks = self.component_indices(vt, [self.index_of(vt, items, k)
                                             for k in range(len(items))], t)
            if not isinstance(ks[0], int):
                raise self.err("a part of a transform element is indexed by constants only "
                               f"({arr}[i].q[3], {arr}[i].p.x)", t)
            return ("array", arr, idx + [_c(base + ks[0])], None)
        ks = self.component_indices(vt, [self.index_of(vt, items, k)
                                         for k in range(len(items))], t)
        where = idx + [_c(k) if isinstance(k, int) else k for k in ks]
        return ("array", arr, where, vec_of(vt.shape[1]) if len(ks) < len(vt.shape) else None)
