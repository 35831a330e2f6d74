"""Dialects: what a namespace's spellings mean in the kernels, funcs and structs it declares.

``import adjoint as ad`` and ``import adjoint.warp as wp`` share one transformer. Where
NVIDIA Warp gives a spelling another meaning than adjoint does, the meaning is a field of
a ``Dialect`` here, and nowhere else:

- ``scalars``: the dtype ``float``, ``int`` and ``bool`` mean in an annotation (a kernel
  or func parameter, an array's ``dtype=``, a struct field). adjoint's ``float`` is
  float64, Warp's float32 (and Warp's ``int`` int32);
- ``operators``: operators that mean another rule of the registry (adjoint/rules):
  Warp's ``x % y`` is C's (``ad.trunc_mod``: the sign of ``x``), its ``x / y`` of two
  ints is C's truncating quotient (``ad.trunc_div``: an int) and its ``x // y`` of two
  floats is ``floor(x / y)`` (``ad.div_floor``); pass normalize writes such an operator
  as a call of its rule (derive/normalize.py).

A namespace's decorators (``wp.kernel``, ``wp.func``, ``wp.func_grad``, ``wp.struct``)
mark the function or class they decorate with their dialect's name (``mark``); the parser
reads it back (``of``) into ``ParsedFunction.dialect``, and a module's key
(adjoint/build/inputs.py) describes it, so one source text transformed in two dialects is two
modules. Unmarked code is adjoint's.

Expects: nothing (a leaf of the runtime). Guarantees: ``DIALECTS`` maps each name to its
frozen ``Dialect``; ``of`` never fails (an unknown mark is a ``ValueError`` naming it).
"""
from dataclasses import dataclass

import numpy as np

MARK = "__adjoint_dialect__"


@dataclass(frozen=True)
class Dialect:
    """What ``float``/``int``/``bool`` and some operators mean (see the module)."""
    name: str
    scalars: tuple          # ((Python type, numpy dtype), ...): float, int, bool
    operators: tuple = ()   # ((gast operator class name, rule key), ...)
    summary: str = ""

    def scalar(self, annotation):
        """The dtype a Python scalar type means here (``float`` -> float32 in Warp), or
        None when ``annotation`` is not ``float``, ``int`` or ``bool``."""
        for t, dtype in self.scalars:
            if annotation is t:
                return dtype
        return None

    @property
    def float(self):
        return self.scalar(float)

    def operator_rule(self, op):
        """The rule key operator ``op`` (a gast class name: "Mod") means here, or None for
        the operator's own rule."""
        return dict(self.operators).get(op)


ADJOINT = Dialect("adjoint", ((float, np.dtype(np.float64)), (int, np.dtype(np.int64)),
                              (bool, np.dtype(np.bool_))),
                  summary="Python's meanings: float is float64, x % y has the sign of y")
WARP = Dialect("warp", ((float, np.dtype(np.float32)), (int, np.dtype(np.int32)),
                        (bool, np.dtype(np.bool_))),
               operators=(("Mod", "trunc_mod"), ("Div", "trunc_div"), ("FloorDiv", "div_floor")),
               summary="NVIDIA Warp's meanings: float is float32, int int32, and / // % are "
                       "C's where they differ from Python's")
DIALECTS = {d.name: d for d in (ADJOINT, WARP)}


def mark(obj, dialect):
    """Mark a function or class as declared in ``dialect``; returns it."""
    setattr(obj, MARK, dialect.name)
    return obj


def of(obj):
    """The dialect ``obj`` (a function or class) was declared in: adjoint's if unmarked."""
    name = getattr(obj, MARK, ADJOINT.name)
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"{obj!r} is marked with the unknown dialect {name!r}") from None
