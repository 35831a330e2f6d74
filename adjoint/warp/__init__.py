"""``import adjoint.warp as wp``: NVIDIA Warp's namespace, with Warp's meanings, on adjoint.

An unmodified Warp program's kernels, funcs, structs, arrays, launches, tapes and
optimizers run on adjoint's backends (plain Python, numba, numba.cuda); so does one that
imports ``warp`` after ``sys.modules["warp"] = adjoint.warp``. Where Warp means something
else than ``import adjoint as ad`` does, this namespace means what Warp does:

- ``float`` in a kernel's, func's or struct's annotations, and in ``wp.array(dtype=float)``,
  is float32 (``int`` int32); ``wp.vec3``, ``wp.mat33``, ``wp.quat``, ``wp.transform`` are
  the float32 types (``ad.vec3f``, ...). The decorators mark what they decorate with Warp's
  dialect (adjoint/runtime/dialect.py), which the transformer reads;
- ``x % y`` is C's (the sign of ``x``), ``x / y`` of two ints C's truncating quotient, and
  ``x // y`` of two floats ``floor(x / y)``, in kernels and funcs of this namespace;
- ``wp.zeros``, ``wp.launch``, ``wp.ScopedTimer``, ... take Warp's arguments in Warp's
  order.

A Warp name adjoint does not have (``wp.Mesh``, ``wp.capture_begin``, ``wp.tile_load``,
...: the list is ``names.GROUPS``) raises ``WarpNameError`` (an ``ad.AdjointError``; also an
``AttributeError``, so ``hasattr`` reads it as absent) naming the feature, why, and the
line using it; inside a kernel the transformer names the kernel's line. Another unknown
name is an ``AttributeError`` suggesting the nearest names. docs/from-warp.md has the
table of every name (``names.markdown_table``).
"""
import difflib as _difflib
import math as _math
import sys as _sys

import numpy as _np

import adjoint as _ad

from ..errors import PACKAGE_DIR as _PACKAGE_DIR
from ..errors import TransformError as _TransformError
from ..runtime import vecfuncs as _vecfuncs
from . import names as _names
from .arrays import (array, array1d, array2d, array3d, array4d, clone, copy, empty,  # noqa: F401
                     empty_like, from_numpy, full, full_like, ones, ones_like, zeros,
                     zeros_like)
from .decorators import (constant, func, func_grad, get_module_options, kernel,  # noqa: F401
                         set_module_options, struct)
from .errors import WarpFeatureError, WarpNameError, user_line  # noqa: F401
from .runtime import (Device, ScopedDevice, ScopedTimer, config,  # noqa: F401
                      get_cuda_device_count, get_cuda_devices, get_device, get_devices,
                      get_mempool_release_threshold, get_mempool_used_mem_current,
                      get_mempool_used_mem_high,
                      get_preferred_device, init, is_cpu_available, is_cuda_available,
                      is_device_available, is_mempool_access_supported,
                      is_mempool_access_enabled, is_mempool_enabled, is_mempool_supported,
                      launch, set_device, set_mempool_enabled, set_mempool_release_threshold,
                      synchronize, synchronize_device)

Tape = _ad.Tape
Kernel = _ad.Kernel
Function = _ad.Func
tid = _ad.tid

# scalar types: float and int in an annotation are float32 and int32 here (the dialect)
float32, float64, int32, int64 = _np.float32, _np.float64, _np.int32, _np.int64
# (also casts in kernels: wp.uint8(x) is int(x) wrapped to 0..255, an int of the kernel)
int8, int16, uint8, uint16, uint32 = _np.int8, _np.int16, _np.uint8, _np.uint16, _np.uint32
float16 = _np.float16   # (arrays only: stored as float16, computed in float32: runtime/half.py)
uint64 = _np.uint64     # (an int64 holding its bits in a kernel: docs/from-warp.md)
bool = bool  # noqa: A001 - wp.bool, a kernel's bool parameter

# the builtins kernels call: adjoint's own objects (the transformer knows them by identity)
_SAME = ("atomic_add atomic_sub atomic_min atomic_max atomic_and atomic_or atomic_xor "
         "abs acos asin atan atan2 cbrt ceil clamp copysign cos cosh degrees erf erfc exp "
         "floor frac isfinite isinf isnan lerp "
         "log log10 log2 max min pow radians rint round sign sin sinh smoothstep sqrt step "
         "tan tanh trunc dot cross length length_sq normalize outer transpose determinant "
         "inverse trace diag skew cw_mul cw_div mul identity quat_identity quat_inverse "
         "quat_rotate quat_rotate_inv quat_from_axis_angle quat_to_matrix quat_from_matrix "
         "transform_identity transform_point transform_vector transform_multiply "
         "transform_inverse transform_get_translation transform_get_rotation "
         "vec2f vec3f vec4f vec2d vec3d vec4d mat22f mat33f mat44f mat22d mat33d mat44d "
         "quatf quatd transformf transformd spatial_vectorf spatial_vectord spatial_matrixf "
         "spatial_matrixd spatial_top spatial_bottom spatial_dot spatial_cross "
         "spatial_cross_dual spatial_adjoint transform_twist transform_wrench "
         "velocity_at_point matrix_from_rows matrix_from_cols "
         "bit_and bit_or bit_xor lshift rshift invert nonzero "
         "quat_slerp quat_to_axis_angle quat_rpy ddot where select").split()
globals().update({_n: getattr(_ad, _n) for _n in _SAME})
# Warp's unsuffixed vector types are float32
vec2, vec3, vec4 = _ad.vec2f, _ad.vec3f, _ad.vec4f
mat22, mat33, mat44 = _ad.mat22f, _ad.mat33f, _ad.mat44f
quat, transform = _ad.quatf, _ad.transformf
spatial_vector, spatial_matrix = _ad.spatial_vectorf, _ad.spatial_matrixf
# wp.vector(length=6, dtype=float), wp.matrix(shape=(2, 3), dtype=float): float is float32
vector, matrix = _vecfuncs.warp_vector, _vecfuncs.warp_matrix
# Warp's wp.div, wp.mod, wp.floordiv: what its / % // mean (runtime/warpops.py)
div, mod, floordiv = _ad.trunc_div, _ad.trunc_mod, _ad.div_floor

# constants
pi = PI = _math.pi
e = E = _math.e
inf = INF = _math.inf
nan = NAN = _math.nan
tau = TAU = _math.tau
phi = PHI = (1.0 + _math.sqrt(5.0)) / 2.0
half_pi = HALF_PI = _math.pi / 2.0
ln2 = LN2 = _math.log(2.0)
ln10 = LN10 = _math.log(10.0)
log2e = LOG2E = _math.log2(_math.e)
log10e = LOG10E = _math.log10(_math.e)

# Warp's code-generation errors are adjoint's transform errors
WarpCodegenError = WarpCodegenAttributeError = WarpCodegenIndexError = _TransformError
WarpCodegenKeyError = WarpCodegenTypeError = WarpCodegenValueError = _TransformError

from . import autograd, optim, types  # noqa: E402,F401  (warp.autograd, warp.optim, warp.types)

__all__ = sorted(n for n in _names.NAMES if n in globals())


def __getattr__(name):
    """A Warp name adjoint lacks: ``WarpNameError`` saying why (``names.GROUPS``); any
    other unknown name: an ``AttributeError`` with the nearest names."""
    if name.startswith("__"):
        raise AttributeError(f"module 'adjoint.warp' has no attribute '{name}'")
    state = _names.status(name, globals())
    if state is not None:
        why = _names.SPECIFIC.get(name, state[1])
        # (from inside adjoint -- the transformer reading a kernel -- the caller names the line)
        inside = _sys._getframe(1).f_code.co_filename.startswith(_PACKAGE_DIR)
        line = "" if inside else user_line(1)
        raise WarpNameError(f"wp.{name} is not supported by adjoint.warp: {why}" +
                            (f" (at {line})" if line else ""))
    close = _difflib.get_close_matches(name, sorted(set(__all__) | set(_names.NAMES)), n=3)
    hint = f"; did you mean {', '.join('wp.' + c for c in close)}?" if close else ""
    raise AttributeError(f"module 'adjoint.warp' has no attribute '{name}' (not a name of "
                         f"NVIDIA Warp's namespace either){hint}")


def name_table():
    """[(topic, name, "supported" or "refused", note)] for every Warp name (docs/from-warp.md
    renders ``names.markdown_table`` of this namespace)."""
    return _names.rows(globals())


def markdown_table():
    """The table of every Warp name and its status, as docs/from-warp.md shows it."""
    return _names.markdown_table(globals())
