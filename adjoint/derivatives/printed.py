"""Functions adjoint prints as user-level Python and transforms again (adjoint/emit/user.py
prints them): ``compile_printed`` defines one from its text, its source kept in
``linecache`` so that the transformer reads it as it reads a notebook cell's. The
printed forms of a func and a kernel are made here: the func as printed code calls it
(``scalar_func``), the JVP of a func or kernel (``jvp_func``, ``jvp_kernel``) and the
backward (``vjp_func``, ``vjp_kernel``); adjoint/derivatives/funcs.py and adjoint/derivatives/autograd.py
build higher derivatives on them."""
import inspect
import linecache
import math
import types

from ..api import Func, Kernel
from ..errors import AdjointError
from ..runtime import builtins as _builtins
from ..runtime import types as _types
from ..runtime.array import array as _array
from ..runtime.vectypes import vector_type

# What the printed functions see as ``ad`` (the user-level spellings emit/user.py uses).
_AD = types.SimpleNamespace(
    **{n: getattr(_builtins, n) for n in _builtins.__all__}, array=_array,
    **{n: getattr(_builtins, n) for n in _builtins.STACK},
    float32=_types.float32, float64=_types.float64, int32=_types.int32, int64=_types.int64, bool_=bool)


def compile_printed(text, fname, namespace, forward_only=False):
    """The function ``fname`` defined by ``text``, its source kept in ``linecache`` (so the
    transformer can read it, as it reads a notebook cell's). ``forward_only``: a printed
    backward, whose reverse mode is not built (pipeline.transform)."""
    filename = f"<adjoint generated {fname}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    scope = {"math": math, "ad": _AD, **namespace}
    exec(compile(text, filename, "exec"), scope)     # noqa: S102 - our own generated code
    fn = scope[fname]
    fn.__adjoint_generated__ = True     # may use the adj_/dot_ names reserved to users
    fn.__adjoint_forward_only__ = forward_only
    return fn


def _callees(tr, text):
    """The names a printed function of ``tr`` calls: each func (as ``scalar_func``), and
    its JVP if used."""
    scope = {}
    for g in tr.pf.funcs:
        scope[g.name] = scalar_func(g)
        if f"{g.name}_jvp(" in text:
            scope[g.name + "_jvp"] = jvp_func(g)
    return scope


def scalar_func(g):
    """Func ``g`` as printed code calls it: code is printed after pass scalarize, so a
    call passes a vec3 argument as its three components and unpacks a vec3 result
    (``f_x, f_y, f_z = f(a_x, a_y, a_z)``). ``g`` itself when it takes and returns
    scalars only; else ``g``'s forward printed with its parameters as components (the
    twin keeps ``g``'s name). (A func of vectors with hand-written rules never gets
    here: pass scalarize refuses a call of one, at the user's line.)"""
    tr = g.transformed
    given = list(inspect.signature(g.pyfunc).parameters)
    returns = g.pyfunc.__annotations__.get("return")
    if [p.name for p in tr.pf.params] == given and vector_type(returns) is None:
        return g            # (a struct or vector parameter is split: its name changes)
    cached = g.built.get("scalar_func")
    if cached is None:
        from ..emit.user import annotation, function_text
        params = [(p.name, annotation(p)) for p in tr.pf.params]
        text = function_text(tr, g.name, params, tr.rev.forward)
        cached = g.built["scalar_func"] = Func(compile_printed(text, g.name, _callees(tr, text)))
    return cached


def jvp_func(f):
    """The JVP of func ``f`` as a func of its own, ``<f>_jvp(params..., dot_ of each float
    param)`` returning ``(values..., their tangents...)``: valid input to the transformer."""
    if not isinstance(f, Func):
        raise TypeError(f"jvp_func expects an @ad.func, got {type(f).__name__}")
    cache = f.built.setdefault("jvp_funcs", {})
    key = (f.custom_grad, f.custom_jvp)         # rules given after a first use count
    if key in cache:
        return cache[key]
    if f.custom_jvp is not None:
        cache[key] = Func(f.custom_jvp)
        return cache[key]
    if f.custom_grad is not None:
        raise AdjointError(f"func '{f.name}' has a custom gradient (@ad.func_grad) and no "
                           "@ad.func_jvp: its forward mode (and so its higher derivatives) "
                           "would not use the gradient")
    from ..emit.user import annotation, function_text
    tr = f.transformed
    params = [(p.name, annotation(p)) for p in tr.pf.params] + \
        [(d, "ad.float64") for d in tr.tangent.dot_params]
    text = function_text(tr, f"{f.name}_jvp", params, tr.tangent.body)
    cache[key] = Func(compile_printed(text, f"{f.name}_jvp", _callees(tr, text)))
    return cache[key]


def _callee_scope(tr, text):
    """The names a printed backward of ``tr`` calls: each func, its JVP and its VJP if used."""
    scope = _callees(tr, text)
    for g in tr.pf.funcs:
        if f"{g.name}_vjp(" in text:
            scope[g.name + "_vjp"] = vjp_func(g)
    return scope


def vjp_func(f):
    """The backward of func ``f`` as a func of its own, ``<f>_vjp(params..., adj_ret...)``
    returning the adjoints of ``f``'s parameters (a tuple when there are several): valid
    input to the transformer, whose forward mode differentiates it again."""
    if not isinstance(f, Func):
        raise TypeError(f"vjp_func expects an @ad.func, got {type(f).__name__}")
    cache = f.built.setdefault("vjp_funcs", {})
    key = (f.custom_grad, f.custom_jvp)
    if key in cache:
        return cache[key]
    if f.custom_grad is not None:
        raise AdjointError(f"func '{f.name}' has a custom gradient (@ad.func_grad): its "
                           "backward is the user's, which adjoint cannot differentiate again")
    from ..emit.user import backward_text
    text = backward_text(f.transformed, f"{f.name}_vjp")
    cache[key] = Func(compile_printed(text, f"{f.name}_vjp", _callee_scope(f.transformed, text),
                               forward_only=True))
    return cache[key]


def vjp_kernel(k):
    """The backward of kernel ``k`` as a kernel of its own: its parameters, then an adjoint
    array per float array parameter (``adj_<name>``), in order. Launched, it accumulates
    into the input adjoints as ``ad.launch(k, ..., adjoint=True)`` does; its forward mode
    (``tangents=``) is forward over reverse."""
    k.refresh()             # (made from what k's names give now: adjoint/build/bindings.py)
    cached = k.built.get("vjp_kernel")
    if cached is not None:
        return cached
    from ..emit.user import backward_text
    tr = k.transformed
    text = backward_text(tr, f"{k.name}_vjp")
    pyfunc = compile_printed(text, f"{k.name}_vjp", _callee_scope(tr, text), forward_only=True)
    k.built["vjp_kernel"] = Kernel(pyfunc, enable_backward=False,
                                   loop_capacity=k.loop_capacity, bounds_check=k.bounds_check)
    return k.built["vjp_kernel"]


def jvp_kernel(k):
    """The JVP of kernel ``k`` as a kernel of its own: its parameters, then a tangent
    array per float array parameter (``dot_<name>``), in order."""
    k.refresh()             # (made from what k's names give now: adjoint/build/bindings.py)
    cached = k.built.get("jvp_kernel")
    if cached is not None:
        return cached
    from ..emit.spec import jvp_refusal
    from ..emit.user import annotation, function_text
    tr = k.transformed
    why = jvp_refusal(tr)
    if why is not None:
        raise AdjointError(f"kernel {k.name!r} has no JVP: {why}")
    params = [(p.name, annotation(p)) for p in tr.pf.params] + \
        [(d, annotation(p)) for d, p in zip(tr.tangent.dot_params, tr.pf.differentiable())]
    text = function_text(tr, f"{k.name}_jvp", params, tr.tangent.body)
    pyfunc = compile_printed(text, f"{k.name}_jvp", _callees(tr, text))
    k.built["jvp_kernel"] = Kernel(pyfunc, loop_capacity=k.loop_capacity,
                                   bounds_check=k.bounds_check)
    return k.built["jvp_kernel"]
