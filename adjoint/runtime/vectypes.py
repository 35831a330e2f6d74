"""Warp's vector, matrix, quaternion and transform types: ``ad.vec3``, ``ad.mat33``, ...

A ``VectorType`` is a fixed-size value of floats: a ``vec2/vec3/vec4``, a
``mat22/mat33/mat44``, a ``quat`` (x, y, z, w: w is the real part, as in Warp)
or a ``transform`` (a translation p = (px, py, pz), then a rotation quaternion
q = (qx, qy, qz, qw): seven floats, Warp's layout). Vectors of any length and
matrices of any shape are entries made when first named (``vector_of(6)`` is
``ad.vec6``, ``matrix_of((2, 3))`` ``ad.mat23``); Warp's ``spatial_vector`` and
``spatial_matrix`` are other names of ``vec6`` and ``mat66`` (``ALIASES``).
``ad.vec3`` holds float64 values (``float`` means float64 everywhere in adjoint);
``ad.vec3f`` holds float32 (Warp's ``wp.vec3``) and ``ad.vec3d`` is ``ad.vec3``.

Uses:
- an annotation: ``ad.array(dtype=ad.vec3)`` is a float array with the vector's shape
  as trailing dimensions (``(n, 3)``; ``mat33``: ``(n, 3, 3)``); a kernel parameter
  ``g: ad.vec3`` is an array of shape ``(3,)``; a func's vector parameters and results
  are passed as their components;
- inside kernels and funcs, a constructor and the builtins (frontend/scalarize.py
  turns them into scalar code, so every later pass sees floats);
- in plain Python, the same names compute with numpy (``ad.vec3(1, 2, 3)`` is a numpy
  array of shape (3,)), so funcs stay callable outside kernels.

A constructor accepts the forms its type's ``forms`` list (Warp's), and nothing else:
``bind`` matches the arguments against them, for ``__call__`` here and for the kernel
side (frontend/vecexpr.py ``construct``) alike, so the two cannot disagree. The forms
are listed in docs/language.md; there is no matrix from vectors (Warp read them as
columns in kernels and as rows in Python, and has removed the form).

This module imports only numpy: the runtime stands alone.
"""
import re
from dataclasses import dataclass

import numpy as np


class VectorType:
    """A vector-like value type. ``kind``: "vec", "mat", "quat" or "transform";
    ``shape``: its array shape ((3,), (3, 3), (4,), (7,)); ``dtype``: float64 or
    float32; ``comps``: the suffix of each component's scalar name, row-major
    (``x y z``, ``00 01 ...``, ``px ... qw``)."""

    def __init__(self, name, kind, shape, dtype, comps):
        self.name, self.kind, self.shape = name, kind, tuple(shape)
        self.dtype = np.dtype(dtype)
        self.comps = tuple(comps)

    @property
    def size(self):
        return len(self.comps)

    @property
    def base(self):
        """The float64 type of the same shape (what the kernel-side pass compares)."""
        return TYPES[(self.kind, self.shape)]

    @property
    def forms(self):
        """The argument lists its constructor accepts (``Form``), tried in order."""
        return FORMS[(self.kind, self.shape)]

    @property
    def keywords(self):
        """The names its constructor's arguments may be given by."""
        return tuple(p.name for f in self.forms if f.keywords for p in f.params)

    def __call__(self, *args, **kwargs):
        """The constructor in plain Python: a numpy array of this type's shape, from one
        of its ``forms`` (a ``TypeError`` for any other arguments)."""
        form, sources = bind(self, [np.shape(a) for a in args],
                             {k: np.shape(v) for k, v in kwargs.items()})
        if form.broadcast:
            return np.full(self.shape, args[0], self.dtype)
        parts = [kwargs[src] if isinstance(src, str) else
                 args[src] if isinstance(src, int) else src for src in sources]
        if not parts:
            return np.zeros(self.shape, self.dtype)
        return np.concatenate([np.ravel(np.asarray(p, dtype=self.dtype))
                               for p in parts]).reshape(self.shape)

    def __repr__(self):
        return f"ad.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


@dataclass(frozen=True)
class Param:
    """A parameter of a constructor form: ``shape`` () for a scalar, else the shape of
    the value it takes; ``default``: its components where it may be left out."""
    name: str
    shape: tuple = ()
    default: tuple = None
    type: str = ""          # the type it takes, for messages

    def describe(self):
        kind = f": {self.type}" if self.type else ""
        default = "" if self.default is None else \
            " = (" + ", ".join(f"{v:g}" for v in self.default) + ")"
        return self.name + kind + default


@dataclass(frozen=True)
class Form:
    """One argument list a constructor accepts: its parameters, in order; ``keywords``:
    they may be given by name; ``broadcast``: its one scalar is every component."""
    params: tuple
    keywords: bool = False
    broadcast: bool = False
    label: str = ""

    def describe(self):
        return self.label or "(" + ", ".join(p.describe() for p in self.params) + ")"

    def bind(self, args, keywords):
        """Where each parameter's value comes from (an argument's position, a keyword's
        name, or the default's components), or None where ``args`` and ``keywords``
        (the shape of each) do not fit this form."""
        if (keywords and not self.keywords) or len(args) > len(self.params):
            return None
        if set(keywords) - {p.name for p in self.params}:
            return None
        sources = []
        for k, p in enumerate(self.params):
            if k < len(args):
                source, shape = k, args[k]
            elif p.name in keywords:
                source, shape = p.name, keywords[p.name]
            elif p.default is not None:
                source, shape = p.default, p.shape
            else:
                return None
            if tuple(shape) != p.shape:
                return None
            sources.append(source)
        return sources


def _forms(name, kind, shape, comps):
    size = len(comps)
    scalars = (Param(c) for c in comps)
    forms = [Form((), label="() (zeros)")] if kind != "transform" else [
        Form((Param("p", (3,), (0.0, 0.0, 0.0), "vec3"),
              Param("q", (4,), (0.0, 0.0, 0.0, 1.0), "quat")), keywords=True)]
    forms += [Form((Param("s", ()),), broadcast=True),
              Form((Param(name[0], shape, type=name),), label=f"(a {name})"),
              Form(tuple(scalars), label=f"({size} components, row by row)" if kind == "mat"
                   else f"({size} components)" if size > 4 else "")]
    if kind == "quat":
        forms.append(Form((Param("v", (3,), type="vec3"), Param("w"))))
    if kind == "vec" and shape == (6,):     # a spatial vector from its halves (Warp's)
        forms.append(Form((Param("w", (3,), type="vec3"), Param("v", (3,), type="vec3")),
                          keywords=True))
    return tuple(forms)


class ConstructorError(TypeError):
    """Arguments no form of a constructor accepts."""


def check_keywords(vt, n_args, keywords):
    """A ``ConstructorError`` for a keyword no form of ``vt`` takes, or one naming a
    parameter the first ``n_args`` positional arguments give."""
    named = vt.keywords
    for key in keywords:
        if key not in named:
            raise ConstructorError(
                f"ad.{vt.name}() got an unexpected keyword argument '{key}' " +
                (f"(it takes {', '.join(named)})" if named else "(it takes none)"))
    for k, name in enumerate(named):
        if k < n_args and name in keywords:
            raise ConstructorError(f"ad.{vt.name}(): argument '{name}' is given twice")


def bind(vt, args, keywords):
    """``(form, sources)``: the first of ``vt``'s forms that ``args`` and ``keywords`` (the
    shape of each value, () for a scalar) fit (``Form.bind``); else a
    ``ConstructorError`` naming the forms it takes."""
    check_keywords(vt, len(args), keywords)
    for form in vt.forms:
        sources = form.bind(args, keywords)
        if sources is not None:
            return form, sources
    given = [_what(s) for s in args] + [f"{k}={_what(s)}" for k, s in keywords.items()]
    hint = ""
    if vt.kind == "mat" and any(tuple(s) == vt.shape[1:] for s in args):
        hint = ("; a matrix is not made from vectors (Warp read them as columns in kernels "
                "and as rows in Python, and has removed the form): pass the components row "
                "by row")
    forms = [f.describe() for f in vt.forms]
    raise ConstructorError(f"ad.{vt.name}() takes {', '.join(forms[:-1])} or {forms[-1]}; "
                           f"got ({', '.join(given)}){hint}")


def _what(shape):
    shape = tuple(shape)
    return "a scalar" if not shape else \
        _SHAPE_NAMES.get(shape, f"an array of shape {shape}")


def _by_name(name):
    return ALL[name]


_XYZW = ("x", "y", "z", "w")
TYPES = {}      # (kind, shape) -> the float64 type
ALL = {}        # name -> type (every variant)
FORMS = {}      # (kind, shape) -> its constructor's forms (``Form``)
_SHAPE_NAMES = {}   # shape -> the name of a type of that shape, for messages
ALIASES = {}    # Warp's other names of a type (spatial_vector is vec6): alias -> name


def _define(name, kind, shape, comps):
    for suffix, dtype in (("", np.float64), ("d", np.float64), ("f", np.float32)):
        t = VectorType(name + suffix, kind, shape, dtype, comps) if suffix != "d" else ALL[name]
        ALL[name + suffix] = t
    TYPES[(kind, tuple(shape))] = ALL[name]
    _SHAPE_NAMES[tuple(shape)] = " or ".join(filter(None, (_SHAPE_NAMES.get(tuple(shape)),
                                                           name)))
    FORMS[(kind, tuple(shape))] = _forms(name, kind, tuple(shape), comps)
    return ALL[name]


# -- the generic vectors and matrices: a length or a shape is a table entry ----------
# vec2 ... vec4 are named by x y z w; a longer vector's components by their index
# (v[5]); a matrix's by row and column. The entries are made when first named
# (``vector(length=6)``, ``matrix(shape=(2, 3))``, an unpickled ``ad.vec7f``).

def _generic(kind, shape):
    if kind == "vec":
        (n,) = shape
        return f"vec{n}", _XYZW[:n] if n <= 4 else tuple(str(i) for i in range(n))
    r, c = shape
    wide = r >= 10 or c >= 10
    return (f"mat{r}x{c}" if wide else f"mat{r}{c}",
            tuple(f"{i}_{j}" if wide else f"{i}{j}" for i in range(r) for j in range(c)))


def _base(kind, shape):
    """The float64 type of a generic ``kind`` ("vec" or "mat") and ``shape``, made on
    first use."""
    shape = tuple(int(s) for s in shape)
    t = TYPES.get((kind, shape))
    if t is None:
        if len(shape) != (1 if kind == "vec" else 2) or min(shape) < 1:
            raise TypeError(f"a {'vector length' if kind == 'vec' else 'matrix shape'} is "
                            f"{'one' if kind == 'vec' else 'two'} positive integer(s), not "
                            f"{shape}")
        name, comps = _generic(kind, shape)
        t = _define(name, kind, shape, comps)
    return t


def float_dtype(dtype, default=np.float64):
    """The float dtype a vector type holds: ``float`` is ``default`` (float64 in adjoint,
    float32 in Warp's namespace); vectors of ints are refused."""
    if dtype is None or dtype is float:
        return np.dtype(default)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"vector and matrix types hold float32 or float64, not {dtype!r} "
                        "(vectors of ints and of float16 are not supported)")
    return dt


def _variant(base, dtype):
    return ALL[base.name + ("f" if np.dtype(dtype) == np.float32 else "")]


def vector_of(length, dtype=None, default=np.float64):
    """The vector type of ``length`` floats of ``dtype`` (Warp's ``vector(length, dtype)``)."""
    return _variant(_base("vec", (length,)), float_dtype(dtype, default))


def matrix_of(shape, dtype=None, default=np.float64):
    """The matrix type of ``shape`` (rows, columns) of ``dtype`` (Warp's ``matrix(shape,
    dtype)``)."""
    shape = tuple(shape)
    if len(shape) != 2:
        raise TypeError(f"a matrix shape is (rows, columns), not {shape}")
    return _variant(_base("mat", shape), float_dtype(dtype, default))


def _by_name(name):
    if name in ALL:
        return ALL[name]
    m = re.fullmatch(r"(vec|mat)(\d+)(?:x(\d+))?([df]?)", name)
    if m is None:
        raise KeyError(name)
    kind, a, b, suffix = m.groups()
    if kind == "vec":
        shape = (int(a),)
    elif b is not None:
        shape = (int(a), int(b))
    else:
        shape = (int(a[0]), int(a[1:]))
    base = _base(kind, shape)
    return ALL[base.name + suffix]


for _n in (2, 3, 4):
    _define(f"vec{_n}", "vec", (_n,), _XYZW[:_n])
    _define(f"mat{_n}{_n}", "mat", (_n, _n), [f"{i}{j}" for i in range(_n) for j in range(_n)])
_define("quat", "quat", (4,), _XYZW)
_define("transform", "transform", (7,), ("px", "py", "pz", "qx", "qy", "qz", "qw"))

# Spatial vectors and matrices (Warp's Featherstone conventions): a spatial vector is a
# vec6, (w, v): its top three components the angular part, its bottom three the linear
# one; a spatial matrix is a mat66. Other names of those types, as Warp's are.
for _alias, _base_type in (("spatial_vector", _base("vec", (6,))),
                           ("spatial_matrix", _base("mat", (6, 6)))):
    for _suffix in ("", "d", "f"):
        ALL[_alias + _suffix] = ALL[_base_type.name + _suffix]
        ALIASES[_alias + _suffix] = _base_type.name + _suffix


def vector_type(annotation):
    """The ``VectorType`` an annotation names, or None."""
    return annotation if isinstance(annotation, VectorType) else None


def vec_of(n):
    return _base("vec", (n,))


def mat_of(rows, cols=None):
    return _base("mat", (rows, rows if cols is None else cols))
