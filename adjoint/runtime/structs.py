"""``@ad.struct``: classes with typed fields, passed whole to kernels and funcs.

```python
@ad.struct
class Body:
    x: ad.array(dtype=float)        # arrays (gradients flow to float ones)
    mass: float                     # scalars: float, int, ad.float32, ...
    shape: Other                    # another struct (nested)
    g: ad.vec3                      # a vector (numpy values, or a shape-(3,) ad.array)

b = Body(x=ad.array(..., requires_grad=True), mass=2.0)   # or Body(); b.x = ...
```

The transformer flattens a struct parameter into one parameter per leaf field
(frontend/parse.py: ``b: Body`` becomes ``b_x, b_mass, b_shape_...``, ``b.x`` the
name ``b_x``), and ``launch`` flattens the instance the same way (``flatten_args``),
so everything between sees plain arrays and scalars. A gradient reaches the
``ad.Array`` held in a field: ``b.x.grad``. ``leaves`` is the one definition of
the order and names both sides use. A vector field is a leaf like an array: pass
scalarize then treats ``b_g`` as any vector parameter.
"""
import inspect
import weakref
from dataclasses import dataclass

from . import dialect as dialects
from .types import STRUCT_ATTR as ATTR
from .types import ArrayType, scalar_dtype
from .vectypes import VectorType


@dataclass(frozen=True)
class Layout:
    """A struct class's fields, in declaration order: ``(name, type)`` where the type
    is an ``ArrayType``, a ``VectorType``, a numpy scalar dtype or another struct class."""
    name: str
    fields: tuple


def is_struct(cls):
    return isinstance(cls, type) and isinstance(cls.__dict__.get(ATTR), Layout)


def layout(cls):
    return cls.__dict__[ATTR]


def leaves(cls, path=()):
    """``[(path, type)]``: every array or scalar field of struct ``cls``, nested structs
    flattened in place, in declaration order (``path`` a tuple of field names)."""
    out = []
    for fname, ftype in layout(cls).fields:
        if is_struct(ftype):
            out += leaves(ftype, path + (fname,))
        else:
            out.append((path + (fname,), ftype))
    return out


def flat_name(param, path):
    """The name of a leaf of struct parameter ``param`` in generated code: ``b_x``."""
    return "_".join((param,) + tuple(path))


def _field_type(cls, fname, annotation):
    if isinstance(annotation, (ArrayType, VectorType)) or is_struct(annotation):
        return annotation
    dt = scalar_dtype(annotation, dialects.of(cls))
    if dt is None:
        raise TypeError(f"@ad.struct {cls.__name__}: field '{fname}' has unsupported type "
                        f"{annotation!r} (use ad.array(dtype=...), float, int, ad.float32, ... "
                        "a vector type such as ad.vec3, or another @ad.struct)")
    return dt


def struct(cls):
    """Decorator: make ``cls`` a struct (see the module). Its instances take their fields
    as keywords or positionally; a field left out is ``None`` (an array, a struct) or
    zero (a scalar) until assigned. A field ``float`` is what the class's dialect says
    (runtime/dialect.py: float64, or float32 under ``@wp.struct``)."""
    notes = cls.__dict__.get("__annotations__", {})
    if not notes:
        raise TypeError(f"@ad.struct {cls.__name__}: declare its fields with annotations "
                        "(x: ad.array(dtype=float), m: float)")
    fields = tuple((f, _field_type(cls, f, a)) for f, a in notes.items())
    setattr(cls, ATTR, Layout(cls.__name__, fields))
    names = [f for f, _ in fields]

    def __init__(self, *args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__} takes at most {len(names)} fields")
        for f, t in fields:
            default = None if isinstance(t, (ArrayType, VectorType)) or is_struct(t) \
                else t.type(0).item()
            setattr(self, f, default)
        for f, v in zip(names, args):
            setattr(self, f, v)
        for f, v in kwargs.items():
            if f not in names:
                raise TypeError(f"{cls.__name__} has no field '{f}' (fields: {', '.join(names)})")
            setattr(self, f, v)

    def __repr__(self):
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in names)
        return f"{cls.__name__}({inner})"
    if "__init__" not in cls.__dict__:
        cls.__init__ = __init__
    if "__repr__" not in cls.__dict__:
        cls.__repr__ = __repr__
    return cls


_SIGNATURES = weakref.WeakKeyDictionary()    # pyfunc -> (struct_params, parameter names)


def _signature(pyfunc):
    """``(struct_params(pyfunc), parameter names)``, read once per function: ``launch``
    asks on every call, and ``inspect.signature`` was 40% of a small launch's cost."""
    got = _SIGNATURES.get(pyfunc)
    if got is None:
        params = inspect.signature(pyfunc).parameters.values()
        kinds = tuple((k, p.annotation if is_struct(p.annotation) else None)
                      for k, p in enumerate(params))
        got = (kinds, tuple(p.name for p in params), any(cls for _, cls in kinds))
        _SIGNATURES[pyfunc] = got
    return got


def struct_params(pyfunc):
    """``((parameter position, struct class or None), ...)`` of a kernel's signature."""
    return _signature(pyfunc)[0]


def parameter_names(kernel):
    """The names of ``kernel``'s parameters as its user wrote them (a struct parameter is
    one name), or None for a kernel that is only a generated spec."""
    pyfunc = getattr(kernel, "pyfunc", None)
    return None if pyfunc is None else list(_signature(pyfunc)[1])


def _values(kernel_name, pname, cls, value, path=()):
    """The leaf values of struct instance ``value``, in ``leaves`` order."""
    if value is None:
        return [None] * len(leaves(cls))
    if not isinstance(value, cls):
        raise TypeError(f"kernel '{kernel_name}': parameter '{pname}' is a {cls.__name__}, "
                        f"got {type(value).__name__}")
    out = []
    for fname, ftype in layout(cls).fields:
        v = getattr(value, fname, None)
        where = ".".join((pname,) + path + (fname,))
        if is_struct(ftype):
            if v is None:
                raise TypeError(f"kernel '{kernel_name}': field '{where}' (a "
                                f"{ftype.__name__}) is not set")
            out += _values(kernel_name, pname, ftype, v, path + (fname,))
        else:
            if v is None:
                raise TypeError(f"kernel '{kernel_name}': field '{where}' is not set")
            out.append(v)
    return out


def flatten_args(kernel, inputs, outputs, adj_inputs=None, adj_outputs=None):
    """``(inputs, outputs, adj_inputs, adj_outputs)`` of a launch of ``kernel`` with every
    struct argument replaced by its leaf values (an adjoint list's ``None`` entry by
    ``None`` per leaf; a list left out stays ``None``). Unchanged for a kernel without
    struct parameters (or one that is only a generated spec)."""
    pyfunc = getattr(kernel, "pyfunc", None)
    if pyfunc is None:
        return inputs, outputs, adj_inputs, adj_outputs
    kinds, names, has_structs = _signature(pyfunc)
    if not has_structs:
        return inputs, outputs, adj_inputs, adj_outputs

    def flat(lst, start):
        if lst is None:
            return None
        out = []
        for k, v in enumerate(lst, start):
            cls = kinds[k][1] if k < len(kinds) else None
            out += _values(kernel.name, names[k], cls, v) if cls is not None else [v]
        return out
    n = len(inputs)
    return flat(inputs, 0), flat(outputs, n), flat(adj_inputs, 0), flat(adj_outputs, n)
