"""Integer bit operations: ``& | ^ << >> ~`` (also Warp's ``ad.bit_and``, ``bit_or``,
``bit_xor``, ``lshift``, ``rshift``, ``invert``) and ``ad.nonzero``; none has a
derivative. The bit operations take ints (a bool is 0 or 1): a float operand is an
error at the user's line (``integer``, checked by pass types). Their primals, on int64
on every backend: adjoint/runtime/intops.py.
"""
from .registry import rule
from .types import INT

# flake8: noqa: F821


def _int(*kinds):
    return INT


def _bits(z, x, y):
    pass


for _key, _sym, _runtime in (("BitAnd", "&", "bit_and"), ("BitOr", "|", "bit_or"),
                             ("BitXor", "^", "bit_xor"), ("LShift", "<<", "lshift"),
                             ("RShift", ">>", "rshift")):
    rule(_key, _sym, domain=[(-1000, 1000), (0, 12)], result_kind=_int, differentiable=False,
         runtime=_runtime, integer=True, aliases=(f"ad.{_runtime}",))(_bits)


@rule("Invert", "~", domain=[(-1000, 1000)], result_kind=_int, differentiable=False,
      runtime="invert", integer=True, aliases=("ad.invert",))
def invert(z, x):
    pass


# 1 where x != 0, else 0, of x's kind (Warp's): piecewise constant
@rule("nonzero", "ad.nonzero", domain=[(-2, 2)], differentiable=False, runtime="nonzero")
def nonzero(z, x):
    pass
