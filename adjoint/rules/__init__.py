"""The adjoint rule registry: one small Python template per operation.

Importing this package registers every family (arith, bits, builtins, mathfns, vectors).
"""
from . import arith, bits, builtins_, mathfns, vectors  # noqa: F401  (registration side effects)
from .registry import RULES, Rule, lookup  # noqa: F401
