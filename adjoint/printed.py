"""Functions adjoint prints as user-level Python and transforms again (adjoint/emit/user.py
prints them): ``compile_printed`` defines one from its text, its source kept in
``linecache`` so that the transformer reads it as it reads a notebook cell's."""
import linecache
import math
import types

from .runtime import builtins as _builtins
from .runtime import types as _types
from .runtime.array import array as _array

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
