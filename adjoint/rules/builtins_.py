"""Builtins and piecewise functions: abs, min, max, clamp, float(), int()."""
from .registry import rule

# flake8: noqa: F821


@rule("abs", "abs", domain=[(-2, 2)])
def abs_(z, x):
    if x >= 0:
        adj_x += adj_z
    else:
        adj_x -= adj_z


# min, max and clamp follow their primal's branches exactly (Python's rule: min(x, y)
# is ``y if y < x else x``), so ties and NaN send the adjoint where the value came from.
@rule("min", "min", domain=[(-2, 2), (-2, 2)])
def min_(z, x, y):
    if y < x:
        adj_y += adj_z
    else:
        adj_x += adj_z


@rule("max", "max", domain=[(-2, 2), (-2, 2)])
def max_(z, x, y):
    if y > x:
        adj_y += adj_z
    else:
        adj_x += adj_z


@rule("clamp", "rt.clamp", domain=[(-2, 2), (-1, -0.2), (0.2, 1)])
def clamp(z, x, lo, hi):
    # the primal (rt.clamp): lo if x < lo, else hi if x > hi, else x -- also when lo > hi
    if x < lo:
        adj_lo += adj_z
    elif x > hi:
        adj_hi += adj_z
    else:
        adj_x += adj_z


@rule("float", "float", domain=[(-2, 2)], result_kind=lambda k: "float")
def float_(z, x):
    adj_x += adj_z


@rule("int", "int", domain=[(-2, 2)], result_kind=lambda k: "int", differentiable=False)
def int_(z, x):
    pass

