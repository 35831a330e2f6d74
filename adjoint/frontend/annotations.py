"""A kernel's or func's parameters and their types, from its annotations (pass parse).

Expects: a ``ParsedFunction`` being made (its name, source, tree, dialect and struct
table) and the function's ``inspect.Signature``.
Guarantees: ``add_parameters`` appends one ``Param`` per parameter (one per leaf field
of a struct, frontend/structs.py), typed ``ArrayType``, ``VectorType`` or a numpy
scalar dtype. A kernel parameter with no annotation, or one not supported, is a
``TransformError`` naming the file and line (and how to annotate it). A kernel's
``float`` parameters are weak: float32 where every other float of the kernel is.
"""
import ast
import inspect
from dataclasses import dataclass

import gast
import numpy as np

from ..rules.types import BOOL, FLOAT, INT, of
from ..runtime.structs import is_struct
from ..runtime.types import ArrayType, scalar_dtype
from ..runtime.vectypes import VectorType


@dataclass
class Param:
    """A parameter: ``type`` is an ``ArrayType`` or a numpy scalar dtype."""
    name: str
    type: object

    @property
    def is_array(self):
        return isinstance(self.type, ArrayType)

    @property
    def kind(self):
        if self.is_array:
            return of(self.type.kind)
        return {"f": FLOAT, "b": BOOL}.get(self.type.kind, INT)


def add_parameters(pf, sig, role):
    """Append the parameters of signature ``sig`` to ``pf.params``."""
    for p in sig.parameters.values():
        if is_struct(p.annotation):         # one parameter per leaf field (frontend/structs.py)
            pf.params += [Param(n, t) for n, t in pf.structs.flatten(p.name, p.annotation)]
        else:
            pf.params.append(Param(p.name, param_type(pf, pf.dialect, p.name, p.annotation,
                                                      role)))
    if role == "kernel":
        weak_floats(pf, {p.name for p in sig.parameters.values() if p.annotation is float})


def param_type(pf, dialect, name, annotation, role):
    """The type of parameter ``name`` of ``pf`` (a ``ParsedFunction`` being made: its
    name, source and tree) from its annotation."""
    if isinstance(annotation, (ArrayType, VectorType)):
        return annotation       # (a vector is made scalars or an array by pass scalarize)
    where = next((a for a in pf.node.args.args if a.id == name), None)
    if annotation is inspect.Parameter.empty:
        if role != "kernel":
            return dialect.float
        use, ndim = _array_use(pf.node, name)
        if use is not None:
            shape = "" if ndim == 1 else f", ndim={ndim}"
            raise pf.error(f"kernel parameter '{name}' needs an annotation: it is used as an "
                           f"array (line {use.lineno}: {gast_to_text(use)}), so write "
                           f"{name}: ad.array(dtype=float{shape}) (or dtype=ad.float32, "
                           "int, ...)", where)
        raise pf.error(f"kernel parameter '{name}' needs an annotation: {name}: float or "
                       f"{name}: int for a number, {name}: ad.array(dtype=float) for an array",
                       where)
    dt = scalar_dtype(annotation, dialect)
    if dt is None and annotation is np.float16:
        raise pf.error(f"parameter '{name}': float16 is an array dtype only (stored as "
                       "float16, computed in float32); annotate a scalar float32", where)
    if dt is None:
        raise pf.error(f"parameter '{name}' has unsupported annotation {annotation!r}", where)
    return dt


def _float_dtype(t):
    """The float dtype of a parameter type (an array's, a vector's, a scalar's), or None."""
    dt = t.dtype if isinstance(t, (ArrayType, VectorType)) else t
    return dt if dt.kind == "f" else None


def weak_floats(pf, weak):
    """A kernel parameter annotated ``float`` (``weak``: their names) is a *weak* scalar,
    as a Python number is to NumPy 2 (NEP 50), JAX and PyTorch: it takes the kernel's
    precision. Where every float array of the kernel, and every other float parameter
    (``ad.float32`` scalars, vectors, struct fields), is float32, the weak ones are float32
    too (a launch rounds the value given to float32), and the kernel computes in float32
    (emit/precision.py); anywhere else ``float`` is float64, as before. ``ad.float64`` is
    never weak; in Warp's dialect ``float`` is float32 anyway."""
    if not weak or pf.dialect.float != np.float64:
        return
    strong = [_float_dtype(p.type) for p in pf.params if p.name not in weak]
    floats = [dt for dt in strong if dt is not None]
    arrays = [p for p in pf.params if p.is_array and p.type.kind == "float"]
    if arrays and all(dt == np.float32 for dt in floats):
        for p in pf.params:
            if p.name in weak:
                p.type = np.dtype(np.float32)


def _array_use(fdef, name):
    """``(node, ndim)``: the first use of ``name`` in ``fdef`` as an array (``name[i, j]``,
    ``name.shape``, ``len(name)``) and the number of indices it shows (1 unless a
    subscript gives more), or ``(None, 0)``."""
    def named(n):
        return isinstance(n, gast.Name) and n.id == name
    uses = []
    for n in gast.walk(fdef):
        if isinstance(n, gast.Subscript) and named(n.value):
            uses.append((n, len(n.slice.elts) if isinstance(n.slice, gast.Tuple) else 1))
        elif isinstance(n, gast.Attribute) and n.attr == "shape" and named(n.value):
            uses.append((n, 1))
        elif isinstance(n, gast.Call) and isinstance(n.func, gast.Name) and \
                n.func.id == "len" and any(named(a) for a in n.args):
            uses.append((n, 1))
    if not uses:
        return None, 0
    first = min(uses, key=lambda u: (u[0].lineno, u[0].col_offset))[0]
    return first, max((u[1] for u in uses), default=1)


def gast_to_text(node):
    """Source text of a gast node (for messages and comments)."""
    return ast.unparse(gast.gast_to_ast(node))
