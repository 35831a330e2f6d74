"""The old values atomics return (``old = ad.atomic_add(a, i, v)``), for pass reverse.

A backward replays the forward after the launch, when an atomic's element has changed:
it cannot recompute the old value the atomic gave. ``from_old_values`` finds the names
computed from one (the replay leaves out a bounds check of an index made from one, as
the forward made it); ``old_values_unneeded`` refuses a backward that reads one (at the
backward's launch: ``backward_only``).
"""
import gast

from .ir import AtomicFetch, AtomicResult, names_in, target_names, walk_stmts
from .prune import prune


def from_old_values(body):
    """The names whose values depend on the old value an atomic returned (``old =
    ad.atomic_add(a, i, v)``). A replay holds 0 for such a value: a bounds check of an
    index computed from one (``keep[slot] = i``, a store the backward does not repeat)
    is left out of the replay, as the forward made it; anything else the backward keeps
    that reads one is refused (``old_values_unneeded``)."""
    stmts = list(walk_stmts(body))
    out = {s.targets[0].id for s in stmts
           if isinstance(s, gast.Assign) and isinstance(s.value, AtomicFetch)}
    grown = bool(out)
    while grown:
        grown = False
        for s in stmts:
            if isinstance(s, gast.Assign) and names_in(s.value) & out:
                new = set(target_names(s)) - out
                if new:
                    out |= new
                    grown = True
    return out


def atomic_name(fetch):
    """``atomic_add``, ... of an ``AtomicFetch``."""
    op = type(fetch.op).__name__
    return "atomic_" + {"Add": "add", "Sub": "sub", "MinOp": "min", "MaxOp": "max",
                        "BitAnd": "and", "BitOr": "or", "BitXor": "xor"}[op]


def backward_only(error):
    """``error`` (a ``TransformError``) marked as refusing a kernel's backward only: pass
    reverse then builds its forward, and the backward's launch raises it (a kernel Warp
    runs forward is not refused before it runs)."""
    error.backward_only = True
    return error


def old_values_unneeded(pf, backward):
    """A ``TransformError`` where the backward reads the old value an atomic
    (``old = ad.atomic_add(a, i, v)``, ...) gave: its replay cannot recompute it after the
    launch."""
    for s in walk_stmts(prune(backward)):
        if isinstance(s, gast.Assign) and isinstance(s.value, AtomicResult):
            raise backward_only(pf.error(
                "the old value this atomic returns decides what the backward computes (a "
                "branch, an index or a value of it), and the backward cannot recompute it "
                "once the launch changed the element: use it only for the ints the kernel "
                "stores", s, stage="reverse"))
