"""Pass eager: a kernel's forward and its vector-Jacobian product in one launch.

Expects: a kernel's ``Reversed`` (pass reverse, its divisions shared: pass reciprocal),
the arrays it reads and writes, its (forward, backward) Plans (pass parallel) and its
``Once`` (pass once, or None).
Guarantees: ``eager`` returns an ``Eager`` -- the thread body that runs the forward,
stores and atomics kept, then the reverse pass, with the plan running it -- or None
when that body would not compute what a forward and a later backward compute.

Why: the commonest kernel adds each thread's contribution into a one-element loss,
and on a tape its backward replays the whole forward to recover what the reverse pass
reads. Reverse mode is linear in the seed, and a one-element output has a one-number
seed ``g``: the gradient added into each input is ``g * J``, ``J`` what it adds for
``g = 1``. The tape runs this body when it records such a launch on the CPU, the
loss's adjoint reading 1, into buffers ``J`` it keeps (runtime/launch.py), and its
backward adds ``g * J`` (runtime/steps.py): one pass over the data instead of two.

Why it is exact: the body is the forward then the reverse pass, right when the reverse
pass reads, per thread, what the replay would have computed:

- no loop is recorded or reversed (``Reversed.fused``: the replay is the forward);
- the kernel reads no array it writes (a thread's reverse runs before others' forwards);
- exactly one array's adjoint is read, none of its elements written by the reverse
  pass (an output accumulated into, never stored), and no other adjoint is read;
- both plans run threads in parallel or privatize (a colored or serial plan orders
  threads, which one launch cannot do for both halves); the body's plan privatizes
  what either does.

Whether the output has one element, and the gradients exist, is the runtime's to check.
"""
from dataclasses import dataclass

import gast

from .once import storing
from ..derive.parallel import Plan

PARALLEL_MODES = ("parallel", "privatize")


@dataclass(frozen=True)
class Eager:
    body: list          # forward (stores, atomics) then the reverse pass
    plan: Plan          # the forward's and the backward's privatized arrays together
    seeded: str         # the output whose adjoint the body reads (its one element: 1)
    stored: tuple       # the adjoint parameters it stores into (pass once): no zeros needed
                        # where it also writes every element (pass cover)


def eager(rev, reads, writes, plans, once):
    """The ``Eager`` of a kernel, or None (module docstring)."""
    if rev.fused is None or rev.backward is None or set(reads) & set(writes):
        return None
    forward, backward = plans[0], plans[1]
    if forward.mode not in PARALLEL_MODES or backward.mode not in PARALLEL_MODES:
        return None
    adj_params = set(rev.adj_params)
    read, written = _adjoint_uses(rev.fused, adj_params)
    if len(read) != 1 or read & written:
        return None
    seeded = next(iter(read))[len("adj_"):]
    if seeded not in writes:
        return None
    private = list(forward.private) + [a for a in backward.private if a not in forward.private]
    plan = Plan("privatize" if private else "parallel", private)
    body = rev.fused
    stored = ()
    if once is not None:
        stored = tuple(a for a in once.arrays if a in written)
        body = storing(body, stored)
    return Eager(body, plan, seeded, stored)


def _adjoint_uses(body, adj_params):
    """(adjoint arrays read, adjoint arrays written) by ``body``: an element loaded, an
    element stored or added into; an array passed whole (to a func's adjoint) both."""
    read, written, bases = set(), set(), set()
    nodes = list(gast.walk(gast.Module(body=list(body), type_ignores=[])))
    for node in nodes:
        if isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
                node.value.id in adj_params:
            bases.add(id(node.value))
            (read if isinstance(node.ctx, gast.Load) else written).add(node.value.id)
    for node in nodes:
        if isinstance(node, gast.Name) and node.id in adj_params and id(node) not in bases:
            read.add(node.id)
            written.add(node.id)
    return read, written
