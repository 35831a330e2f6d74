"""Every runtime builtin, registered: the table the backends read.

Expects: nothing (it imports the modules that register). Guarantees: ``BUILTINS``
(builtin_table.py's) holds every ``rt.<name>`` function: the math functions and operators
(ieee.py), the scalar builtins of vector code (vecmath.py: ``rt.length3``,
``rt.div_or_zero``), Warp's operators (warpops.py: ``rt.trunc_div``, ``rt.div_floor``,
``rt.trunc_mod``), the integer casts and bit operations (intops.py: ``rt.to_uint8``,
``rt.bit_and``, ...). The last two build on ieee.py, so ieee.py cannot import them: a
backend imports ``BUILTINS`` from here, never from one of them.
"""
from . import ieee, intops, vecmath, warpops  # noqa: F401 - each registers its builtins
from .builtin_table import BUILTINS  # noqa: F401
