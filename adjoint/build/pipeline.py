"""The pipeline: the passes of adjoint/build/passes.py run in their order, and the code after any.

``transform`` runs every pass of ``passes.PASSES`` whose stage is "transform", in the
list's order, each reading the fields of ``Transformed`` it names and making those it
names (build/calls.py's ``RUN`` holds how each is called); an optimization pass that is off
makes what it makes when it finds nothing to do (``start``). The emit passes (firsts,
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

from . import passes
from ..emit import stacks, warp
from ..emit.module import function_sources
from ..emit.printer import render_function
from ..emit.user import backward_text
from ..emit.targets import TARGETS
from ..frontend.fence import fence
from ..frontend.parse import parse, transforming
from ..frontend.scalarize import scalarize
from ..derive import normalize
from .calls import RUN, TANGENT_ONLY

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
    # what a variant holding other arrays constant resumes from (Resume; kernels)
    resume: object = field(default=None, compare=False, repr=False)


RESUME_AT = "zero_tangents"     # the first pass whose work depends on ``zero_tangents``
assert set(TANGENT_ONLY) == {    # (the passes after it whose work reads the tangent)
    p.name for p in passes.PASSES[list(passes.BY_NAME).index(RESUME_AT) + 1:]
    if p.stage == "transform" and p.optimization and "tangent" in p.reads}


@dataclass(frozen=True)
class Resume:
    """What a zero-tangents variant of a kernel resumes from (api.Kernel.with_zero_tangents).
    ``before``: the passes' state before pass ``RESUME_AT``, the first to read the arrays
    held constant (the passes before it are not run again). ``final``: the fields the
    kernel's transform ended with, and ``untangent_applied`` the optimization passes that
    changed one of them other than its tangent: what the variant's optimization passes
    that read no tangent share (``_shared``)."""
    before: SimpleNamespace
    final: dict
    untangent_applied: tuple


def transform(pyfunc, role, bounds_check=True, optimizations=passes.ALL,
              zero_tangents=frozenset(), resume=None):
    """Run every pass on ``pyfunc`` (``role`` "kernel" or "func"), the optimization passes
    in ``optimizations`` only. ``bounds_check`` (kernels): check array indices (pass
    bounds); ``ssa`` is then the checked tree. ``zero_tangents`` (kernels): float arrays
    the kernel only reads whose tangents the JVP takes as zero (pass zero_tangents).
    ``resume``: the ``Resume`` of the same function transformed with the same options
    but other zero tangents; the passes before ``RESUME_AT`` are not run again (they read
    no zero tangents, and passes return new trees, so their results are shared:
    tests/build/test_passes_pure.py), nor are the optimizations after it that read no
    tangent (their results are the kernel's transform's: ``_shared``). The result's
    ``resume`` is the one given, or this transform's own."""
    with transforming(pyfunc):
        st = _run(pyfunc, role, bounds_check, frozenset(optimizations),
                  zero_tangents=frozenset(zero_tangents), resume=resume)
    made = {f.name: getattr(st, f.name) for f in fields(Transformed) if hasattr(st, f.name)}
    if resume is None and hasattr(st, "before"):
        resume = Resume(st.before, made, st.untangent_applied)
    return Transformed(**{**made, "ssa": st.checked, "resume": resume})


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
    if resume is not None:
        vars(st).update(vars(resume.before), zero_tangents=zero_tangents)
    shown = _print_after()
    resumed = resume is not None
    for p in passes.PASSES:
        if resumed:
            if p.name != RESUME_AT:
                continue        # (made already: the state resumed from holds its work)
            resumed = False
        if p.name == RESUME_AT and resume is None and role == "kernel":
            # (only a kernel has zero-tangent variants to resume: Kernel.with_zero_tangents)
            st.before = SimpleNamespace(**{k: v for k, v in vars(st).items() if k != "before"})
        if p.stage == "transform" and role in p.roles:
            if not p.optimization or p.name in enabled:
                if resume is not None and p.name != RESUME_AT:
                    made = _shared(st, p, resume)
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


def _shared(st, p, resume):
    """What optimization pass ``p`` (after pass zero_tangents) makes for a variant resumed
    from ``resume`` (a ``Resume``): a pass that reads no tangent made the same from the
    same input, so the kernel's fields are shared; one that reads the tangent
    (reciprocal, scale: ``TANGENT_ONLY``) rewrites the variant's tangent alone."""
    shared = {k: resume.final[k] for k in p.makes if k != "tangent"}
    own = TANGENT_ONLY[p.name](st) if "tangent" in p.reads else {}
    if p.name in resume.untangent_applied or _changed(st, own):
        st.applied += (p.name,)
    return {**shared, **own}


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

    makes = passes.BY_NAME[name].makes
    if makes == ("pf",):        # (parse, unroll, scalarize, fence: the function's tree)
        return "\n".join([head, code("", params, pf.node.body)])
    if makes == ("norm",):      # (normalize, inline)
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
