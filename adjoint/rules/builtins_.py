"""Builtins and piecewise functions: abs, min, max, clamp, float(), int()."""
from .registry import rule
from .types import FLOAT, INT

# flake8: noqa: F821


@rule("abs", "abs", domain=[(-2, 2)], aliases=("math.fabs",))
def abs_(z, x):
    if x >= 0:
        d_x = g
    else:
        d_x = -g


# min, max and clamp follow their primal's branches exactly (Python's rule: min(x, y)
# is ``y if y < x else x``), so ties and NaN send the adjoint where the value came from.
@rule("min", "min", domain=[(-2, 2), (-2, 2)])
def min_(z, x, y):
    if y < x:
        d_y = g
    else:
        d_x = g


@rule("max", "max", domain=[(-2, 2), (-2, 2)])
def max_(z, x, y):
    if y > x:
        d_y = g
    else:
        d_x = g


@rule("clamp", "ad.clamp", domain=[(-2, 2), (-1, -0.2), (0.2, 1)], runtime="clamp")
def clamp(z, x, lo, hi):
    # the primal (rt.clamp, runtime/ieee.py): lo if x < lo, else hi if x > hi, else x --
    # also when lo > hi
    if x < lo:
        d_lo = g
    elif x > hi:
        d_hi = g
    else:
        d_x = g


@rule("float", "float", domain=[(-2, 2)], result_kind=lambda k: FLOAT)
def float_(z, x):
    d_x = g


@rule("int", "int", domain=[(-2, 2)], result_kind=lambda k: INT, differentiable=False,
      runtime="to_int")
def int_(z, x):
    pass

