"""The key of a generated module by its inputs: a warm process finds the module an
earlier one generated without running the transformer.

The text of a generated module is a function of what the transformer and the
emitter read, and nothing else, and ``module_key`` hashes all of it:

- of each kernel and func in it (the kernel, every func it calls, transitively, and
  every func their custom gradients and JVPs call): the name, the source lines as
  ``inspect`` gives them (``frontend/source.py``), the file's name and lines, the
  signature (annotations), the markers adjoint sets on functions it generates
  (``__adjoint_generated__``, ...), its dialect (runtime/dialect.py) and what every
  name and attribute chain of the source is bound to (a number's type and exact value,
  a func's name, a builtin or module by name, any other object by its type);
- a kernel's options (``bounds_check``, ``enable_backward``, ``loop_capacity``), a
  func's custom gradient and JVP;
- the first object's whole file; the target; the optimization passes that run where
  not all (adjoint/build/passes.py); the transformer itself: every module of the adjoint
  package (hashed once per process), gast's source, Python's and numpy's versions.

Two processes that compute one key generate byte-identical text. A transformed func's
tree is frozen until a name it read is rebound (adjoint/build/bindings.py resets it), and
``module_key`` uses its frozen description: a key describes the trees that make the text.

Expects: ``adjoint.api.Kernel``/``Func``-like objects (``name``, ``pyfunc``, ``_tr``,
``_inputs``, and the options and custom rules above).
Guarantees: ``module_key`` is a hex string, or ``None`` where the inputs cannot
be described safely (source unreadable, an unknown annotation, two funcs of one name,
recursion, an attribute that raises): the caller transforms then. Imports no gast and
nothing of the transformer.
"""
import ast
import builtins
import glob
import hashlib
import importlib.util
import inspect
import math
import os
import sys
import textwrap
import threading
import types

import numpy as np

from ..frontend.devicefunc import DeviceFunction
from ..frontend.source import attribute_chains, names_seen, read_source
from .passes import ALL as ALL_OPTIMIZATIONS
from ..runtime import builtins as adb
from ..runtime import dialect as dialects
from ..runtime.structs import is_struct, layout
from ..runtime.types import ArrayType
from ..runtime.vecfuncs import CALLABLE as VECTOR_CALLABLES
from ..runtime.vecfuncs import GENERIC as GENERIC_VECTORS
from ..runtime.vectypes import ALL as VECTOR_TYPES
from ..runtime.vectypes import VectorType

KEY_FORMAT = 2          # bump when what a key describes changes
MARKERS = ("__adjoint_generated__", "__adjoint_forward_only__", "__adjoint_rule__")
_MISSING = ("missing",)


class Unkeyable(Exception):
    """The inputs cannot be described safely: transform instead of looking up."""


def _digest(parts):
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


# the adjoint package (this file is adjoint/build/inputs.py): every folder of the
# transformer (frontend/, derive/, optimize/, emit/, rules/, build/, ...) is under it
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_files(folder):
    """Every .py file under ``folder``, in its subfolders too, sorted: what ``_files_digest``
    hashes."""
    return sorted(glob.glob(os.path.join(glob.escape(folder), "**", "*.py"), recursive=True))


def _files_digest(folder):
    """sha256 of every .py file under ``folder`` (relative names and contents)."""
    h = hashlib.sha256()
    paths = source_files(folder)
    if not paths:       # installed without sources: nothing tells two versions apart
        raise Unkeyable(f"no source files in {folder}")
    for path in paths:
        h.update(os.path.relpath(path, folder).encode() + b"\0")
        with open(path, "rb") as fh:
            h.update(fh.read())
        h.update(b"\0")
    return h.hexdigest()


_lock = threading.Lock()
_memo = {}


def environment():
    """(key format, adjoint's source hash, gast's source hash, Python, numpy): what makes
    the transformer itself; computed once per process."""
    with _lock:
        if "env" not in _memo:      # (an Unkeyable here is raised again on every call)
            spec = importlib.util.find_spec("gast")
            gast_dir = os.path.dirname(spec.origin) if spec and spec.origin else ""
            _memo["env"] = (KEY_FORMAT, _files_digest(SOURCE_DIR),
                            _files_digest(gast_dir) if gast_dir else "no gast",
                            sys.version, np.__version__)
        return _memo["env"]


def _known():
    """{id: (name, object)} of the objects the parser recognises by identity (math
    functions, Python's builtins, ``ad.*``, vector types and builtins), by a name that
    is the same in every process."""
    with _lock:
        if "known" not in _memo:
            table = {}
            for prefix, names in (("", vars(builtins)), ("math.", vars(math)),
                                  ("ad.", vars(adb)), ("ad.", adb.MATH),
                                  ("ad.", VECTOR_CALLABLES), ("ad.", VECTOR_TYPES)):
                for name in sorted(names):
                    if not name.startswith("__"):
                        table.setdefault(id(names[name]), (prefix + name, names[name]))
            for g in GENERIC_VECTORS:       # ad.vector, and adjoint.warp's (float32)
                table.setdefault(id(g), (f"vector.{g.name}.{np.dtype(g.default).name}", g))
            _memo["known"] = table
        return _memo["known"]


def _typename(obj):
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _annotation(a):
    """A parameter annotation (or struct field type), as the parser reads it."""
    if a is inspect.Parameter.empty:
        return ("empty",)
    if isinstance(a, ArrayType):
        return ("array", a.dtype.str, a.ndim, _annotation(a.vtype) if a.vtype else None)
    if isinstance(a, VectorType):
        return ("vector", a.name, a.kind, a.shape, a.dtype.str, a.comps)
    if is_struct(a):
        lay = layout(a)
        return ("struct", a.__module__, a.__qualname__, lay.name,
                tuple((f, _annotation(t)) for f, t in lay.fields))
    if isinstance(a, np.dtype):
        return ("dtype", a.str)
    if isinstance(a, str):
        return ("str", a)
    if isinstance(a, type):
        return ("class", a.__module__, a.__qualname__)
    raise Unkeyable(f"annotation {a!r}")


def _describe(obj, funcs):
    """What the parser makes of ``obj`` when a name or attribute chain gives it; a
    func is appended to ``funcs``."""
    if obj is _MISSING:
        return _MISSING
    if isinstance(obj, DeviceFunction):
        funcs.append(obj)       # (its signature as the caller sees it: struct arguments)
        return ("func", obj.name, _signature(obj.pyfunc))
    if isinstance(obj, (bool, int, float, np.integer, np.floating)) and \
            not isinstance(obj, type):
        value = obj.item() if isinstance(obj, np.generic) else obj
        return ("number", _typename(obj), repr(value), repr(obj))
    known = _known().get(id(obj))
    if known is not None and known[1] is obj:
        return ("known", known[0])
    if isinstance(obj, types.ModuleType):
        return ("module", obj.__name__)
    if isinstance(obj, (ArrayType, VectorType, np.dtype)) or is_struct(obj):
        return ("type", _annotation(obj))
    if isinstance(obj, type):
        return ("class", obj.__module__, obj.__qualname__)
    return ("object", _typename(obj))


def _signature(pyfunc):
    """The parameters (name, kind, annotation, default) and the return annotation."""
    sig = inspect.signature(pyfunc)
    params = tuple((p.name, int(p.kind), _annotation(p.annotation),
                    _describe(p.default, []) if p.default is not inspect.Parameter.empty
                    else None) for p in sig.parameters.values())
    try:                # (not read by the parser: listed all the same)
        returns = _annotation(sig.return_annotation)
    except Unkeyable:
        returns = ("other", _typename(sig.return_annotation))
    return params, returns


def _follow(env, chain):
    """The objects ``chain[0]``, ``chain[0].chain[1]``, ... (``_MISSING`` where one is not
    there, and nothing after it)."""
    name = chain[0]
    if name in env:
        obj = env[name]
    elif hasattr(builtins, name):
        obj = getattr(builtins, name)
    else:
        return [_MISSING]
    out = [obj]
    for attr in chain[1:]:
        try:
            if not hasattr(obj, attr):
                out.append(_MISSING)
                break
            obj = getattr(obj, attr)
        except Exception as exc:  # noqa: BLE001 - a property that raises: do not guess
            raise Unkeyable(f"{'.'.join(chain)}: {exc!r}") from None
        out.append(obj)
    return out


class Own:
    """One function's own inputs: ``desc`` (nested tuples of strings and numbers) and
    the funcs its source names, in order."""

    def __init__(self, desc, funcs):
        self.desc, self.funcs = desc, tuple(funcs)

    def __eq__(self, other):
        return isinstance(other, Own) and self.desc == other.desc and \
            len(self.funcs) == len(other.funcs) and \
            all(a is b for a, b in zip(self.funcs, other.funcs))

    __hash__ = None


def own_inputs(pyfunc, role, bounds_check=True):
    """``Own`` of ``pyfunc`` transformed as ``role`` ("kernel", "func" or "grad"), or
    None where it cannot be described (the transformer then reports what is wrong)."""
    try:
        return _own(pyfunc, role, bounds_check)
    except Unkeyable:
        return None
    except Exception:  # noqa: BLE001 - unreadable source, odd objects: transform instead
        return None


def _own(pyfunc, role, bounds_check):
    filename, first, lines, all_lines = read_source(pyfunc)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    env = names_seen(pyfunc)
    funcs = []
    names = tuple((chain, tuple(_describe(o, funcs) for o in _follow(env, chain)))
                  for chain in attribute_chains(tree))
    markers = tuple(bool(getattr(pyfunc, m, False)) for m in MARKERS)
    desc = (role, pyfunc.__name__, filename, first, _digest(lines), _digest(all_lines),
            _signature(pyfunc), names, markers, dialects.of(pyfunc).name,
            bool(bounds_check) if role == "kernel" else None)
    return Own(desc, funcs)


def _own_of(obj, role):
    """``obj``'s inputs: frozen with its transformed tree when it has one, else read now."""
    if getattr(obj, "_tr", None) is not None:
        own = getattr(obj, "_inputs", None)
    else:
        own = own_inputs(obj.pyfunc, role, getattr(obj, "bounds_check", True))
    if own is None:
        raise Unkeyable(f"{obj.name}: inputs not described")
    return own


def module_key(kernels, funcs, root, target, optimizations=None):
    """The key of the module holding ``kernels`` and ``funcs`` (as ``modules.module_items``)
    generated for ``target`` from ``root``'s file with the optimization passes
    ``optimizations`` (adjoint/build/passes.py; None: all), or None (see the module)."""
    try:
        return _module_key(kernels, funcs, root, target, optimizations)
    except Unkeyable:
        return None
    except Exception:  # noqa: BLE001 - whatever goes wrong here, transforming is safe
        return None


def _module_key(kernels, funcs, root, target, optimizations):
    by_name, entries, path = {}, [], []

    def claim(obj):
        other = by_name.setdefault(obj.name, obj)
        if other is not obj:
            raise Unkeyable(f"two objects named {obj.name}")

    def visit_funcs(called):
        for f in called:
            if not hasattr(f, "custom_grad"):
                raise Unkeyable(f"{f!r} is not an ad.func")
            if any(f is p for p in path):
                raise Unkeyable(f"recursion through {f.name}")
            if f.name in by_name and by_name[f.name] is f:
                continue
            claim(f)
            path.append(f)
            own = _own_of(f, "func")
            custom = []
            for rule in (f.custom_grad, getattr(f, "custom_jvp", None)):
                if rule is None:
                    custom.append(None)
                    continue
                rule_own = own_inputs(rule, "grad")
                if rule_own is None:
                    raise Unkeyable(f"{f.name}: custom rule not described")
                custom.append(rule_own.desc)
                visit_funcs(rule_own.funcs)
            visit_funcs(own.funcs)
            path.pop()
            entries.append(("func", f.name, own.desc, tuple(custom)))

    for k in kernels:
        claim(k)
        own = _own_of(k, "kernel")
        entries.append(("kernel", k.name, own.desc, bool(k.enable_backward),
                        int(k.loop_capacity)) + _zero_tangents(k))
        visit_funcs(own.funcs)
    visit_funcs(funcs)
    filename, _, _, all_lines = read_source(root.pyfunc)
    if os.path.isfile(filename):
        with open(filename, encoding="utf-8") as fh:
            root_text = fh.read()
    else:
        root_text = "".join(all_lines)
    whole = (environment(), target, root.name, _digest([root_text]),
             tuple(sorted(entries, key=lambda e: (e[0], e[1]))))
    if optimizations is not None and optimizations != ALL_OPTIMIZATIONS:
        whole += (("optimizations",) + tuple(sorted(optimizations)),)
    return _digest([repr(whole)])


def _zero_tangents(kernel):
    """A kernel variant's arrays whose tangents are zero (api.Kernel.with_zero_tangents):
    its JVP differs, so its key does (nothing for a kernel itself: keys as they were)."""
    zero = getattr(kernel, "zero_tangents", ())
    return (("zero_tangents",) + tuple(sorted(zero)),) if zero else ()
