"""The ordered list of passes, and a way to show the code after any of them.

parse -> scalarize -> fence -> normalize -> inline -> types -> ssa -> (hazards) -> activity ->
bounds -> reverse -> store -> once (kernels: the backwards storing into clean gradients)
-> gather (a stencil's backward) -> zeroed (kernels: the adjoints every backward clears,
and those it reads before clearing)
-> cover (kernels: the adjoints a storing backward writes at every element)
-> eager (kernels: the forward and its vector-Jacobian product in one launch),
and jvp (forward mode) from the same checked SSA; reciprocal (after store, and after jvp):
the derivatives' divisions by one root share its inverse (in the backwards, with the
primal quotients only adjoints read).
``transform`` runs them all; ``show`` prints one stage as Python source.
"""
from dataclasses import dataclass, replace

from .emit.module import function_sources
from .emit.printer import render_function
from .emit.user import backward_text
from .emit.targets import TARGETS
from .frontend.fence import fence
from .frontend.parse import parse, transforming
from .frontend.scalarize import scalarize
from .rules.types import INT
from .transform import (activity, bounds, cover, eager, gather, hazards, inline, jvp, normalize,
                        once, parallel, reciprocal, reverse, scale, ssa, store, types, zeroed)

STAGES = ("parse", "scalarize", "normalize", "ssa", "forward", "backward", "jvp")
SAVING = ("forward_save", "backward_saved")   # kernels with stored loops (pass store)
EAGER = ("forward_vjp",)    # kernels whose forward and VJP run as one launch (pass eager)
USER = ("backward_user",)   # the backward as user code, valid input again (emit/user.py)


@dataclass
class Transformed:
    pf: object
    norm: object
    kinds: dict
    return_kinds: list
    ssa: object
    active: set
    rev: object
    reads: set
    writes: set
    dims: int
    plans: tuple = None     # kernels: (forward, backward, jvp) Plans from pass parallel
    sites: tuple = ()       # kernels: the bounds.Site of every checked index (pass bounds)
    tangent: object = None  # forward mode: the jvp.Tangent (pass jvp)
    loop_capacity: int = 256  # kernels: the CUDA loop stacks' size (@ad.kernel(loop_capacity))
    threads: dict = None    # {name: d}: the names holding thread index d (parallel)
    saved: object = None    # kernels: the store policy's forward and backward (pass store)
    once: object = None     # kernels: the backwards storing into clean gradients (pass once)
    gather: object = None   # kernels: the backward as receivers gathering sums (pass gather)
    zeroed: tuple = ()      # kernels: the adjoint arrays every backward leaves zero (pass zeroed)
    covered: tuple = ()     # kernels: (array, extents) a storing backward writes whole (pass cover)
    rest_clears: tuple = () # kernels: the adjoints a gathered backward's rest only clears (zeroed)
    handed: tuple = ()      # kernels: the zeroed adjoints read before cleared (zeroed: handed)
    eager: object = None    # kernels: the forward and its VJP in one launch (pass eager)


def transform(pyfunc, role, bounds_check=True):
    """Run every pass on ``pyfunc`` (``role`` "kernel" or "func"). ``bounds_check``
    (kernels): check array indices (pass bounds); ``ssa`` is then the checked tree."""
    with transforming(pyfunc):
        return _transform(pyfunc, role, bounds_check)


def _transform(pyfunc, role, bounds_check):
    pf = fence(scalarize(parse(pyfunc, role)))
    norm = inline.inline(normalize.normalize(pf))
    kinds, return_kinds = types.infer(norm)
    s = ssa.ssa(norm, kinds)
    dims = parallel.grid_dims(s)
    threads = parallel.thread_indices(s)        # (the thread index, found once)
    # a printed backward (printed.vjp_kernel) is differentiated in forward mode only:
    # no reverse of it is built, so the hazards of a reverse replay do not apply
    forward_only = getattr(pyfunc, "__adjoint_forward_only__", False)
    if role == "kernel" and not forward_only:
        hazards.check(s, dims, threads)
    act = activity.active(s)
    checked = bounds.bound(s, dims, threads, enabled=bounds_check and role == "kernel")
    rev = reverse.reverse(checked.ssa, act, forward_only)
    tangent = _inverses(jvp.jvp(checked.ssa, act), checked.ssa.kinds)
    saved = store.saving(checked.ssa, act, rev, dims)
    rev, saved = _backward_inverses(rev, saved, checked.ssa.kinds)
    reads, writes = hazards.arrays_used(s)
    plans = stores = None
    if role == "kernel":
        stores = once.once(rev, saved, dims)
        adj_arrays = {p.name for p in pf.differentiable()}
        plans = parallel.plan(s, dims, threads, adj_arrays)
        plans += (parallel.tangent_plan(plans[0], tangent.names),)
    gathered = gather.gather(rev.backward, checked.ssa, dims, threads, plans[1],
                             [f"dim{d}" for d in range(dims)]) if plans else None
    cleared = zeroed.zeroed(rev, saved, stores, gathered, plans[1], dims) if plans else ()
    rest = zeroed.rest_clears(gathered, cleared) if stores is None else ()
    passed = zeroed.handed(rev, saved, stores, gathered, cleared, dims)
    whole = cover.covered(stores, gathered, plans[1], dims,
                          [p.name for p in pf.params if not p.is_array and
                           p.kind == INT]) if plans else ()
    fused = eager.eager(rev, reads, writes, plans, stores) if plans else None
    return Transformed(pf, norm, kinds, return_kinds, checked.ssa, act, rev, reads, writes, dims,
                       plans, checked.sites, tangent, threads=threads, saved=saved, once=stores,
                       gather=gathered, zeroed=cleared, covered=whole,
                       rest_clears=rest, handed=passed, eager=fused)


def _inverses(tangent, kinds):
    """``tangent`` with its divisions by a root multiplying by its inverse (pass
    reciprocal), and the powers of two its rules cancel left out (pass scale)."""
    derived = set(tangent.names.values())
    body, new = reciprocal.sharing(tangent.body, derived, kinds)
    return replace(tangent, body=scale.folded(body, derived), kinds={**tangent.kinds, **new})


def _backward_inverses(rev, saved, kinds):
    """``rev`` and ``saved`` (the store policy's, or None) with their backwards' divisions
    by a root multiplying by its inverse (pass reciprocal), the primal quotients that
    only adjoints read included, and the powers of two their rules cancel left out
    (pass scale)."""
    if rev.backward is None:
        return rev, saved
    derived = set(rev.kinds)
    backward, new = reciprocal.sharing(rev.backward, derived, kinds, primal=True)
    backward = scale.folded_backward(backward, derived)
    if saved is not None:
        body, more = reciprocal.sharing(saved.backward, derived, kinds, primal=True)
        body = scale.folded_backward(body, derived)
        saved, new = replace(saved, backward=body), {**new, **more}
    fused = rev.fused
    if fused is not None:
        fused, more = reciprocal.sharing(fused, derived, kinds, primal=True)
        fused, new = scale.folded_backward(fused, derived), {**new, **more}
    return replace(rev, backward=backward, fused=fused, kinds={**rev.kinds, **new}), saved


def stage_source(pyfunc, role, stage, target="cpu", loop_capacity=256, bounds_check=True):
    """Python source of ``pyfunc`` after ``stage`` (one of STAGES).

    ``target`` ("cpu" or "cuda") spells the forward and backward stages; the
    earlier stages are the same for both. ``loop_capacity`` sizes a kernel's
    CUDA loop stacks (``@ad.kernel(loop_capacity=N)``); ``bounds_check=False``
    leaves out the index checks (``@ad.kernel(bounds_check=False)``).
    """
    if stage not in STAGES + SAVING + EAGER + USER:
        raise ValueError(f"unknown stage {stage!r}; choose one of "
                         f"{', '.join(STAGES + SAVING + EAGER + USER)}")
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    if stage == "parse":        # the user's code, vectors included
        pf = parse(pyfunc, role)
        fence(scalarize(pf))
        return render_function(pf.name, [p.name for p in pf.params], pf.node.body, pf.source)
    pf = fence(scalarize(parse(pyfunc, role)))
    params = [p.name for p in pf.params]
    if stage == "scalarize":
        return render_function(pf.name, params, pf.node.body, pf.source)
    if stage == "normalize":
        norm = normalize.normalize(pf)
        return render_function(pf.name, params, norm.body, pf.source)
    tr = transform(pyfunc, role, bounds_check)
    if stage == "ssa":
        return render_function(tr.pf.name, params, tr.ssa.body, tr.pf.source)
    if stage == "backward_user":
        return backward_text(tr, f"{tr.pf.name}_vjp")
    tr = replace(tr, loop_capacity=loop_capacity)
    return function_sources(tr, stage, target)
