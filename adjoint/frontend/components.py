"""Component indices known only at run time (pass scalarize): ``v[k]``, ``m[k, j]``, ``m[k]``.

Warp programs index vectors and matrices with ints computed at run time, most often a
constant-range loop's variable (``for k in range(3): s += v[i][k] * w[k]``). Once
scalarized a vector is several locals or trailing array dimensions, so such an index
becomes:

- of an **element of an array of vectors** (``v[i][k]``, ``a[i][k, j]``, ``a[i][k]``, and
  stored into: ``y[i][k] = s``, ``y[i].x = s``, ``y[i, j][0] = s``): an index of the float
  array's trailing dimension, ``v[i, k]``. Its derivative is the array element's, it is
  checked as every array index is (pass bounds: an index outside ``0..n-1`` stops the
  launch with ``BoundsError`` naming the line), and a store changes that component only;
- of a **local** vector or matrix (``w[k]``, ``m[k, j]``, ``m[k] = row``): a *select chain*
  at the point of use, ``if k == 0: w_at = w_x elif k == 1: w_at = w_y ...``, the store
  ``if k == 0: w_x = s elif ...``. Each branch is plain scalar code, so the derivative is
  that of a branch (pass ssa merges the names): exact, the selected component alone gets
  the gradient. The chain's ``else`` is a ``ComponentCheck``: in a kernel pass bounds
  makes it a fault (an index outside ``0..n-1`` stops the launch with ``BoundsError``
  naming the line, the local and its type, as an array index does); where nothing is
  checked (``bounds_check=False``, a func called from Python) it reads nan and a store
  through it makes every component of the vector nan: never another component's.

Why a chain and not unrolling the constant-range loops first: docs/semantics.md,
"Vectors become scalars".
"""
import copy
import math

import gast
import numpy as np

from ..runtime.vectypes import vec_of
from ..derive.ir import ComponentCheck
from .builder import const, expr, name
from .vecops import QUAT, VEC3, V

NAN = math.nan


def target_path(t, arrays):
    """(root, items) of an assignment target: ``root`` a name (a local) or the subscript of
    an array (``y[i]``, ``y[i, j]``), ``items`` the component indices and attribute names
    (strings) taken of it in order: ``m[k][j]`` is (m, [k, j]), ``y[i].x`` (y[i], ["x"])."""
    items = []
    while isinstance(t, (gast.Subscript, gast.Attribute)):
        if isinstance(t, gast.Subscript) and isinstance(t.value, gast.Name) and \
                t.value.id in arrays:
            return t, items
        items[:0] = [t.attr] if isinstance(t, gast.Attribute) else _target_indices(t)
        t = t.value
    return t, items


def _target_indices(t):
    return list(t.slice.elts) if isinstance(t.slice, gast.Tuple) else [t.slice]


def transform_field(vt, items, err):
    """(first component, type, items left) of the part of a transform element a store
    target names (``t[i].p``: components 0..2, a vec3; ``t[i].q``: 3..6, a quat; then
    ``.x`` or ``[0]`` of that part); ``err(message)`` makes the error."""
    if not items or items[0] not in ("p", "q"):
        raise err(f"an element of an array of {vt.name} is assigned by its parts: .p (the "
                  "translation) and .q (the rotation), or one of their components")
    return (0, VEC3, items[1:]) if items[0] == "p" else (3, QUAT, items[1:])


def constant(node):
    """The int a constant index node holds, or None (an index known only at run time)."""
    if isinstance(node, gast.Constant) and type(node.value) is int:
        return node.value
    return None


def element(v, ks):
    """Component(s) ``ks`` (ints and index atoms) of ``v``, an element of an array of vectors
    (``v.origin``: the array and its index): the float array's element (a gast subscript)
    when ``ks`` names a component, else a row (a ``V`` with its own origin)."""
    arr, idx = v.origin
    where = copy.deepcopy(idx) + [const(k) if isinstance(k, int) else copy.deepcopy(k)
                                  for k in ks]
    if len(ks) == len(v.vt.shape):
        return _subscript(arr, where)
    cols = v.vt.shape[1]
    return V(vec_of(cols), [_subscript(arr, copy.deepcopy(where) + [const(c)])
                            for c in range(cols)], origin=(arr, where))


def read(b, v, ks, hint, local=""):
    """``v`` (a local vector's components) at ``ks`` (ints and index atoms): a fresh local
    set by a select chain (a ``V`` of fresh locals for a matrix's row); ``local``: the
    user's name of ``v`` (none for a computed vector)."""
    shape = v.vt.shape
    if len(ks) == len(shape):
        outs = [b.fresh(f"{hint}_at")]
    else:
        outs = b.fresh_group(f"{hint}_row", vec_of(shape[1]).comps)

    def leaf(at):
        first = int(np.ravel_multi_index(at + (0,) * (len(shape) - len(at)), shape))
        return [_assign(n, copy.deepcopy(expr(c)))
                for n, c in zip(outs, v.comps[first:first + len(outs)])]

    for s in _select(shape, ks, leaf, lambda: [_assign(n, const(NAN)) for n in outs],
                     (local, v.vt.name)):
        b.emit(s)
    if len(outs) == 1:
        return name(outs[0])
    return V(vec_of(shape[1]), [name(n) for n in outs])


def store(vt, names, ks, values, aug, local=""):
    """The statements storing ``values`` (atoms: one, or a row's) into component(s) ``ks``
    of the local vector ``local`` whose components are ``names`` (``aug``: ``+=`` with that
    operator); an index out of range faults (or, unchecked, makes every component nan)."""
    shape = vt.shape

    def leaf(at):
        first = int(np.ravel_multi_index(at + (0,) * (len(shape) - len(at)), shape))
        out = []
        for n, value in zip(names[first:first + len(values)], values):
            value = copy.deepcopy(expr(value))
            out.append(_assign(n, value) if aug is None else
                       gast.AugAssign(target=name(n, True), op=copy.deepcopy(aug), value=value))
        return out

    return _select(shape, ks, leaf, lambda: [_assign(n, const(NAN)) for n in names],
                   (local, vt.name))


def _select(shape, ks, leaf, otherwise, what, at=()):
    """``leaf(at)`` for the constant indices ``at`` that ``ks`` (ints and atoms) take, in
    ``if k == 0: ... elif k == 1: ... else: check; otherwise()`` chains over its run-time
    ones (``what``: the local's name and type, which the ``ComponentCheck`` names)."""
    if len(at) == len(ks):
        return leaf(at)
    k = ks[len(at)]
    if isinstance(k, int):
        return _select(shape, ks, leaf, otherwise, what, at + (k,))
    axis = len(at)
    chain = [ComponentCheck(copy.deepcopy(k), what[0], axis, shape[axis], what[1])] + otherwise()
    for j in reversed(range(shape[axis])):
        test = gast.Compare(left=copy.deepcopy(k), ops=[gast.Eq()], comparators=[const(j)])
        chain = [gast.If(test=test, body=_select(shape, ks, leaf, otherwise, what, at + (j,)),
                         orelse=chain)]
    return chain


def _assign(n, value):
    return gast.Assign(targets=[name(n, True)], value=value, type_comment=None)


def _subscript(arr, idx):
    sl = idx[0] if len(idx) == 1 else gast.Tuple(elts=list(idx), ctx=gast.Load())
    return gast.Subscript(value=name(arr), slice=sl, ctx=gast.Load())


def store_dynamic(sc, ref, value, aug, s):
    """``v[k] = value`` (``aug``: ``+=``, ...) into a local's component or row at an index
    known only at run time, for the scalarizer ``sc``: a select chain."""
    _, names, vt, ks, row, local = ref
    if row is None:
        if isinstance(value, V):
            raise sc.err(f"cannot assign a {value.vt.name} to a component", s)
        values = [sc.b.atom(value, "s")]
    elif isinstance(value, V):
        sc.expect(value, row, s)
        if aug is not None and not isinstance(aug, (gast.Add, gast.Sub)):
            raise sc.err(f"a row of a {vt.name} is incremented by a {row.name} with "
                         "+= or -= only", s)
        values = sc.b.atoms(value, force=True).comps
    elif aug is not None and isinstance(aug, (gast.Mult, gast.Div)):
        values = [sc.b.atom(value, "s")] * row.size
    else:
        raise sc.err(f"expected a {row.name} here, got a scalar", s)
    return store(vt, names, ks, values, aug, local)
