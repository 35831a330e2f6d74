"""An adjoint's first add spelled as its assignment (emit/firsts.py).

Checked: which ``a = -0.0`` it folds (the next use a top-level ``a += e`` or
``a -= e`` not reading ``a``) and which it keeps (the next use in a branch or loop, a
read, an add reading ``a``); that the folded body computes the same bits as the
original for zeros of both signs, infinities and NaN; and that generated backwards
lose those statements without changing a gradient (the rest of the suite).
"""
import math
import struct

import gast
import pytest

from adjoint.emit.firsts import fold
from adjoint.emit.printer import render_function

SOURCE = '''
def f(e, g, c):
    a = -0.0
    b = -0.0
    k = -0.0
    m = -0.0
    r = -0.0
    u = -0.0
    a += e
    b -= e
    if c:
        k += e
    m = m + e
    r += r + e
    for _ in range(2):
        u += g
    return a, b, k, m, r, u
'''


class _Signed(gast.NodeTransformer):
    """``-0.0`` as the reverse pass writes it: one constant (gast parses a negation)."""

    def visit_UnaryOp(self, node):
        v = node.operand
        if isinstance(node.op, gast.USub) and isinstance(v, gast.Constant) and v.value == 0.0:
            return gast.Constant(value=-0.0, kind=None)
        return self.generic_visit(node)


def _body():
    return [_Signed().visit(s) for s in gast.parse(SOURCE).body[0].body]


def _run(body):
    fn = gast.parse(SOURCE).body[0]
    fn.body = body
    text = render_function("f", ["e", "g", "c"], body)
    scope = {}
    exec(compile(text, "<fold>", "exec"), scope)
    return scope["f"], text


def _bits(values):
    return [struct.pack("<d", v) if not math.isnan(v) else b"nan" for v in values]


def test_which_starts_are_folded():
    _, text = _run(fold(_body()))
    assert "a = e" in text and "b = -e" in text
    for kept in ("k = -0.0", "m = -0.0", "r = -0.0", "u = -0.0"):
        assert kept in text, kept
    assert "a = -0.0" not in text and "b = -0.0" not in text


@pytest.mark.parametrize("e", [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan])
def test_folded_body_computes_the_same_bits(e):
    original, _ = _run(_body())
    folded, _ = _run(fold(_body()))
    for c in (True, False):
        assert _bits(original(e, -0.0, c)) == _bits(folded(e, -0.0, c)), (e, c)
