"""Builtins and piecewise functions: abs, min, max, clamp, float(), int()."""
from .registry import rule

# flake8: noqa: F821


@rule("abs", "abs", domain=[(-2, 2)])
def abs_(z, x):
    if x >= 0:
        adj_x += adj_z
    else:
        adj_x -= adj_z


@rule("min", "min", domain=[(-2, 2), (-2, 2)])
def min_(z, x, y):
    if x <= y:
        adj_x += adj_z
    if x > y:
        adj_y += adj_z


@rule("max", "max", domain=[(-2, 2), (-2, 2)])
def max_(z, x, y):
    if x >= y:
        adj_x += adj_z
    if x < y:
        adj_y += adj_z


@rule("clamp", "rt.clamp", domain=[(-2, 2), (-1, -0.2), (0.2, 1)])
def clamp(z, x, lo, hi):
    # the same branch order as the primal (rt.clamp), so lo > hi is consistent too
    if x < lo:
        adj_lo += adj_z
    if x >= lo and x > hi:
        adj_hi += adj_z
    if x >= lo and x <= hi:
        adj_x += adj_z


@rule("float", "float", domain=[(-2, 2)], result_kind=lambda k: "float")
def float_(z, x):
    adj_x += adj_z


@rule("int", "int", domain=[(-2, 2)], result_kind=lambda k: "int", differentiable=False,
      runtime="to_int")
def int_(z, x):
    pass

