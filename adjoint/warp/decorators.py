"""``wp.kernel``, ``wp.func``, ``wp.func_grad``, ``wp.struct``: adjoint's decorators, with
Warp's meanings.

Each marks what it decorates with the Warp dialect (runtime/dialect.py) before handing it
to adjoint's own decorator, so the parser reads ``float`` in its annotations as float32,
``int`` as int32, and its ``/ // %`` as Warp's (C's where they differ from Python's).
``wp.set_module_options({"enable_backward": False})`` applies, as in Warp, to the kernels
of the module that calls it: those decorated after the call.
"""
import sys

from .. import api
from ..runtime import dialect
from ..runtime.structs import struct as _ad_struct
from .errors import refuse
from .runtime import config

_MODULE_OPTIONS = {}        # module name -> {option: value} (wp.set_module_options)
_DEFAULTS = {"enable_backward": True, "max_unroll": 16, "mode": None, "fast_math": False,
             "fuse_fp": True, "lineinfo": False, "block_dim": 256}


def _caller_module(depth=2):
    return sys._getframe(depth).f_globals.get("__name__", "__main__")


def set_module_options(options, module=None):
    """Warp's module options for the calling module (or ``module``, a module or its name).
    ``enable_backward`` is honoured by the kernels decorated after the call; the others
    are kept (``get_module_options``) and have no effect on adjoint's code."""
    name = getattr(module, "__name__", module) or _caller_module()
    _MODULE_OPTIONS.setdefault(name, dict(_DEFAULTS)).update(options)


def get_module_options(module=None):
    """The calling module's options (``set_module_options``), Warp's defaults included."""
    name = getattr(module, "__name__", module) or _caller_module()
    return dict(_MODULE_OPTIONS.get(name, _DEFAULTS))


def kernel(f=None, *, enable_backward=None, module=None, launch_bounds=None):
    """``@wp.kernel`` (also ``@wp.kernel(enable_backward=False)``): an adjoint kernel whose
    source means what Warp's does. ``module`` and ``launch_bounds`` are accepted and have
    no effect (adjoint generates one module per kernel, launches as numba does)."""
    def make(fn):
        backward = enable_backward
        if backward is None:
            options = _MODULE_OPTIONS.get(fn.__module__, {})
            backward = options.get("enable_backward", config.enable_backward)
        return api.kernel(dialect.mark(fn, dialect.WARP), enable_backward=bool(backward))
    return make if f is None else make(f)


def func(f=None, *, name=None, **_options):
    """``@wp.func``: an adjoint func whose source means what Warp's does. A second func of
    one name replaces the first (Warp overloads funcs by their argument types)."""
    def make(fn):
        return api.func(dialect.mark(fn, dialect.WARP))
    return make if f is None else make(f)


def func_grad(f):
    """``@wp.func_grad(f)``: a hand-written adjoint of func ``f`` in adjoint's form,
    ``def g(<f's params>, adj_ret)`` *returning* the adjoints of ``f``'s float parameters.
    (Warp's form accumulates with ``wp.adjoint[x] += ...``, which adjoint refuses.)"""
    if not isinstance(f, api.Func):
        raise refuse("wp.func_grad of something that is not a @wp.func",
                     f"it takes the func whose gradient it writes, not {type(f).__name__}")

    def deco(g):
        return api.func_grad(f)(dialect.mark(g, dialect.WARP))
    return deco


def struct(cls):
    """``@wp.struct``: an adjoint struct whose ``float`` fields are float32 (Warp's)."""
    return _ad_struct(dialect.mark(cls, dialect.WARP))


def constant(x):
    """``wp.constant(x)``: ``x`` itself. A kernel reads a module-level number when it is
    transformed, and again when the name is rebound (adjoint/build/bindings.py)."""
    return x
