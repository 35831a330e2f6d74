"""Which loops' reverse may walk its iterations forward (a fact pass reverse asks).

The reverse of a loop walks its iterations backwards because, in general, iteration
``k``'s adjoints need those of iteration ``k + 1``: through the loop's carried values
and through arrays (a store that a later iteration overwrites hands its element's
adjoint to the later one only). Walking memory backwards is slower than forwards
(docs/reverse-mode.md), so where no iteration's adjoints depend on another's the
reverse walks them forward.

Expects: a loop of an SSA body (``LoopInfo`` with ``carried`` and ``latch``), the
active set and the names of the array parameters.
Guarantees: ``forward_order(loop, active, arrays)`` is ``True`` only when

- the loop is a ``for`` without ``break`` (its trip count is known before it runs);
- every carried value with an adjoint is an *accumulator*: the body defines its next
  value once as ``c + e``, ``e + c`` or ``c - e`` and uses ``c`` nowhere else, and
  that next value is used only by the latch. Its adjoint is then the same at the
  start and at the end of every iteration (``-0.0 + g`` is ``g``); a carried value
  without an adjoint (a counter) is read back per iteration, by its number;
- the body stores into no array (the order would decide which iteration gets the
  gradient), has no ``atomic_min``/``atomic_max``, and an array it adds into it does
  not also read (a later iteration's read would pass its gradient to this one's);
- it calls no func that takes an array (the func's adjoint may write one).

What the reverse then accumulates across iterations (``adj_x[k] += ...``) is a sum
whose terms do not depend on the order; only their rounding does, as when threads
run in parallel.
"""
import gast

from .ir import AtomicMinMax, walk_stmts


def forward_order(loop, active, arrays):
    """Whether the reverse of ``loop`` may run its iterations first to last (see above)."""
    info = loop.loop
    if not isinstance(loop, gast.For) or info.break_flag is not None:
        return False
    body = list(walk_stmts(loop.body))    # (nested loops' condition and latch blocks too)
    if not _arrays_independent(body, arrays):
        return False
    latch = {s.targets[0].id: s.value.id for s in info.latch
             if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name)
             and isinstance(s.value, gast.Name)}
    for c in info.carried:
        if c in active and not _accumulator(c, latch.get(c), loop.body, info.latch):
            return False
    return True


def _arrays_independent(body, arrays):
    """Whether the statements ``body`` store into no array, have no atomic min/max, read
    no array they add into, and pass no array of ``arrays`` to a func."""
    added, read = set(), set()
    for s in body:
        if isinstance(s, AtomicMinMax):
            return False
        if isinstance(s, gast.Assign) and any(isinstance(t, gast.Subscript) for t in s.targets):
            return False
        if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Subscript):
            added.add(_base(s.target))
        for n in gast.walk(s):
            if isinstance(n, gast.Subscript) and isinstance(n.ctx, gast.Load):
                read.add(_base(n))
            if isinstance(n, gast.Call) and getattr(n, "callee", None) is not None and \
                    n.callee.kind == "func" and any(isinstance(a, gast.Name) and a.id in arrays
                                                    for a in n.args):
                return False
    return not (added & read)


def _base(subscript):
    v = subscript.value
    return v.id if isinstance(v, gast.Name) else None


def _accumulator(c, nxt, top, latch):
    """Whether carried ``c`` (next value ``nxt``) is ``nxt = c + e`` / ``e + c`` /
    ``c - e`` at the top level of the body ``top``, with ``c`` and ``nxt`` used nowhere
    else in the body and latch."""
    if nxt is None:
        return False
    defs = [s for s in top if isinstance(s, gast.Assign) and
            any(isinstance(t, gast.Name) and t.id == nxt for t in s.targets)]
    if len(defs) != 1 or not isinstance(defs[0].value, gast.BinOp):
        return False
    op = defs[0].value
    left, right = (x.id if isinstance(x, gast.Name) else None for x in (op.left, op.right))
    if not (isinstance(op.op, gast.Add) and c in (left, right) and left != right or
            isinstance(op.op, gast.Sub) and left == c and right != c):
        return False
    uses_c = sum(_reads(s, c) for s in top + latch)
    uses_nxt = sum(_reads(s, nxt) for s in top + latch)
    return uses_c == 1 and uses_nxt == 1


def _reads(stmt, v):
    """How many times ``stmt`` (with its nested blocks) reads name ``v``."""
    return sum(1 for n in gast.walk(stmt)
               if isinstance(n, gast.Name) and n.id == v and isinstance(n.ctx, gast.Load))
