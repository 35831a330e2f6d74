"""The pipeline: the passes of adjoint/build/passes.py run in their order, and the code after any.

``transform`` runs every pass of ``passes.PASSES`` whose stage is "transform", in the
list's order, each reading the fields of ``Transformed`` it names and making those it
names (``RUN`` below holds how each is called); an optimization pass that is off
makes what it makes when it finds nothing to do (``OFF``). The emit passes (firsts,
sums, jam) run when a module is printed (emit/module.py), which reads
``Transformed.optimizations``. ``after_source`` prints what any pass made
(``adjoint show --after PASS``; ``ADJOINT_PRINT_AFTER=PASS`` prints it as a kernel or
func is transformed, as numba's ``NUMBA_DEBUG_PRINT_AFTER`` does); ``stage_source``
prints the named stages of ``adjoint show --stage``.
"""
import os
import sys
from dataclasses import dataclass, field, fields, replace
from types import SimpleNamespace

import gast

from . import passes
from ..emit import stacks, warp
from ..emit.module import function_sources
from ..emit.printer import render_function
from ..emit.user import backward_text
from ..emit.targets import TARGETS
from ..frontend.fence import fence
from ..frontend.parse import parse, transforming
from ..frontend.scalarize import scalarize
from ..rules.types import INT
from ..derive import activity, bounds, hazards, inline, jvp, normalize, parallel, reverse, ssa, types
from ..optimize import cover, eager, gather, once, reciprocal, scale, store, zero_tangents, zeroed

STAGES = ("parse", "scalarize", "normalize", "ssa", "forward", "backward", "jvp")
SAVING = ("forward_save", "backward_saved")   # kernels with stored loops (pass store)
EAGER = ("forward_vjp",)    # kernels whose forward and VJP run as one launch (pass eager)
USER = ("backward_user",)   # the backward as user code, valid input again (emit/user.py)
PRINT_AFTER = "ADJOINT_PRINT_AFTER"


@dataclass
class Transformed:
    """What the passes made of one kernel or func; each field names the pass making it."""
    pf: object              # parse, scalarize, fence: the checked, scalar source tree
    norm: object            # normalize, inline
    kinds: dict             # types: {value: kind}
    return_kinds: list      # types: a func's returned kinds
    ssa: object             # bounds: the SSA tree (pass ssa), its indices checked
    active: set             # activity
    rev: object             # reverse (prune, order, reciprocal, scale rewrite it)
    reads: set              # hazards: the array parameters read
    writes: set             # hazards: ... and written
    dims: int               # grid: the kernel's number of thread indices
    plans: tuple = None     # parallel (kernels): (forward, backward, jvp) Plans
    sites: tuple = ()       # bounds (kernels): the bounds.Site of every checked index
    tangent: object = None  # jvp: the jvp.Tangent (reciprocal, scale rewrite it)
    loop_capacity: int = 256  # kernels: the CUDA loop stacks' size (@ad.kernel(loop_capacity))
    threads: dict = None    # grid: {name: d}, the names holding thread index d
    saved: object = None    # store (kernels): the store policy's forward and backward
    once: object = None     # once (kernels): the backwards storing into clean gradients
    gather: object = None   # gather (kernels): the backward as receivers gathering sums
    zeroed: tuple = ()      # zeroed (kernels): the adjoint arrays every backward leaves zero
    covered: tuple = ()     # cover (kernels): (array, extents) a storing backward writes whole
    rest_clears: tuple = () # zeroed (kernels): the adjoints a gathered backward's rest only clears
    handed: tuple = ()      # zeroed (kernels): the zeroed adjoints read before cleared
    eager: object = None    # eager (kernels): the forward and its VJP in one launch
    optimizations: frozenset = passes.ALL   # the optimization passes enabled (passes.py)
    applied: tuple = ()     # those of them that changed or made something here
    zero_tangents: frozenset = frozenset()  # arrays held constant (pass zero_tangents)
    # the state before pass zero_tangents, the first to read the arrays held constant: a
    # variant holding others constant resumes from it (api.Kernel.with_zero_tangents)
    resume: object = field(default=None, compare=False, repr=False)


RESUME_AT = "zero_tangents"     # the first pass whose work depends on ``zero_tangents``


def transform(pyfunc, role, bounds_check=True, optimizations=passes.ALL,
              zero_tangents=frozenset(), resume=None):
    """Run every pass on ``pyfunc`` (``role`` "kernel" or "func"), the optimization passes
    in ``optimizations`` only. ``bounds_check`` (kernels): check array indices (pass
    bounds); ``ssa`` is then the checked tree. ``zero_tangents`` (kernels): float arrays
    the kernel only reads whose tangents the JVP takes as zero (pass zero_tangents).
    ``resume``: the ``resume`` state of the same function transformed with the same
    options but other zero tangents; the passes before ``RESUME_AT`` are not run again
    (they read no zero tangents, and passes return new trees, so their results are
    shared: tests/build/test_passes_pure.py), nor are the optimizations after it that
    read no tangent (their results are the kernel's transform's: ``_shared``)."""
    with transforming(pyfunc):
        st = _run(pyfunc, role, bounds_check, frozenset(optimizations),
                  zero_tangents=frozenset(zero_tangents), resume=resume)
    made = {f.name: getattr(st, f.name) for f in fields(Transformed) if hasattr(st, f.name)}
    if getattr(st, "resume", None) is not None and resume is None:
        # (what a variant's passes share: _shared)
        st.resume.final = dict(made, untangent_applied=st.untangent_applied)
    return Transformed(**{**made, "ssa": st.checked})


def start(pyfunc, role, bounds_check, enabled, zero_tangents=frozenset()):
    """The state the first pass reads: the options, and what an optimization pass that is
    off would have made (nothing)."""
    return SimpleNamespace(pyfunc=pyfunc, role=role, bounds_check=bounds_check,
                           zero_tangents=zero_tangents,
                           forward_only=getattr(pyfunc, "__adjoint_forward_only__", False),
                           optimizations=enabled, applied=(), untangent_applied=(),
                           saved=None, once=None,
                           gather=None, zeroed=(), covered=(), rest_clears=(), handed=(),
                           eager=None, plans=None, sites=())


def _run(pyfunc, role, bounds_check, enabled, last=None, zero_tangents=frozenset(),
         resume=None):
    """The fields the passes made, up to and including the pass named ``last``
    (``resume``: see ``transform``)."""
    st = start(pyfunc, role, bounds_check, enabled, zero_tangents)
    final = None
    if resume is not None:
        final = getattr(resume, "final", None)
        vars(st).update({k: v for k, v in vars(resume).items() if k != "final"},
                        zero_tangents=zero_tangents)
    shown = _print_after()
    resumed = resume is not None
    for p in passes.PASSES:
        if resumed:
            if p.name != RESUME_AT:
                continue        # (made already: the state resumed from holds its work)
            resumed = False
        if p.name == RESUME_AT:
            st.resume = SimpleNamespace(**{k: v for k, v in vars(st).items()
                                           if k not in ("resume", "final")})
        if p.stage == "transform" and role in p.roles:
            if not p.optimization or p.name in enabled:
                if final is not None and p.name != RESUME_AT:
                    made = _shared(st, p, final)
                else:
                    made = RUN[p.name](st)
                    if p.optimization and _changed(st, made):
                        st.applied += (p.name,)
                    if p.optimization and _changed(st, {k: v for k, v in made.items()
                                                        if k != "tangent"}):
                        st.untangent_applied += (p.name,)
                vars(st).update(made)
            if p.name in shown:
                print(after_text(st, p.name), file=sys.stdout, flush=True)
        elif p.stage == "emit" and p.name in enabled and role in p.roles and \
                EMITS[p.name](st):
            st.applied += (p.name,)     # (it may change what is printed)
        if p.name == last:
            break
    return st


def _shared(st, p, final):
    """What optimization pass ``p`` (after pass zero_tangents) makes for a variant resumed
    from a kernel whose transform ended in ``final`` (its fields): a pass that reads no
    tangent made the same from the same input, so it is shared; one that reads the
    tangent (reciprocal, scale) rewrites the variant's tangent alone, the rest shared."""
    shared = {k: final[k] for k in p.makes if k != "tangent"}
    own = {}
    if "tangent" in p.reads:
        st.tangent_only = True
        try:
            own = RUN[p.name](st)
        finally:
            st.tangent_only = False
    if p.name in final["untangent_applied"] or _changed(st, own):
        st.applied += (p.name,)
    return {**shared, **{k: v for k, v in own.items() if k == "tangent"}}


def _privatized(st):
    return any(plan.mode == "privatize" for plan in st.plans or ())


EMITS = {   # whether an emit pass may change what is printed (before it prints it)
    "firsts": lambda st: True,
    "sums": _privatized,
    "jam": lambda st: st.dims == 1 and any(plan.mode in ("parallel", "privatize")
                                           for plan in st.plans or ()),
    "warp_sums": lambda st: _warp_sums(st),
}


def _warp_sums(st):
    """Whether pass warp_sums may change this kernel's CUDA code (emit/warp.py)."""
    rev, tangent = getattr(st, "rev", None), getattr(st, "tangent", None)
    bodies = (getattr(rev, "forward", None), getattr(rev, "backward", None),
              getattr(tangent, "body", None))
    return any(warp.candidates(b, set(st.threads or ())) for b in bodies if b)


def inexact(tr):
    """The optimization passes applied to ``tr`` that may make its results round otherwise
    than the plain code's on the CPU backends and numba's simulator (``Pass.exact``; jam
    only where it joins two threads' adds into a privatized element; not warp_sums, whose
    ``rounds`` is empty: it rounds otherwise on a GPU alone)."""
    return tuple(n for n in tr.applied if not passes.BY_NAME[n].exact and
                 passes.BY_NAME[n].rounds and
                 (n != "jam" or any(plan.mode == "privatize" for plan in tr.plans or ())))


def _changed(st, made):
    return any(getattr(st, k, None) is not v and not (v is None or v == ()) for k, v in
               made.items())


def _print_after():
    text = os.environ.get(PRINT_AFTER)
    if not text:
        return ()
    names = {n.strip() for n in text.split(",") if n.strip()}
    if "all" in names:
        return {p.name for p in passes.PASSES}
    unknown = sorted(names - set(passes.BY_NAME))
    if unknown:
        raise ValueError(f"{PRINT_AFTER}: no pass is named {', '.join(map(repr, unknown))}; "
                         f"the passes are {', '.join(passes.BY_NAME)}")
    return names


# ---------------------------------------------------------------- how each pass is run

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


def _rewrite_bodies(st, rewrite):
    """``rewrite(body, derived, primal) -> (body, new kinds)`` applied to the JVP, the
    backward, the fused forward and VJP and the store policy's backward."""
    tangent, rev, saved = st.tangent, st.rev, st.saved
    out = {}
    body, new = rewrite(tangent.body, set(tangent.names.values()), False)
    if _differ(body, tangent.body):
        out["tangent"] = replace(tangent, body=body, kinds={**tangent.kinds, **new})
    if rev.backward is None or getattr(st, "tangent_only", False):
        return out      # (tangent_only: a zero-tangents variant's, _shared)
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


def _reciprocal(st):
    return _rewrite_bodies(st, lambda body, derived, primal: reciprocal.sharing(
        body, derived, st.checked.kinds, primal=primal))


def _scale(st):
    return _rewrite_bodies(st, lambda body, derived, primal: (
        scale.folded_backward(body, derived) if primal else scale.folded(body, derived), {}))


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


# ---------------------------------------------------------------- the code after a pass

def after_source(pyfunc, role, name, target="cpu", loop_capacity=256, bounds_check=True,
                 optimizations=passes.ALL):
    """What pass ``name`` made of ``pyfunc``, as Python source (``adjoint show --after``):
    the passes before it run (the optimizations among them only where ``optimizations``
    enables them), ``name`` itself (also if it is an optimization that is off), and no
    pass after it; an emit pass shows the printed functions."""
    if name not in passes.BY_NAME:
        raise ValueError(f"no pass is named {name!r}; the passes are "
                         f"{', '.join(passes.BY_NAME)}")
    p = passes.BY_NAME[name]
    if role not in p.roles:
        raise ValueError(f"pass {name} runs on kernels only; '{pyfunc.__name__}' is a func")
    order = list(passes.BY_NAME)
    later = {n for n in passes.OPTIMIZATIONS if order.index(n) > order.index(name)}
    enabled = (frozenset(optimizations) | ({name} if p.optimization else set())) - later
    if p.stage == "emit":
        tr = replace(transform(pyfunc, role, bounds_check, enabled), loop_capacity=loop_capacity)
        return _emitted(tr, name, target)
    with transforming(pyfunc):
        st = _run(pyfunc, role, bounds_check, enabled, last=name)
    return after_text(st, name)


def _emitted(tr, name, target):
    parts = ["forward", "backward", "jvp"] if tr.pf.role == "func" else \
        ["forward", "backward", "jvp"] + (["forward_vjp"] if tr.eager is not None else [])
    out = [f"# after pass {name}: the printed functions ({passes.describe(tr.optimizations)})"]
    for part in parts:
        try:
            out.append(function_sources(tr, part, target))
        except ValueError:
            continue        # (no such functions: no backward, no JVP)
    return "\n\n".join(out)


def after_text(st, name):
    """The fields pass ``name`` made in the pipeline state ``st`` (``_run``), as text."""
    pf = st.pf
    params = [p.name for p in pf.params]
    fname = pf.name
    head = f"# after pass {name} ({passes.BY_NAME[name].kind}) of {fname}"

    def code(suffix, pnames, body):        # (loop stacks spelled as the CPU target does)
        return render_function(f"{fname}{suffix}", pnames, stacks.spell(body, "cpu"),
                               pf.source)

    if name in ("parse", "scalarize", "fence"):
        return "\n".join([head, code("", params, pf.node.body)])
    if name in ("normalize", "inline"):
        return "\n".join([head, code("", params, st.norm.body)])
    if name == "ssa":
        return "\n".join([head, code("", params, st.ssa.body)])
    if name == "bounds":
        return "\n".join([head, code("", params, st.checked.body)])
    if name == "types":
        kinds = [f"#   {k}: {v}" for k, v in sorted(st.kinds.items(), key=lambda kv: kv[0])]
        return "\n".join([head, "# the kind of every value:"] + kinds)
    if name == "grid":
        return "\n".join([head, f"# {st.dims} thread index(es); names holding them: "
                                 f"{dict(sorted(st.threads.items()))}"])
    if name == "hazards":
        return "\n".join([head, f"# arrays read: {sorted(st.reads)}",
                           f"# arrays written: {sorted(st.writes)}"])
    if name == "activity":
        return "\n".join([head, f"# active values: {sorted(st.active)}"])
    if name == "parallel":
        return "\n".join([head] + [f"# {part}: {plan.mode}"
                                    + (f", private {list(plan.private)}" if plan.private else "")
                                    + (f" ({plan.reason})" if plan.reason else "")
                                    for part, plan in zip(("forward", "backward", "jvp"),
                                                          st.plans)])
    rev = st.rev
    adj = params + list(rev.adj_params)
    out = [head]
    if name in ("reverse", "prune", "order", "reciprocal", "scale"):
        if name not in ("reciprocal", "scale"):     # (which change no forward)
            out.append(code("_forward", params, rev.forward))
        if rev.backward is not None:
            out.append(code("_backward", adj, rev.backward))
        if name in ("reciprocal", "scale"):
            out.append(code("_jvp", params + st.tangent.dot_params, st.tangent.body))
            if st.saved is not None:
                out.append(code("_backward_saved", adj, st.saved.backward))
    elif name == "jvp":
        out.append(code("_jvp", params + st.tangent.dot_params, st.tangent.body))
    elif name == "store":
        if st.saved is None:
            out.append("# no loop is stored")
        else:
            saved = [p for p, _, _ in st.saved.params]
            out += [code("_forward_save", params + saved, st.saved.forward),
                    code("_backward_saved", params + saved + list(rev.adj_params),
                         st.saved.backward)]
    elif name == "once":
        if st.once is None:
            out.append("# no gradient is proven added into at most once an element")
        else:
            out += [f"# stored into when clean: {list(st.once.arrays)}",
                    code("_backward_clean", adj, st.once.backward)]
    elif name == "gather":
        if st.gather is None:
            out.append("# the backward is not gathered")
        else:
            for r in st.gather.receivers:
                out.append(code(f"_backward_gather_{r.array}", list(r.elements) + adj, r.body))
            out.append(code("_backward_rest", adj, st.gather.rest))
    elif name == "zeroed":
        out += [f"# left all zero by every backward: {list(st.zeroed)}",
                f"# handed on (cleared only if rt_clear): {list(st.handed)}",
                f"# cleared only by a gathered backward's rest: {list(st.rest_clears)}"]
    elif name == "cover":
        out.append(f"# written whole by a storing backward: {list(st.covered)}")
    elif name == "eager":
        out.append("# no forward_vjp" if st.eager is None else
                   code("_forward_vjp", params + list(rev.adj_params), st.eager.body))
    return "\n\n".join(out)


def stage_source(pyfunc, role, stage, target="cpu", loop_capacity=256, bounds_check=True,
                 optimizations=passes.ALL, threads_only=False):
    """Python source of ``pyfunc`` after ``stage`` (one of STAGES).

    ``target`` ("cpu" or "cuda") spells the forward and backward stages; the
    earlier stages are the same for both. ``loop_capacity`` sizes a kernel's
    CUDA loop stacks (``@ad.kernel(loop_capacity=N)``); ``bounds_check=False``
    leaves out the index checks (``@ad.kernel(bounds_check=False)``);
    ``optimizations``: the optimization passes that run (passes.py); ``threads_only``:
    a kernel's thread functions alone (one thread's code, not the grid running it).
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
    tr = transform(pyfunc, role, bounds_check, optimizations)
    if stage == "ssa":
        return render_function(tr.pf.name, params, tr.ssa.body, tr.pf.source)
    if stage == "backward_user":
        return backward_text(tr, f"{tr.pf.name}_vjp")
    tr = replace(tr, loop_capacity=loop_capacity)
    return function_sources(tr, stage, target, threads_only)
