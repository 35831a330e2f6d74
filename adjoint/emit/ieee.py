"""Spell the operators whose Python meaning is not IEEE arithmetic as runtime calls.

Python raises ``ZeroDivisionError`` for ``x / 0.0`` (also ``//``, ``%``), raises
``OverflowError`` or returns a complex number for some ``x ** y``, where IEEE
arithmetic (numba, CUDA, NumPy) gives inf or nan. So the functions emitted here
spell ``x / y`` as ``rt.div(x, y)``, ``x // y`` as ``rt.floordiv(x, y)``,
``x % y`` as ``rt.mod(x, y)`` and ``x ** y`` as ``rt.power(x, y)`` (and the bit
operations on int64: ``x << y`` as ``rt.lshift(x, y)``, ``~x`` as ``rt.invert(x)``): the
``runtime`` column of the rule registry, which also spells ``math.sin(x)`` as
``rt.sin(x)`` when parsing (see adjoint/runtime/ieee.py for their meaning).

A division by a positive number literal (``x / 2.0``, ``i % 2``, also
``rt.float32(2.0)`` in a float32 kernel) stays an operator: it cannot divide by
zero, and Python, numba and NumPy agree on it. ``**`` is always a call: Python
and numba compute ``x ** 3`` differently (``pow`` against repeated products).

Expects: function bodies as emitted, after the float32 pass (emit/precision.py,
which reads ``/`` and ``**`` as operators). Guarantees: new statements; its
``Float32`` conversions printed ``rt.float32(value)``; no other node changes.
"""
import gast

from ..rules import RULES
from ..derive.ir import Float32, copy_tree, rt_call

NOTE = "# rt.div, rt.sqrt, ...: x / y, math.sqrt, ... in IEEE arithmetic (inf, nan, no exception)"
_RUNTIME = {key: r.runtime for key, r in RULES.items() if r.runtime}
_DIVISIONS = ("Div", "FloorDiv", "Mod")


def spell(body):
    """``body`` (a list of statements) with ``/ // % **`` spelled as runtime calls."""
    return [_Spell().visit(copy_tree(s)) for s in body]


class _Spell(gast.NodeTransformer):
    def visit_Float32(self, node):
        self.generic_visit(node)
        return rt_call("float32", node.value)       # (emit/precision.py's conversions)

    def visit_BinOp(self, node):
        positive = _positive_literal(node.right)
        self.generic_visit(node)
        op = type(node.op).__name__
        if op not in _RUNTIME or (op in _DIVISIONS and positive):
            return node
        return gast.copy_location(rt_call(_RUNTIME[op], node.left, node.right), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        op = type(node.op).__name__
        if op not in _RUNTIME:
            return node
        return gast.copy_location(rt_call(_RUNTIME[op], node.operand), node)   # ~x

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        if type(node.op).__name__ in _RUNTIME:     # (rules only emit += and -=)
            raise ValueError(f"cannot spell augmented {type(node.op).__name__} in emitted code")
        return node


def _positive_literal(node):
    if isinstance(node, Float32):
        node = node.value
    return isinstance(node, gast.Constant) and type(node.value) in (int, float) and \
        node.value > 0
