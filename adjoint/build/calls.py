"""How the pipeline (build/pipeline.py) calls each pass of build/passes.py: ``RUN[name](st)``
reads the fields the pass reads from the pipeline's state ``st`` and returns the fields
it makes, as a dict; ``TANGENT_ONLY`` holds the optimization passes a zero-tangents
variant runs on its tangent alone (pipeline._shared)."""
from dataclasses import replace

import gast

from . import passes
from ..frontend.fence import fence
from ..frontend.parse import parse
from ..frontend.scalarize import scalarize
from ..frontend.unroll import unroll
from ..rules.types import INT
from ..derive import activity, bounds, hazards, inline, jvp, normalize, parallel, reverse, ssa, types
from ..optimize import cover, eager, gather, once, reciprocal, scale, store, zero_tangents, zeroed


def _grid(st):
    return {"dims": parallel.grid_dims(st.ssa), "threads": parallel.thread_indices(st.ssa)}


def _hazards(st):
    # a printed backward (printed.vjp_kernel) is differentiated in forward mode only:
    # no reverse of it is built, so the hazards of a reverse replay do not apply
    if st.role == "kernel" and not st.forward_only:
        hazards.check(st.ssa, st.dims, st.threads)
    reads, writes = hazards.arrays_used(st.ssa)
    return {"reads": reads, "writes": writes}


def _bounds(st):
    checked = bounds.bound(st.ssa, st.dims, st.threads,
                           enabled=st.bounds_check and st.role == "kernel")
    return {"checked": checked.ssa, "sites": checked.sites}


def _reverse(st):
    """Pass reverse builds the tree passes prune and order then rewrite: with them off it
    is built plain (order decides as loops are reversed; prune runs inside it)."""
    rev = reverse.reverse(st.checked, st.active, st.forward_only,
                          walk_forward="order" in st.optimizations,
                          pruned="prune" in st.optimizations)
    # (the adjoints: what passes reciprocal and scale take as derivative values)
    return {"rev": rev, "adjoints": frozenset(rev.kinds)}


def _jvp(st):
    return {"tangent": jvp.jvp(st.checked, st.active)}


def _parallel(st):
    adj_arrays = {p.name for p in st.pf.differentiable()}
    plans = parallel.plan(st.ssa, st.dims, st.threads, adj_arrays)
    return {"plans": plans + (parallel.tangent_plan(plans[0], st.tangent.names),)}


def _store(st):
    return {"saved": store.saving(st.checked, st.active, st.rev, st.dims,
                                  walk_forward="order" in st.optimizations)}


def _rewrite_bodies(st, rewrite, tangent_only=False):
    """``rewrite(body, derived, primal) -> (body, new kinds)`` applied to the JVP, and
    unless ``tangent_only``, to the backward, the fused forward and VJP and the store
    policy's backward."""
    tangent, rev, saved = st.tangent, st.rev, st.saved
    out = {}
    body, new = rewrite(tangent.body, set(tangent.names.values()), False)
    if _differ(body, tangent.body):
        out["tangent"] = replace(tangent, body=body, kinds={**tangent.kinds, **new})
    if rev.backward is None or tangent_only:
        return out
    derived, new = set(st.adjoints), {}
    parts = {}
    for key, b in (("backward", rev.backward), ("fused", rev.fused)):
        if b is not None:
            body, more = rewrite(b, derived, True)
            if _differ(body, b):
                parts[key] = body
                new.update(more)
    if parts:
        out["rev"] = replace(rev, **parts, kinds={**rev.kinds, **new})
    if saved is not None:
        body, more = rewrite(saved.backward, derived, True)
        if _differ(body, saved.backward):
            out["saved"] = replace(saved, backward=body)
            out["rev"] = replace(out.get("rev", rev), kinds={**out.get("rev", rev).kinds, **more})
    return out


def _differ(a, b):
    """Whether two statement lists differ (a rewriting pass that changed nothing gives
    its input back: it is then not 'applied')."""
    return len(a) != len(b) or any(gast.dump(x) != gast.dump(y) for x, y in zip(a, b))


def _reciprocal(st, tangent_only=False):
    return _rewrite_bodies(st, lambda body, derived, primal: reciprocal.sharing(
        body, derived, st.checked.kinds, primal=primal), tangent_only)


def _scale(st, tangent_only=False):
    return _rewrite_bodies(st, lambda body, derived, primal: (
        scale.folded_backward(body, derived) if primal else scale.folded(body, derived), {}),
        tangent_only)


def _zeroed(st):
    cleared = zeroed.zeroed(st.rev, st.saved, st.once, st.gather, st.plans[1], st.dims)
    rest = zeroed.rest_clears(st.gather, cleared) if st.once is None else ()
    passed = zeroed.handed(st.rev, st.saved, st.once, st.gather, cleared, st.dims)
    return {"zeroed": cleared, "rest_clears": rest, "handed": passed}


def _cover(st):
    scalars = [p.name for p in st.pf.params if not p.is_array and p.kind == INT]
    return {"covered": cover.covered(st.once, st.gather, st.plans[1], st.dims, scalars)}


RUN = {
    "parse": lambda st: {"pf": parse(st.pyfunc, st.role)},
    "unroll": lambda st: {"pf": unroll(st.pf)},
    "scalarize": lambda st: {"pf": scalarize(st.pf)},
    "fence": lambda st: {"pf": fence(st.pf)},
    "normalize": lambda st: {"norm": normalize.normalize(st.pf)},
    "inline": lambda st: {"norm": inline.inline(st.norm)},
    "types": lambda st: dict(zip(("kinds", "return_kinds"), types.infer(st.norm))),
    "ssa": lambda st: {"ssa": ssa.ssa(st.norm, st.kinds)},
    "grid": _grid,
    "hazards": _hazards,
    "activity": lambda st: {"active": activity.active(st.ssa)},
    "bounds": _bounds,
    "reverse": _reverse,
    "jvp": _jvp,
    "parallel": _parallel,
    "zero_tangents": lambda st: zero_tangents.zero_tangents(
        st.checked, st.ssa, st.writes, st.plans, st.zero_tangents),
    "prune": lambda st: {"rev": replace(st.rev)},  # (inside pass reverse: _reverse)
    "order": lambda st: {"rev": st.rev} if not st.rev.walked_forward else
             {"rev": replace(st.rev)},     # (inside pass reverse; applied if it walked one)
    "store": _store,
    "reciprocal": _reciprocal,
    "scale": _scale,
    "once": lambda st: {"once": once.once(st.rev, st.saved, st.dims)},
    "gather": lambda st: {"gather": gather.gather(st.rev.backward, st.checked, st.dims,
                                                  st.threads, st.plans[1],
                                                  [f"dim{d}" for d in range(st.dims)])},
    "zeroed": _zeroed,
    "cover": _cover,
    "eager": lambda st: {"eager": eager.eager(st.rev, st.reads, st.writes, st.plans, st.once)},
}
assert set(RUN) == {p.name for p in passes.PASSES if p.stage == "transform"}

# the optimization passes that read the tangent, rewriting it alone (a zero-tangents
# variant's, whose other fields are its kernel's: pipeline._shared)
TANGENT_ONLY = {"reciprocal": lambda st: _reciprocal(st, tangent_only=True),
                "scale": lambda st: _scale(st, tangent_only=True)}
