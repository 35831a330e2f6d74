"""adjoint: source-to-source reverse-mode automatic differentiation for Python kernels.

Decorate kernels and device functions, launch them on arrays, record the
launches on a ``Tape`` and replay their generated backward passes.
"""
__version__ = "0.1.0"

from .api import (Func, Kernel, after_source, func, func_grad, func_jvp, kernel,  # noqa: E402
                  source)
from .errors import (AdjointError, BoundsError, LaunchError, NonFiniteError,  # noqa: E402
                     StaleModuleError,
                     TapeError, TransformError)
from .runtime import (Array, Tape, array, backend_name, backend_scope, empty,  # noqa: E402
                      full, launch, ones, ones_like, synchronize, use_backend, zeros,
                      zeros_like)
# ad.tid, ad.atomic_add, ad.abs, ad.sin, ad.clamp, ...: every name of runtime/builtins.py
# (its math functions are the runtime builtins of runtime/ieee.py)
from .runtime.builtins import *  # noqa: E402,F401,F403,A004
from .runtime.builtins import __all__ as _BUILTINS  # noqa: E402
from .runtime.builtins import MATH as _MATH  # noqa: E402
globals().update(_MATH)     # ad.round, ad.pow too (left out of the star import's __all__)
from .runtime.builtins import (stack_bool, stack_float, stack_int, stack_push,  # noqa: E402,F401
                               stack_read)
from .runtime.types import float16, float32, float64, int32, int64  # noqa: E402
from .runtime.builtins import int8, int16, uint8, uint16, uint32, uint64  # noqa: E402,F401
from .runtime.structs import struct  # noqa: E402
from .runtime import config  # noqa: E402
from .tapes.copies import clone, copy  # noqa: E402
from . import autograd  # noqa: E402,F401  (the module adjoint.derivatives.autograd)
# ad.generate, ad.checkpoint, ad.simulate are functions named as their modules: imported
# through the modules' public paths (adjoint/generate.py, ...: aliases of the modules of
# build/ and tapes/), so that a later ``import adjoint.generate`` finds its module loaded
# and leaves the function in place
from .generate import generate  # noqa: E402
from .derivatives import grad, hessian, jvp, value_and_grad  # noqa: E402
from .checkpoint import checkpoint  # noqa: E402
from .simulate import simulate  # noqa: E402
from .runtime.capture import Capture, CaptureError  # noqa: E402
from .runtime.tape import capture  # noqa: E402
# ad.evaluation_trace: ad.trace is the matrix trace (runtime/vecfuncs.py, as in Warp)
from .derivatives.traces import Trace, evaluation_trace  # noqa: E402
from . import optim  # noqa: E402,F401  (last: its kernels use ad.kernel, ad.array, ...)
# ad.vec3, ad.mat33, ad.quat, ad.transform, ad.dot, ad.quat_rotate, ... (runtime/vecfuncs.py)
from .runtime.vecfuncs import CALLABLE as _VECTOR  # noqa: E402
globals().update(_VECTOR)

__all__ = ["Func", "Kernel", "after_source", "func", "func_grad", "func_jvp", "kernel", "source", "AdjointError",
           "BoundsError", "LaunchError", "StaleModuleError", "TapeError", "TransformError", "Array", "Tape",
           "array", "empty", "full", "launch", "ones", "ones_like", "zeros", "zeros_like",
           "float16", "float32", "float64", "int32", "int64", "int8", "int16", "uint8", "uint16", "uint32", "uint64",
           "struct", "clone", "copy",
           "autograd", "generate", "backend_name", "backend_scope", "use_backend", "config",
           "NonFiniteError", "grad", "hessian", "jvp", "value_and_grad", "checkpoint", "simulate", "Capture", "CaptureError", "capture", "Trace", "evaluation_trace", "Transposition", "transpose_view", "optim", "synchronize"] + _BUILTINS + sorted(_VECTOR)


def __getattr__(name):
    """``ad.transpose_view`` and ``ad.Transposition`` (adjoint/derivatives/transposes.py) load the
    transformer (gast) when first asked for: ``import adjoint`` alone does not, so that
    committed gradient modules run where gast and astor are not installed."""
    if name in ("transpose_view", "Transposition"):
        from .derivatives import transposes
        return getattr(transposes, name)
    raise AttributeError(f"module 'adjoint' has no attribute {name!r}")
