"""Arithmetic operators: + - * / // % ** and unary -, comparisons, not.

Each function states partials: ``d_x = <linear in g>`` (see registry.py); ``z`` is the result.
"""
import math  # noqa: F401 - the templates below name math.* in their source

from .registry import rule
from .types import BOOL, FLOAT

# The templates below are never called: their bodies are parsed as source.
# flake8: noqa: F821


@rule("Add", "+", domain=[(-2, 2), (-2, 2)])
def add(z, x, y):
    d_x = g
    d_y = g


@rule("Sub", "-", domain=[(-2, 2), (-2, 2)])
def sub(z, x, y):
    d_x = g
    d_y = -g


@rule("Mult", "*", domain=[(-2, 2), (-2, 2)])
def mul(z, x, y):
    d_x = g * y
    d_y = g * x


@rule("Div", "/", domain=[(-2, 2), (0.5, 2)], result_kind=lambda a, b: FLOAT,
      runtime="div")
def div(z, x, y):
    d_x = g / y
    d_y = -(g / y * z)      # g / y as in d_x: the compiler divides once for both


@rule("FloorDiv", "//", domain=[(0.1, 5), (0.7, 2)], differentiable=False,
      runtime="floordiv")
def floordiv(z, x, y):
    pass


@rule("Mod", "%", domain=[(0.1, 5), (0.7, 2)], runtime="mod")
def mod(z, x, y):
    # z = x - y * (x // y), and x // y is a float here (y has an adjoint): no int overflow
    d_x = g
    d_y = -(g * (x // y))


@rule("Pow", "**", domain=[(0.5, 2), (-2, 2)], runtime="power")
def power(z, x, y):
    d_x = g * y * x ** (y - 1)
    if x > 0.0:
        d_y = g * z * math.log(x)


@rule("USub", "-", domain=[(-2, 2)])
def neg(z, x):
    d_x = -g


def _bool(*kinds):
    return BOOL


def _comparison(z, x, y):
    pass


for _key, _sym in (("Eq", "=="), ("NotEq", "!="), ("Lt", "<"), ("LtE", "<="),
                   ("Gt", ">"), ("GtE", ">=")):
    rule(_key, _sym, domain=[(-2, 2), (-2, 2)], result_kind=_bool,
         differentiable=False)(_comparison)


@rule("Not", "not", domain=[(-2, 2)], result_kind=_bool, differentiable=False)
def not_(z, x):
    pass


# Warp's / // % where they differ from Python's (a kernel of adjoint.warp spells its
# operators so: runtime/dialect.py); their primals: adjoint/runtime/warpops.py
@rule("trunc_div", "ad.trunc_div", domain=[(-2, 2), (0.5, 2)], runtime="trunc_div")
def trunc_div(z, x, y):
    # two ints: an int, with no derivative; else x / y
    d_x = g / y
    d_y = -(g / y * z)


@rule("div_floor", "ad.div_floor", domain=[(0.1, 5), (0.7, 2)], differentiable=False,
      runtime="div_floor")
def div_floor(z, x, y):
    pass


@rule("trunc_mod", "ad.trunc_mod", domain=[(-5, 5), (0.7, 2)], runtime="trunc_mod")
def trunc_mod(z, x, y):
    # z = x - n * y, n = trunc(x / y) an integer between the jumps (as math.fmod)
    d_x = g
    d_y = -(g * ((x - z) / y))
