"""What the names of a kernel or func were bound to when it was transformed, and whether
they still are: a kernel sees the func its name refers to at launch, never a stale one.

The transformer resolves every free name of a body once (frontend/parse.py: a func, a
number it inlines, a struct, ``math.sin``), and the generated module bakes the result
in. A script or notebook that redefines ``helper`` (or rebinds ``SCALE = 2.0``, or gives
``helper`` a ``@ad.func_grad`` after a first launch) and launches a kernel it did not
redefine must get the new definition, as Python does and as Warp does by rebuilding
the module.

- ``watch_of(pyfunc)`` records, for every free name and attribute chain of a function's
  body (``helper``, ``cfg.n``), where it is looked up and what it gives: ``(namespace,
  key, object)`` (globals, a module's ``__dict__`` or a closure cell). A func the body
  names also contributes its ``_generation`` token, replaced when it is reset or given
  a custom gradient or JVP. Names bound to ``math``, ``numpy`` or ``adjoint`` are not
  watched; a name missing from the globals (a builtin) is watched as missing.
- A kernel's or func's ``_watch`` is read just before it is transformed.
- ``snapshot(root)`` flattens the watches of everything one generated module is made
  from (``root``, every func it calls and their hand-written rules). ``Bindings.current()``
  is a dict lookup per name: the check each launch makes (``Kernel.spec_for``), and
  each call of ``ad.grad``/``ad.jvp``/``ad.hessian`` of a func (``Func.refresh``).
- ``refresh(root)`` resets (tree, modules and everything printed from it dropped, a new
  ``_generation``) every transformed kernel or func reachable from ``root`` whose watch
  no longer holds, callees first: a reset func's callers watched its old generation,
  so they are reset too.

A number rebound to an equal number of the same type (a notebook cell run again) counts
as unchanged. Generated modules (``adjoint generate``) read no globals: nothing here.
Imports no gast and nothing of the transformer.
"""
import ast
import builtins
import textwrap
import types

import numpy as np

from ..frontend.devicefunc import DeviceFunction
from ..frontend.source import attribute_chains, read_source

MISSING = type("Missing", (), {"__repr__": lambda self: "<missing>"})()
STABLE_MODULES = ("math", "cmath", "numpy", "adjoint", "builtins")
RULES = ("custom_grad", "custom_jvp")
_NUMBERS = (bool, int, float, np.integer, np.floating)


def _same_number(now, then):
    """Two equal numbers of one type (``repr`` tells -0.0 and nan apart as the key does)."""
    return type(now) is type(then) and isinstance(then, _NUMBERS) and repr(now) == repr(then)


class Bindings:
    """Names and what they gave: ``names`` ``(mapping, key, object)`` (a ``dict`` or a
    class's ``mappingproxy``: looked up with ``get``), ``attrs`` ``(object, attribute,
    object)`` (a closure cell's ``cell_contents``, an instance's attribute);
    ``funcs``: the funcs they gave (their own watches are separate)."""
    __slots__ = ("names", "attrs", "funcs")

    def __init__(self, names=(), attrs=(), funcs=()):
        seen = set()
        self.names = tuple(n for n in names if (id(n[0]), n[1], id(n[2])) not in seen
                           and not seen.add((id(n[0]), n[1], id(n[2]))))
        self.attrs, self.funcs = tuple(attrs), tuple(funcs)

    def current(self):
        """Whether every name still gives the object it gave (a dict lookup per name)."""
        for mapping, key, then in self.names:
            if mapping.get(key, MISSING) is not then:
                return self._current_slowly()
        try:
            for obj, attr, then in self.attrs:
                if getattr(obj, attr, MISSING) is not then:
                    return self._current_slowly()
        except Exception:  # noqa: BLE001 - an attribute that raises now (an emptied cell)
            return False
        return True

    def _current_slowly(self):
        """``current``, one name at a time: a number rebound to an equal number of its
        type counts as unchanged."""
        for mapping, key, then in self.names:
            now = mapping.get(key, MISSING)
            if now is not then and not _same_number(now, then):
                return False
        try:
            for obj, attr, then in self.attrs:
                now = getattr(obj, attr, MISSING)
                if now is not then and not _same_number(now, then):
                    return False
        except Exception:  # noqa: BLE001 - an attribute that raises now: changed
            return False
        return True

    @classmethod
    def join(cls, parts):
        return cls([n for part in parts for n in part.names],
                   [a for part in parts for a in part.attrs])


class _Never(Bindings):
    """What nothing was built from yet: never current."""
    __slots__ = ()

    def current(self):
        return False


NEVER = _Never()


def _stable(obj):
    return isinstance(obj, types.ModuleType) and \
        obj.__name__.split(".", 1)[0] in STABLE_MODULES


def _free_chains(fdef):
    """Every free name of ``fdef``'s body, with the attribute chain read from it:
    ``("cfg", "n")``; parameters and assigned names are local."""
    local = {a.arg for a in ast.walk(fdef.args) if isinstance(a, ast.arg)}
    body = ast.Module(body=fdef.body, type_ignores=[])
    local |= {n.id for n in ast.walk(body) if isinstance(n, ast.Name) and
              isinstance(n.ctx, (ast.Store, ast.Del))}
    return attribute_chains(body, local)


def _generation(f):
    """A func's ``_generation`` token, replaced when it is reset or given a hand-written
    rule (``api.Func``): what a caller's tree (inlined, its rules read) took from it."""
    d = vars(f)
    return (d, "_generation", d.get("_generation", MISSING))


def watch_of(pyfunc):
    """The bindings of ``pyfunc``'s free names, read now (see the module docstring); empty
    where its source cannot be read (the transformer then says why)."""
    try:
        _, _, lines, _ = read_source(pyfunc)
        fdef = ast.parse(textwrap.dedent("".join(lines))).body[0]
        chains = _free_chains(fdef)
    except Exception:  # noqa: BLE001 - no source, odd source: the transformer reports it
        return Bindings()
    glob = pyfunc.__globals__
    cells = dict(zip(pyfunc.__code__.co_freevars, pyfunc.__closure__ or ()))
    names, attrs, funcs = [], [], []
    for chain in chains:
        name, obj = chain[0], MISSING
        cell = cells.get(name)
        if cell is not None:
            try:
                obj = cell.cell_contents
                attrs.append((cell, "cell_contents", obj))
            except ValueError:          # an empty cell: the parser reads the globals
                pass
        if obj is MISSING:
            obj = glob.get(name, MISSING)
            if not _stable(obj):        # (math, np, ad, wp: not rebound, not watched)
                names.append((glob, name, obj))
            if obj is MISSING:
                obj = getattr(builtins, name, MISSING)
        for attr in chain[1:]:
            if isinstance(obj, DeviceFunction) or obj is MISSING or _stable(obj):
                break
            parent = obj
            try:
                obj = getattr(parent, attr, MISSING)
            except Exception:  # noqa: BLE001 - the transformer reports what it meets
                break
            if isinstance(parent, (types.ModuleType, type)) and attr in vars(parent):
                names.append((vars(parent), attr, obj))     # (a class's: a mappingproxy)
            else:
                attrs.append((parent, attr, obj))
        if isinstance(obj, DeviceFunction) and obj not in funcs:
            funcs.append(obj)
            names.append(_generation(obj))
    return Bindings(names, attrs, funcs)


def _watch(obj):
    """``obj``'s own bindings: frozen with its transformed tree, else read now."""
    if getattr(obj, "_tr", None) is not None and getattr(obj, "_watch", None) is not None:
        return obj._watch
    return watch_of(obj.pyfunc)


def _rules(obj):
    """The bindings of ``obj``'s hand-written rules (read now: a module reads them when it
    is made), and its ``_generation``: what its module took from it."""
    if not isinstance(obj, DeviceFunction):
        return []
    out = [Bindings([_generation(obj)])]
    for key in RULES:
        rule = getattr(obj, key, None)
        if rule is not None:
            out.append(watch_of(rule))
    return out


def _postorder(root):
    """``root`` and every func it reaches, callees first."""
    order, seen = [], set()

    def visit(obj):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        for part in [_watch(obj)] + _rules(obj):
            for f in part.funcs:
                visit(f)
        order.append(obj)
    visit(root)
    return order


def snapshot(root):
    """The bindings everything ``root``'s generated module is made from (module docstring)."""
    parts = []
    for obj in _postorder(root):
        parts.append(_watch(obj))
        parts += _rules(obj)
    return Bindings.join(parts)


def refresh(root):
    """Reset every transformed kernel or func reachable from ``root`` whose names no
    longer give what its tree was made from, and the callers of a reset one."""
    while True:
        reset = False
        for obj in _postorder(root):
            if getattr(obj, "_tr", None) is not None and obj._watch is not None and \
                    not obj._watch.current():
                obj.reset()
                reset = True
        if not reset:
            return
