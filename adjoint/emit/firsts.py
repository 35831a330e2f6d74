"""An adjoint's first add, spelled as its assignment.

Expects: a lowered function body the transformer generated (emit/module.py; not a
user's hand-written rule, where ``e`` may be an int and ``a = e`` would change the
type of ``a``; a generated adjoint's every term is a float, being linear in a float
seed). Guarantees: ``fold`` gives a new
body where each top-level ``a = -0.0`` whose name is next used by a top-level
``a += e`` (or ``a -= e``), ``e`` not reading ``a``, is dropped and that add becomes
``a = e`` (``a = -(e)``); the input is left as it was.

Why it is exact: ``-0.0 + e`` is ``e`` and ``-0.0 - e`` is ``-e``, bit for bit, for
every ``e`` (zeros of either sign, infinities, NaN) in IEEE arithmetic, and numba
types a variable by all its assignments, so it keeps the type it had. The reverse
pass starts every adjoint at ``-0.0`` (derive/reverse.py) and adds its terms; in
straight-line code most adjoints get one term or their first at the top level, and
numba compiles one statement fewer for each (a quarter of a vec3/quat backward's
statements).
"""
import math

import gast

from ..derive.ir import Comment, copy_tree, names_read, walk_stmts


def _negative_zero(v):
    return isinstance(v, gast.Constant) and type(v.value) is float and v.value == 0.0 and \
        math.copysign(1.0, v.value) < 0


def _names(s):
    """The names statement ``s`` mentions (nested blocks and loop latches included)."""
    return {node.id for st in walk_stmts([s]) for node in gast.walk(st)
            if isinstance(node, gast.Name)}


def fold(body):
    """``body`` with the first adds folded (module docstring)."""
    body = copy_tree(body)
    drop, made, names = set(), {}, {}

    def mentions(j, n):
        if j not in names:
            names[j] = _names(body[j])
        return n in names[j]

    for k, s in enumerate(body):
        if not (type(s) is gast.Assign and len(s.targets) == 1 and
                isinstance(s.targets[0], gast.Name) and _negative_zero(s.value)):
            continue
        n = s.targets[0].id
        for j in range(k + 1, len(body)):
            x = body[j]
            if isinstance(x, Comment) or j in made or not mentions(j, n):
                continue
            if type(x) is gast.AugAssign and isinstance(x.target, gast.Name) and \
                    x.target.id == n and isinstance(x.op, (gast.Add, gast.Sub)) and \
                    n not in names_read(x.value):
                value = x.value if isinstance(x.op, gast.Add) else \
                    gast.UnaryOp(op=gast.USub(), operand=x.value)
                new = gast.Assign(targets=[x.target], value=value, type_comment=None)
                new.lineno = getattr(x, "lineno", None)
                made[j] = new
                drop.add(k)
            break
    return [made.get(j, s) for j, s in enumerate(body) if j not in drop]
