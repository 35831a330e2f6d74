"""Elementary functions: math.* (and the ad.* names for them)."""
import math  # noqa: F401 - the templates below name math.* in their source

from .registry import rule

# flake8: noqa: F821


def _float(*kinds):
    return "float"


def _int(*kinds):
    return "int"


@rule("sin", "math.sin", domain=[(-3, 3)], result_kind=_float)
def sin(z, x):
    adj_x += adj_z * math.cos(x)


@rule("cos", "math.cos", domain=[(-3, 3)], result_kind=_float)
def cos(z, x):
    adj_x -= adj_z * math.sin(x)


@rule("tan", "math.tan", domain=[(-1.2, 1.2)], result_kind=_float)
def tan(z, x):
    adj_x += adj_z * (1.0 + z * z)


@rule("asin", "math.asin", domain=[(-0.9, 0.9)], result_kind=_float)
def asin(z, x):
    adj_x += adj_z / math.sqrt(1.0 - x * x)


@rule("acos", "math.acos", domain=[(-0.9, 0.9)], result_kind=_float)
def acos(z, x):
    adj_x -= adj_z / math.sqrt(1.0 - x * x)


@rule("atan", "math.atan", domain=[(-3, 3)], result_kind=_float)
def atan(z, x):
    adj_x += adj_z / (1.0 + x * x)


@rule("atan2", "math.atan2", domain=[(-2, 2), (0.3, 2)], result_kind=_float)
def atan2(z, y, x):
    adj_y += adj_z * x / (x * x + y * y)
    adj_x -= adj_z * y / (x * x + y * y)


@rule("sinh", "math.sinh", domain=[(-2, 2)], result_kind=_float)
def sinh(z, x):
    adj_x += adj_z * math.cosh(x)


@rule("cosh", "math.cosh", domain=[(-2, 2)], result_kind=_float)
def cosh(z, x):
    adj_x += adj_z * math.sinh(x)


@rule("tanh", "math.tanh", domain=[(-2, 2)], result_kind=_float)
def tanh(z, x):
    adj_x += adj_z * (1.0 - z * z)


@rule("exp", "math.exp", domain=[(-2, 2)], result_kind=_float)
def exp(z, x):
    adj_x += adj_z * z


@rule("log", "math.log", domain=[(0.1, 3)], result_kind=_float)
def log(z, x):
    adj_x += adj_z / x


@rule("log1p", "math.log1p", domain=[(-0.5, 3)], result_kind=_float)
def log1p(z, x):
    adj_x += adj_z / (1.0 + x)


@rule("sqrt", "math.sqrt", domain=[(0.1, 3)], result_kind=_float)
def sqrt(z, x):
    adj_x += adj_z * 0.5 / z


@rule("pow", "math.pow", domain=[(0.5, 2), (-2, 2)], result_kind=_float)
def pow_(z, x, y):
    adj_x += adj_z * y * math.pow(x, y - 1.0)
    if x > 0.0:
        adj_y += adj_z * z * math.log(x)


@rule("floor", "math.floor", domain=[(-3, 3)], result_kind=_int, differentiable=False)
def floor(z, x):
    pass


@rule("ceil", "math.ceil", domain=[(-3, 3)], result_kind=_int, differentiable=False)
def ceil(z, x):
    pass
