"""Pass store, store or recompute: the policy of each loop of a kernel.

By default the backward *recomputes* a loop: its replay runs the loop again,
recording in per-thread stacks the carried values that the reverse iterations
read (pass reverse). When the reverse needs no stack (an accumulator such as
``e += m[j] / r``: pass prune found every stack of the loop dead) the replay
runs the whole loop only for the values it leaves behind (``e``, read by the
adjoint of ``out[i] = -m[i] * e``), a second pass over the data before the
reversed loop's third. For such a loop, at the top level of a kernel, the
policy is *store*: ``Saved.forward`` is the forward with those values (and the
trip count of a loop that can stop early) written to per-thread arrays after
the loop, and ``Saved.backward`` the backward reading them back in place of
the replayed loop. Loops whose reverse reads stacks stay recomputed: their
replay must run anyway to fill the stacks.

Expects: a kernel's checked SSA, its active set and its ``Reversed`` (which
keeps the recompute policy: a launch made without a tape, or a generated
module's plain backward, still works by replay). Guarantees: ``saving`` returns
None when no loop is stored, else a ``Saved`` whose forward writes exactly the
saved parameters its backward reads, each indexed by the thread's own index
(``saved_e[tid0]``: one value per thread, so no two threads share an entry).
"""
from dataclasses import dataclass

import gast

from ..rules.types import FLOAT, INT
from ..derive.reverse import Reverser, assemble


@dataclass(frozen=True)
class Saved:
    forward: list       # the forward, saving what the backward reads
    backward: list      # the backward, reading it instead of replaying stored loops
    params: tuple       # ((saved array parameter, value name, kind), ...) in parameter order
    loops: tuple        # the stored loops' lines


def saving(ssa, active_set, rev, dims, walk_forward=True):
    """The store policy's forward and backward for a kernel, or None (see the module);
    ``walk_forward``: as pass reverse's (the optimization pass order). With pass prune
    off, every loop's stacks stay in ``rev.backward``: no loop is stored."""
    if ssa.norm.pf.role != "kernel" or rev.backward is None:
        return None
    present = {n.id for x in rev.backward for n in gast.walk(x) if isinstance(n, gast.Name)}
    loops = [s for s in _top_loops(ssa.body)
             if not set(rev.loop_stacks.get(s.loop.uid, ())) & present]
    if not loops:
        return None
    r = Reverser(ssa, active_set, [s.loop.uid for s in loops], [f"tid{d}" for d in range(dims)],
                 walk_forward=walk_forward)
    forward, backward, _, _ = assemble(r)
    if not r.written:
        return None
    counts = {names["count"] for names in r.names.values()}
    params = tuple((p, v, INT if v in counts else ssa.kinds.get(v, FLOAT))
                   for (_, v), p in r.saved.items() if p in r.written)
    lines = tuple(s.lineno for s in loops
                  if any(p in r.written for (uid, _), p in r.saved.items() if uid == s.loop.uid))
    return Saved(forward, backward, params, lines)


def _top_loops(stmts):
    """The loops of ``stmts`` not inside another loop (``if`` blocks are entered)."""
    for s in stmts:
        if isinstance(s, (gast.For, gast.While)):
            yield s
        elif isinstance(s, gast.If):
            yield from _top_loops(s.body)
            yield from _top_loops(s.orelse)
