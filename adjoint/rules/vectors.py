"""Rules of the scalar builtins vector code is written with (runtime/vecmath.py).

frontend/scalarize.py expands every vector operation into scalar arithmetic and
these: ``length`` is ``ad.length3(x, y, z)`` and ``normalize`` divides by it
with ``ad.div_or_zero``. Both state a derivative at the zero vector (0: Warp's
convention for ``length`` and ``normalize``), where sqrt of a sum and a plain
division would give nan.
"""
from .registry import rule
from .types import FLOAT

# flake8: noqa: F821


def _float(*kinds):
    return FLOAT


@rule("length2", "ad.length2", domain=[(-2, 2)] * 2, result_kind=_float, runtime="length2")
def length2(z, x, y):
    if z > 0.0:
        d_x = g / z * x
        d_y = g / z * y


@rule("length3", "ad.length3", domain=[(-2, 2)] * 3, result_kind=_float, runtime="length3")
def length3(z, x, y, w):
    if z > 0.0:
        d_x = g / z * x
        d_y = g / z * y
        d_w = g / z * w


@rule("length4", "ad.length4", domain=[(-2, 2)] * 4, result_kind=_float, runtime="length4")
def length4(z, x, y, u, w):
    if z > 0.0:
        d_x = g / z * x
        d_y = g / z * y
        d_u = g / z * u
        d_w = g / z * w


@rule("div_or_zero", "ad.div_or_zero", domain=[(-2, 2), (0.5, 2)], result_kind=_float,
      runtime="div_or_zero")
def div_or_zero(z, x, y):
    # (as ``/``'s rule: through z = x / y, so that x / x has derivative 0 exactly)
    if y != 0.0:
        d_x = g / y
        d_y = -(g / y * z)
