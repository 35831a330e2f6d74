"""Builtins and piecewise functions: abs, min, max, clamp, float(), int() and the casts
(ad.float32(x), ad.int8(x), ...), and Warp's
scalar builtins ad.sign, step, lerp, smoothstep, round, rint, trunc, frac (their primals:
adjoint/runtime/ieee.py)."""
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


# ad.float32(x), ad.float64(x) (Warp's wp.float32(x), ...) are float(x): a float of the
# kernel's precision (a float32 kernel computes in float32, another in float64), the
# gradient passed on
@rule("float", "float", domain=[(-2, 2)], result_kind=lambda k: FLOAT, runtime="to_float",
      aliases=("ad.float32", "ad.float64"))
def float_(z, x):
    d_x = g


# math.trunc(x) is Python's: int(x), an int (ad.trunc is Warp's, a float); ad.int64(x) too
@rule("int", "int", domain=[(-2, 2)], result_kind=lambda k: INT, differentiable=False,
      runtime="to_int", aliases=("math.trunc", "ad.int64"))
def int_(z, x):
    pass


def _cast(z, x):
    pass


# Warp's narrower integer casts (ad.int8(x) ... ad.uint32(x)): int(x) wrapped to the
# type's width, as C converts, held in an int (adjoint/runtime/intops.py); no derivative.
# The domains wrap the 8-bit casts; a negative uint16/uint32 is 65536 - ... or 2**32 - ...,
# too large for the tests' differences of x * float(ad.uint32(x))
for _name, _domain in (("int8", (-300.0, 300.0)), ("int16", (-300.0, 300.0)),
                       ("int32", (-300.0, 300.0)), ("uint8", (-300.0, 300.0)),
                       ("uint16", (0.0, 300.0)), ("uint32", (0.0, 300.0)),
                       ("uint64", (0.0, 300.0))):
    rule(_name, f"ad.{_name}", domain=[_domain], result_kind=lambda k: INT,
         differentiable=False, runtime=f"to_{_name}")(_cast)



def _float(*kinds):
    return FLOAT


# -- Warp's scalar builtins --------------------------------------------------------

# piecewise constant: derivative 0 everywhere, at the jumps too (sign and step at 0, round
# at half-integers, rint, trunc at integers), as in Warp
@rule("sign", "ad.sign", domain=[(-2, 2)], differentiable=False, runtime="sign")
def sign(z, x):
    pass


@rule("step", "ad.step", domain=[(-2, 2)], differentiable=False, runtime="step")
def step(z, x):
    pass


@rule("round", "ad.round", domain=[(-3, 3)], result_kind=_float, differentiable=False,
      runtime="round")
def round_(z, x):
    pass


@rule("rint", "ad.rint", domain=[(-3, 3)], result_kind=_float, differentiable=False,
      runtime="rint")
def rint(z, x):
    pass


@rule("trunc", "ad.trunc", domain=[(-3, 3)], result_kind=_float, differentiable=False,
      runtime="trunc")
def trunc(z, x):
    pass


# frac(x) = x - trunc(x): derivative 1 (Warp's adjoint of frac is 0)
@rule("frac", "ad.frac", domain=[(-3, 3)], result_kind=_float, runtime="frac")
def frac(z, x):
    d_x = g


@rule("lerp", "ad.lerp", domain=[(-2, 2), (-2, 2), (-0.5, 1.5)], result_kind=_float,
      runtime="lerp")
def lerp(z, a, b, t):
    d_a = g * (1.0 - t)
    d_b = g * t
    d_t = g * (b - a)


# smoothstep: with w = e1 - e0 and t = (x - e0) / w, z = 3t^2 - 2t^3 and dz/dt = 6 t (1 - t).
# Nonzero only for x strictly between the edges, 0 < t < 1, where t (1 - t) =
# (x - e0) (e1 - x) / w^2 > 0; zero where the value is clamped (t <= 0, t >= 1; at t = 0
# and 1 the derivative is 0 from both sides), where the edges meet and for nan
@rule("smoothstep", "ad.smoothstep", domain=[(-1, -0.2), (0.2, 1), (-1.5, 1.5)],
      result_kind=_float, runtime="smoothstep")
def smoothstep(z, e0, e1, x):
    if (x - e0) * (e1 - x) > 0.0:
        d_e0 = -(g * 6.0 * (x - e0) * (e1 - x) * (e1 - x) /
                 ((e1 - e0) * (e1 - e0) * (e1 - e0) * (e1 - e0)))
        d_e1 = -(g * 6.0 * (x - e0) * (x - e0) * (e1 - x) /
                 ((e1 - e0) * (e1 - e0) * (e1 - e0) * (e1 - e0)))
        d_x = g * 6.0 * (x - e0) * (e1 - x) / ((e1 - e0) * (e1 - e0) * (e1 - e0))
