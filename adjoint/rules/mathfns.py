"""Elementary functions: math.* (and the ad.* names for them)."""
import math  # noqa: F401 - the templates below name math.* in their source

from .registry import rule
from .types import BOOL, FLOAT, INT

# flake8: noqa: F821


def _float(*kinds):
    return FLOAT


def _int(*kinds):
    return INT


def _bool(*kinds):
    return BOOL


def math_rule(name, domain, result_kind=_float, differentiable=True, aliases=(),
              safe_reciprocal=False):
    """The rule of ``math.<name>`` (also ``ad.<name>``, the same function); generated code
    calls ``rt.<name>``, registered in adjoint/runtime/ieee.py. Adding a math function
    is a rule here plus that runtime builtin: tests/rules/test_rule_table.py checks both."""
    return rule(name, f"math.{name}", domain, result_kind, differentiable, runtime=name,
                aliases=aliases, safe_reciprocal=safe_reciprocal)


@math_rule("sin", domain=[(-3, 3)])
def sin(z, x):
    d_x = g * math.cos(x)


@math_rule("cos", domain=[(-3, 3)])
def cos(z, x):
    d_x = -(g * math.sin(x))


@math_rule("tan", domain=[(-1.2, 1.2)])
def tan(z, x):
    d_x = g * (1.0 + z * z)


@math_rule("asin", domain=[(-0.9, 0.9)])
def asin(z, x):
    d_x = g / math.sqrt(1.0 - x * x)


@math_rule("acos", domain=[(-0.9, 0.9)])
def acos(z, x):
    d_x = -(g / math.sqrt(1.0 - x * x))


@math_rule("atan", domain=[(-3, 3)])
def atan(z, x):
    d_x = g / (1.0 + x * x)


@math_rule("atan2", domain=[(-2, 2), (0.3, 2)])
def atan2(z, y, x):
    d_y = g * x / (x * x + y * y)
    d_x = -(g * y / (x * x + y * y))


@math_rule("sinh", domain=[(-2, 2)])
def sinh(z, x):
    d_x = g * math.cosh(x)


@math_rule("cosh", domain=[(-2, 2)])
def cosh(z, x):
    d_x = g * math.sinh(x)


@math_rule("tanh", domain=[(-2, 2)])
def tanh(z, x):
    d_x = g * (1.0 - z * z)


@math_rule("exp", domain=[(-2, 2)])
def exp(z, x):
    d_x = g * z


@math_rule("log", domain=[(0.1, 3)])
def log(z, x):
    d_x = g / x


@math_rule("expm1", domain=[(-2, 2)])
def expm1(z, x):
    d_x = g * (z + 1.0)


@math_rule("log1p", domain=[(-0.5, 3)])
def log1p(z, x):
    d_x = g / (1.0 + x)


# sqrt of the smallest subnormal is about 2**-75 (float32), 2**-537 (float64), and of the
# largest finite number about 2**64 (2**512): 1 / sqrt(x) is a normal number for every
# positive finite x
@math_rule("sqrt", domain=[(0.1, 3)], safe_reciprocal=True)
def sqrt(z, x):
    d_x = g * 0.5 / z


@math_rule("pow", domain=[(0.5, 2), (-2, 2)], aliases=("pow",))
def pow_(z, x, y):
    d_x = g * y * math.pow(x, y - 1.0)
    if x > 0.0:
        d_y = g * z * math.log(x)


@math_rule("floor", domain=[(-3, 3)], result_kind=_int, differentiable=False)
def floor(z, x):
    pass


@math_rule("ceil", domain=[(-3, 3)], result_kind=_int, differentiable=False)
def ceil(z, x):
    pass


@math_rule("log2", domain=[(0.1, 3)])
def log2(z, x):
    d_x = g / (0.6931471805599453 * x)          # ln 2


@math_rule("log10", domain=[(0.1, 3)])
def log10(z, x):
    d_x = g / (2.302585092994046 * x)           # ln 10


# cbrt at 0: dz/dx = 1 / (3 z^2) is +inf there (as sqrt's 1 / (2 z)): the gradient is ±inf,
# nan where the seed is 0
@math_rule("cbrt", domain=[(-2, 2)])
def cbrt(z, x):
    d_x = g / (3.0 * z * z)


@math_rule("erf", domain=[(-2, 2)])
def erf(z, x):
    d_x = g * 1.1283791670955126 * math.exp(-(x * x))      # 2 / sqrt(pi)


@math_rule("erfc", domain=[(-2, 2)])
def erfc(z, x):
    d_x = -(g * 1.1283791670955126 * math.exp(-(x * x)))


# copysign(x, y) = |x| sign(y): dz/dx is +1 where the sign bits of x and y agree, -1 where
# they differ (at x = ±0 too: the derivative on the side the sign bit names); dz/dy is 0
@math_rule("copysign", domain=[(-2, 2), (-2, 2)])
def copysign(z, x, y):
    d_x = g * math.copysign(1.0, x) * math.copysign(1.0, y)


@math_rule("degrees", domain=[(-3, 3)])
def degrees(z, x):
    d_x = g * 57.29577951308232                 # 180 / pi


@math_rule("radians", domain=[(-3, 3)])
def radians(z, x):
    d_x = g * 0.017453292519943295              # pi / 180


@math_rule("asinh", domain=[(-2, 2)])
def asinh(z, x):
    d_x = g / math.sqrt(x * x + 1.0)


@math_rule("acosh", domain=[(1.2, 3)])
def acosh(z, x):
    d_x = g / math.sqrt(x * x - 1.0)


@math_rule("atanh", domain=[(-0.9, 0.9)])
def atanh(z, x):
    d_x = g / (1.0 - x * x)


# hypot(x, y) = sqrt(x^2 + y^2): at the origin the derivative is stated as 0 (as for
# ad.length2, Warp's convention for a vector's length), where x / z would be nan
@math_rule("hypot", domain=[(-2, 2), (-2, 2)])
def hypot(z, x, y):
    if z > 0.0:
        d_x = g / z * x
        d_y = g / z * y


# fmod(x, y) = x - n * y with n = trunc(x / y) an integer constant between the jumps:
# dz/dx = 1, dz/dy = -n, and n = (x - z) / y (to rounding: z is exact)
@math_rule("fmod", domain=[(0.1, 5), (0.7, 2)])
def fmod(z, x, y):
    d_x = g
    d_y = -(g * ((x - z) / y))


def _predicate(z, x):
    pass


# math.isnan, isinf, isfinite: a bool, no derivative
for _name in ("isnan", "isinf", "isfinite"):
    math_rule(_name, domain=[(-2, 2)], result_kind=_bool, differentiable=False)(_predicate)
