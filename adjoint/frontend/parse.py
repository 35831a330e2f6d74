"""Pass parse: user function -> gast tree with every name resolved.

Expects: a plain Python function whose source Python can find: defined in a
file, or in a Jupyter/IPython cell (IPython keeps each cell's text in
``linecache``, under names like ``<ipython-input-3-…>`` or
``/tmp/ipykernel_…/….py``). A function made by ``exec`` of a string has no
source: that is an error naming it.
Guarantees: a ``ParsedFunction`` whose ``node`` is a ``gast.FunctionDef`` with
line numbers pointing into the user's file; every call carries a ``Callee``
record (what it calls: a math function, a builtin, ``ad.tid``, an atomic, a
device func); every global number is inlined as a constant; every other free
name is an error naming file and line.
"""
import builtins
import contextlib
import inspect
import math
import os
import textwrap
import threading
from dataclasses import dataclass, field

import gast
import numpy as np

from ..errors import AdjointError, TransformError
from ..rules import RULES, lookup
from ..runtime import builtins as adb
from ..runtime import dialect as dialects
from ..runtime.structs import is_struct
from ..runtime.vecfuncs import CALLABLE as VECTOR_CALLABLES
from ..runtime.vecfuncs import GENERIC as GENERIC_VECTORS
from ..runtime.vectypes import VectorType
from . import choose
from .annotations import add_parameters, gast_to_text
from .devicefunc import DeviceFunction
from .fence import reject_syntax
from .refusals import PYTHON_ONLY, PYTHON_ONLY_MODULE, python_only, unsupported_call
from .source import names_seen, read_source
from .structs import StructParams

# Reserved names: the generated module uses them for its imports.
RESERVED = {"math", "rt", "np"}
# attributes of a value: a vector's or quaternion's components, a transform's parts
# (translation and rotation, as in Warp); a local's: arr.shape too (checked by pass scalarize)
COMPONENTS = ("x", "y", "z", "w", "p", "q")
ATTRIBUTES = ("shape",) + COMPONENTS
def resolve(spelling):
    """The Python object a rule's spelling names: ``math.sin``, ``ad.clamp`` (this
    package's ``adjoint.runtime.builtins``), ``abs`` (Python's builtin)."""
    owner, _, attr = spelling.rpartition(".")
    return getattr({"": builtins, "math": math, "ad": adb}[owner], attr)


def _callables():
    """Python objects callable inside kernels, by id: (callee kind, canonical name).

    Every spelling of a call-style rule (rules/registry.py ``Rule.spellings``: its symbol
    and aliases) is an op, and so is every ``ad.<name>`` math function (the runtime
    builtins a user calls, runtime/builtins.py): the op of the rule whose generated code
    calls ``rt.<name>`` (``ad.sin`` is ``math.sin`` itself, one entry for both)."""
    table = {id(builtins.range): ("range", "range"), id(adb.tid): ("tid", "tid"),
             id(adb.atomic_add): ("atomic", "atomic_add"),
             id(adb.atomic_sub): ("atomic", "atomic_sub"),
             id(adb.atomic_min): ("atomic", "atomic_min"),
             id(adb.atomic_max): ("atomic", "atomic_max"),
             id(adb.atomic_and): ("atomic", "atomic_and"),
             id(adb.atomic_or): ("atomic", "atomic_or"),
             id(adb.atomic_xor): ("atomic", "atomic_xor"),
             id(builtins.print): ("print", "print"),
             id(adb.where): ("choose", "where"), id(adb.select): ("choose", "select")}
    table.update({id(getattr(adb, n)): ("stack", n) for n in adb.STACK})
    by_runtime = {r.runtime: key for key, r in RULES.items() if r.runtime}
    pairs = [(resolve(s), key, s) for key, r in sorted(RULES.items()) for s in r.spellings]
    pairs += [(fn, by_runtime[name], f"ad.{name}") for name, fn in adb.MATH.items()
              if name in by_runtime]
    for obj, key, spelling in pairs:
        known = table.setdefault(id(obj), ("op", key))
        if known != ("op", key):
            raise ValueError(f"{spelling} is the rule of both {known[1]} and {key}")
    # vector types and builtins (ad.vec3, ad.dot, ...): expanded by pass scalarize
    table.update({id(obj): ("vector", name) for name, obj in VECTOR_CALLABLES.items()})
    table.update({id(g): ("vector", g.name) for g in GENERIC_VECTORS})    # wp.vector too
    return table


CALLABLES = _callables()


@dataclass
class SourceInfo:
    """Where a function came from, to quote it in errors and comments.

    ``filename`` is a file, or the name a notebook cell's text is kept under in
    ``linecache``; ``lines`` are all the lines of that file or cell."""
    filename: str
    first_line: int
    lines: list

    def line(self, lineno):
        if 1 <= lineno <= len(self.lines):
            return self.lines[lineno - 1].rstrip("\n")
        return ""

    def is_file(self):
        return os.path.isfile(self.filename)

    def text(self):
        """The whole source text: the file as it is on disk, or the cell's text."""
        if self.is_file():
            with open(self.filename, encoding="utf-8") as fh:
                return fh.read()
        return "".join(self.lines)

    def display_name(self):
        """A short name for generated modules and messages: the file's name, or the
        cell's name without folder and angle brackets (``ipython-input-3-…``)."""
        return os.path.basename(self.filename).strip("<>") or "<unknown>"


@dataclass(frozen=True)
class Callee:
    """What a call node calls. ``kind``: op, range, tid, atomic, print, stack (the loop
    stacks of a generated backward printed as user code, ``ad.stack_*``) or func; for a func,
    ``part`` says which of its generated functions: "forward" (the user's call),
    "adjoint" (pass reverse) or "jvp" (pass jvp). A fact, shared by every copy of its
    node: a deep copy of a tree does not copy the func it names."""
    kind: str
    name: str
    target: object = None
    part: str = "forward"

    def __deepcopy__(self, memo):
        return self


@dataclass
class ParsedFunction:
    name: str
    role: str                      # "kernel" or "func"
    node: object                   # gast.FunctionDef
    source: SourceInfo
    params: list
    pyfunc: object
    funcs: list = field(default_factory=list)   # Func objects called from here
    structs: StructParams = field(default_factory=lambda: StructParams(()))  # frontend/structs.py
    vectors: object = None  # pass scalarize: the vector signature (scalarize.VectorSignature)
    dialect: dialects.Dialect = dialects.ADJOINT   # what float and % mean (runtime/dialect.py)

    def differentiable(self):
        """The parameters that have derivatives (adjoints, tangents): a kernel's float
        arrays, a func's floats."""
        return [p for p in self.params if p.kind.differentiable and
                (p.is_array or self.role != "kernel")]

    def error(self, reason, node=None, stage="parse"):
        lineno = getattr(node, "lineno", self.node.lineno) if node is not None else self.node.lineno
        col = getattr(node, "col_offset", 0) if node is not None else 0
        origin = getattr(node, "inlined_from", None)      # (pass inline: a func's statement)
        if origin is not None:
            func, source, line = origin
            reason += (f" (inside func '{func}', {source.filename}:{line}: "
                       f"{source.line(line).strip()})")
        return TransformError(reason, filename=self.source.filename, lineno=lineno, col=col,
                              source_line=self.source.line(lineno), stage=stage,
                              function=self.name)


def parse(pyfunc, role):
    """Parse ``pyfunc`` (a kernel or a func) into a resolved ``ParsedFunction``."""
    filename, first, lines, all_lines = read_source(pyfunc)
    src = SourceInfo(filename, first, all_lines)
    tree = gast.parse(textwrap.dedent("".join(lines)))
    fdef = tree.body[0]
    if not isinstance(fdef, gast.FunctionDef):
        raise TransformError("expected a function definition", filename=filename,
                             lineno=first, source_line=src.line(first), stage="parse")
    indent = len(lines[0]) - len(lines[0].lstrip())
    for node in gast.walk(fdef):
        if hasattr(node, "lineno"):
            node.lineno += first - 1
            if hasattr(node, "col_offset"):
                node.col_offset += indent
    fdef.decorator_list = []
    sig = inspect.signature(pyfunc)
    dialect = dialects.of(pyfunc)
    structs = StructParams({n.id for n in gast.walk(fdef) if isinstance(n, gast.Name)} |
                           set(sig.parameters))
    pf = ParsedFunction(pyfunc.__name__, role, fdef, src, [], pyfunc, structs=structs,
                        dialect=dialect)
    add_parameters(pf, sig, role)
    if role != "grad":
        reject_syntax(pf)
    resolver = _Resolver(pf, pyfunc)
    fdef.body = [n for s in fdef.body for n in _listed(resolver.visit(s))]
    fdef.returns = None
    for a in fdef.args.args:
        a.annotation = None
    return pf


_transforming = threading.local()


def _in_progress():
    """Functions whose transformation is under way on this thread, outermost first."""
    if not hasattr(_transforming, "stack"):
        _transforming.stack = []
    return _transforming.stack


@contextlib.contextmanager
def transforming(pyfunc):
    """Mark ``pyfunc`` as being transformed: a call to it met meanwhile is recursion."""
    _in_progress().append(pyfunc)
    try:
        yield
    finally:
        _in_progress().pop()


class _Resolver(gast.NodeTransformer):
    """Resolve calls and free names against the function's globals."""

    def __init__(self, pf, pyfunc):
        self.pf = pf
        self.env = names_seen(pyfunc)
        self.generated = getattr(pyfunc, "__adjoint_generated__", False)
        self.locals = {p.name for p in pf.params}
        stores = {}         # each local's first assignment, where a reserved name is reported
        for node in gast.walk(pf.node):
            if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store):
                self.locals.add(node.id)
                first = stores.get(node.id)
                if first is None or (node.lineno, node.col_offset) < (first.lineno,
                                                                       first.col_offset):
                    stores[node.id] = node
        for name in sorted(self.locals):
            if name in RESERVED or (name.startswith(("adj_", "dot_")) and pf.role != "grad"
                                    and not getattr(pyfunc, "__adjoint_generated__", False)
                                    and not getattr(pyfunc, "__adjoint_rule__", False)):
                raise pf.error(f"the name '{name}' is reserved in generated code "
                               "(as are names starting with adj_ or dot_); rename it",
                               stores.get(name))

    def _lookup(self, expr):
        """Python object an expression like ``math.sin`` or ``ad.tid`` names, or raise."""
        if isinstance(expr, gast.Name):
            if expr.id in self.locals:
                raise self.pf.error(f"'{expr.id}' is a local variable, not a function", expr)
            if expr.id in self.env:
                return self.env[expr.id]
            if hasattr(builtins, expr.id):
                return getattr(builtins, expr.id)
            raise self.pf.error(f"unknown name '{expr.id}'", expr)
        if isinstance(expr, gast.Attribute):
            base = self._lookup(expr.value)
            try:
                return getattr(base, expr.attr)
            except AttributeError as exc:
                # a namespace refusing a name says why (adjoint.warp: wp.mesh_query_point)
                reason = str(exc) if isinstance(exc, AdjointError) else \
                    f"'{gast_to_text(expr.value)}' has no attribute '{expr.attr}'"
                raise self.pf.error(reason, expr) from None
        if isinstance(expr, gast.Call):          # ad.grad(f)(x)
            obj = self._lookup(expr.func)
            if getattr(obj, "__module__", None) == PYTHON_ONLY_MODULE and \
                    getattr(obj, "__name__", None) in PYTHON_ONLY:
                raise self.pf.error(python_only(gast_to_text(expr.func),
                                                 _first_argument(expr)), expr)
            raise self.pf.error(f"calling what a call returns ({gast_to_text(expr)}(...)) is "
                                "not supported", expr)
        raise self.pf.error("unsupported call target", expr)

    def visit_Assign(self, node):
        """``s = MyStruct()``: its fields' locals, zeroed (frontend/structs.py)."""
        v = node.value
        if isinstance(v, gast.Call) and isinstance(v.func, (gast.Name, gast.Attribute)) and \
                not (isinstance(v.func, gast.Name) and v.func.id in self.locals):
            cls = self._lookup(v.func)
            if is_struct(cls):
                made = self.pf.structs.construct(node, cls, self.pf, _zero_vector)
                self.locals |= {s.targets[0].id for s in made}
                return made
        return self.generic_visit(node)

    def visit_Expr(self, node):
        call = node.value
        fname = getattr(getattr(call, "func", None), "attr", None) or \
            getattr(getattr(call, "func", None), "id", None)
        if isinstance(call, gast.Call) and fname in choose.OUT_ARGUMENTS and \
                len(call.args) > 1 and self._lookup(call.func) is VECTOR_CALLABLES.get(fname):
            return self.visit(choose.out_arguments(node, fname, self.pf.error))
        return self.generic_visit(node)

    def visit_Call(self, node):
        if self._lookup(node.func) is builtins.len:
            return self._length(node)
        obj = self._lookup(node.func)
        if not (isinstance(obj, (DeviceFunction, VectorType)) or id(obj) in CALLABLES):
            # (before its arguments are read: ad.jvp(f, ...)'s f is no value of a kernel)
            raise self.pf.error(unsupported_call(obj, gast_to_text(node.func), CALLABLES,
                                                  _first_argument(node)), node)
        if CALLABLES.get(id(obj), ("",))[0] == "choose":       # wp.where: the ternary
            return self.visit(choose.ternary(node, CALLABLES[id(obj)][1], self.pf.error))
        if isinstance(obj, DeviceFunction):
            node.args, node.keywords = self._bind(obj, node), []
        if node.keywords and not _vector_call(obj):
            raise self.pf.error("keyword arguments are not supported in kernels and funcs, "
                                "but in calls of an @ad.func", node.keywords[0].value)
        node.args = self.pf.structs.expand(
            node.args, obj if isinstance(obj, DeviceFunction) else None, self.pf, node)
        node.args = [self.visit(a) for a in node.args]
        for kw in node.keywords:        # a constructor's: ad.transform(p=ad.vec3(...))
            if isinstance(obj, VectorType) and kw.arg in obj.keywords:
                kw.value = self.visit(kw.value)
        if isinstance(obj, DeviceFunction):
            if obj.pyfunc in _in_progress():
                chain = " -> ".join(f.__name__ for f in _in_progress()) + f" -> {obj.name}"
                raise self.pf.error(f"recursion is not supported: '{self.pf.name}' calls "
                                    f"'{obj.name}', which is being transformed ({chain}); "
                                    "write the recursion as a loop", node)
            node.callee = Callee("func", obj.name, obj)
            node.func = _name(obj.name)
            if obj not in self.pf.funcs:
                self.pf.funcs.append(obj)
        elif id(obj) in CALLABLES:
            kind, name = CALLABLES[id(obj)]
            if kind == "stack" and not self.generated:
                raise self.pf.error(f"ad.{name} is a loop stack of a backward printed by "
                                    "adjoint (stage backward_user), which adjoint transforms "
                                    "itself; kernels and funcs you write keep values in locals "
                                    "and arrays", node)
            node.callee = Callee(kind, name)
            if kind == "op":
                node.func = lookup(name).callee_expr()
            else:
                node.func = _name(name)
        else:                                  # a vector type made when first named (ad.vec6)
            node.callee = Callee("vector", obj.name)
            node.func = _name(obj.name)
        return node

    def _bind(self, func, node):
        """The arguments of a call of ``func`` in the order of its parameters: keyword
        arguments put in place, left-out parameters given their defaults (numbers)."""
        params = list(inspect.signature(func.pyfunc).parameters.values())
        where = f"func '{func.name}' ({', '.join(p.name for p in params)})"
        if len(node.args) > len(params):
            raise self.pf.error(f"{where} takes {len(params)} arguments, got "
                                f"{len(node.args)}", node)
        given = dict(zip((p.name for p in params), node.args))
        for kw in node.keywords:
            if kw.arg is None or kw.arg not in {p.name for p in params}:
                raise self.pf.error(f"{where} has no parameter '{kw.arg}'", kw.value)
            if kw.arg in given:
                raise self.pf.error(f"{where}: parameter '{kw.arg}' is given twice", kw.value)
            given[kw.arg] = kw.value
        order = [kw.arg for kw in node.keywords]
        if order != sorted(order, key=[p.name for p in params].index) and \
                any(isinstance(n, gast.Call) for kw in node.keywords for n in gast.walk(kw.value)):
            raise self.pf.error(f"{where}: keyword arguments that call functions are evaluated "
                                "in the parameters' order here, not as written: write them in "
                                "that order", node.keywords[0].value)
        args = []
        for p in params:
            if p.name in given:
                args.append(given[p.name])
            elif type(p.default) in (int, float, bool):
                args.append(gast.copy_location(gast.Constant(value=p.default, kind=None), node))
            else:
                raise self.pf.error(f"{where}: parameter '{p.name}' is not given" + (
                    "" if p.default is inspect.Parameter.empty else
                    f" and its default, {p.default!r}, is not a number"), node)
        return args

    def _length(self, node):
        """``len(a)`` of an array parameter ``a``: ``a.shape[0]`` (as in Warp)."""
        arrays = {p.name for p in self.pf.params if p.is_array}
        if len(node.args) != 1 or node.keywords or not isinstance(node.args[0], gast.Name) \
                or node.args[0].id not in arrays:
            raise self.pf.error("len() takes one array parameter of the kernel or func (its "
                                "length along the first axis, a.shape[0]); write x.shape[k] "
                                "for another axis", node)
        shape = gast.Attribute(value=node.args[0], attr="shape", ctx=gast.Load())
        out = gast.Subscript(value=shape, slice=gast.Constant(value=0, kind=None),
                             ctx=gast.Load())
        for new in (shape, out, out.slice):
            gast.copy_location(new, node)
        return self.visit(out)

    def visit_Attribute(self, node):
        flat = self.pf.structs.field(node, self.pf)       # s.x, s.x.shape of a struct
        if flat is not None:
            return flat
        # a value's attributes: arr.shape of a local, components (v.x, p[i].x, t.p.x);
        # math.pi etc. are inlined
        root = node.value
        while isinstance(root, gast.Attribute):
            root = root.value
        local = isinstance(root, gast.Name) and root.id in self.locals
        if local or not isinstance(root, gast.Name):
            allowed = ATTRIBUTES if local and root is node.value else COMPONENTS
            if node.attr not in allowed:
                raise self.pf.error(f"attribute '.{node.attr}' is not supported (only arr.shape, "
                                    "v.x, v.y, v.z, v.w of a vector or quaternion, and t.p, "
                                    "t.q of a transform: its translation and rotation)", node)
            node.value = self.visit(node.value)
            return node
        obj = self._lookup(node)
        return self._constant(obj, node)

    def visit_Name(self, node):
        if node.id in self.pf.structs:
            raise self.pf.structs.bare(node, self.pf)
        if not isinstance(node.ctx, gast.Load) or node.id in self.locals:
            return node
        obj = self._lookup(node)
        return self._constant(obj, node)

    def _constant(self, obj, node):
        if isinstance(obj, (bool, int, float, np.integer, np.floating)) and not isinstance(obj, type):
            value = obj.item() if isinstance(obj, np.generic) else obj
            const = gast.Constant(value=value, kind=None)
            return gast.copy_location(const, node)
        raise self.pf.error(f"'{gast_to_text(node)}' ({type(obj).__name__}) cannot be used "
                            "inside a kernel; only numbers, math.*, ad.* and funcs", node)


def _vector_call(obj):
    """Whether ``obj`` is a vector type or builtin (whose keywords, ``ad.identity(n=3)``,
    pass scalarize reads)."""
    return CALLABLES.get(id(obj), ("",))[0] == "vector" or isinstance(obj, VectorType)


def _first_argument(call):
    """The text of ``call``'s first argument when it is a name (``f`` of ``ad.grad(f)``),
    else "f"."""
    args = call.args
    return args[0].id if args and isinstance(args[0], gast.Name) else "f"


def _listed(node):
    return node if isinstance(node, list) else [node]


def _zero_vector(vt):
    """``vt()``, the zero vector, as the resolver spells a constructor's call."""
    node = gast.Call(func=_name(vt.name), args=[], keywords=[])
    node.callee = Callee("vector", vt.name)
    return node


def _name(id_):
    return gast.Name(id=id_, ctx=gast.Load(), annotation=None, type_comment=None)
