"""Every program at two optimization levels: the optimized run against the plain one.

The optimization passes of adjoint/build/passes.py only make code faster; with them all off
(``passes.optimizing(False)``, what ``ADJOINT_OPTIMIZE=0`` gives) the core passes' plain
rule-by-rule code runs. After a backend has run a program as it always did (with the
optimizations enabled now), ``check`` runs it again on the same backend with none, from
a module of its own (``modules``: a fresh import, so nothing the optimized level built --
a kernel's printed backward, a func's JVP -- is reused), and compares what the two runs
computed (``Outcome.values``: forward values, the arrays after the backward, gradients,
JVPs; the derivatives of funcs called from Python; Hessian-vector products; a
checkpointed tape's results):

- bit for bit, unless an optimization that may round otherwise applied to a kernel or
  func of the program (``pipeline.inexact``: order, reciprocal, gather, eager, jam where
  it joins two threads' adds, zero_tangents) to the kind of result compared
  (``Pass.rounds``: zero_tangents rounds JVPs alone), or the backend is CUDA (atomics
  add in the order threads arrive); then within ``1e-9`` in float64 and ``2e-4`` in float32, relative to the
  array's largest magnitude (at least 1). NaN equals NaN. This is tests/levels.py's rule.
- The plain run is itself checked against the finite differences (a wrong core pass is a
  mismatch there, whatever the optimizations do).

A difference is a *level mismatch* (status ``levels``, or noted after a mismatch's own
lines), and
then each optimization pass that applied is turned off alone (``-scale``: all the others
on) and compared with the optimized run, which names the pass whose absence changes the
results. ``each_pass`` does that on a sample of programs too (``--each-pass P``).
"""
import numpy as np

from adjoint import passes
from adjoint.api import Func, _Built
from adjoint.build.pipeline import inexact

TOLERANCE = {"f8": 1e-9, "f4": 2e-4}
ATOMICS = "cuda (atomics add in any order)"


def optimizations(mod, backend):
    """``(applied, rounding)``: the optimization passes applied (under the setting now) to
    the kernels and funcs of ``mod`` (its funcs only for a ``-funcs`` backend) and to
    what was printed from them (a kernel's backward for ``hvp``, a func's JVP for
    ``ad.hessian``: ``built``), and those of them
    that may round otherwise (``pipeline.inexact``); CUDA's atomics count as rounding."""
    applied, rounding = set(), set()
    kinds = Func if backend.endswith("-funcs") else _Built     # (from Python: funcs only)
    seen, stack = set(), [v for v in vars(mod).values() if isinstance(v, kinds)]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        try:
            tr = obj.transformed_at(obj.optimizations())
        except Exception:  # noqa: BLE001 - a refused one: the run says so
            continue
        applied.update(tr.applied)
        rounding.update(inexact(tr))
        stack += list(_derived(obj.built))
    if backend.split("-")[0].startswith("cuda"):
        rounding.add(ATOMICS)
    return applied, rounding


def _derived(value):
    if isinstance(value, _Built):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _derived(v)


def tolerance(dtype, rounding):
    """0 (bit for bit) unless something that rounds otherwise applied."""
    if not rounding:
        return 0.0
    return TOLERANCE["f4"] if np.dtype(dtype) == np.float32 else TOLERANCE["f8"]


def difference(got, want, rounding, what):
    """The first value of ``got`` (name -> array or number, the optimized run's) that
    ``want`` (the other run's) does not match, in words; None when all agree."""
    for name in list(got) + [n for n in want if n not in got]:
        if name not in got or name not in want:
            return f"{name}: computed {'optimized' if name in got else what} only"
        x, y = np.asarray(got[name]), np.asarray(want[name])
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{name}: shape/dtype {x.shape}/{x.dtype} optimized, {y.shape}/{y.dtype} {what}"
        if x.dtype.kind not in "fc":
            if not np.array_equal(x, y):
                return f"{name}: {x!r} optimized, {y!r} {what}"
            continue
        tol = tolerance(x.dtype, _rounding_in(name, rounding))
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if tol:
            scale = max(1.0, float(np.nanmax(np.abs(x), initial=0.0)))
            same |= np.abs(x - y) <= tol * scale
        if not same.all():
            at = tuple(int(v) for v in np.argwhere(~same)[0]) if x.ndim else ()
            where = list(at) if at else ""
            return (f"{name}{where}: {x[at]!r} optimized, {y[at]!r} {what} "
                    f"({int((~same).sum())} of {same.size} differ, "
                    f"{'bit for bit' if not tol else f'tolerance {tol:g}'})")
    return None


def _rounding_in(name, rounding):
    """Those of ``rounding`` that may round the result ``name`` (check.observed's: a JVP,
    a gradient, or a value) otherwise (``Pass.rounds``): pass zero_tangents, for one,
    rounds tangents alone."""
    kind = "tangents" if name.startswith("JVP") else \
        "gradients" if name.startswith("gradient") else "values"
    return {r for r in rounding
            if r not in passes.BY_NAME or kind in passes.BY_NAME[r].rounds}


def context(applied, rounding):
    return (f"optimizations applied: {', '.join(sorted(applied)) or 'none'}; may round "
            f"otherwise: {', '.join(sorted(rounding)) or 'none'}")


def check(out, mod, backend, run, load, each_pass=False, diagnose=True):
    """Compare ``out`` (an ``Outcome`` of the optimized run of a program on ``backend``,
    from module ``mod``) with the plain run: ``run(module)`` runs the program on the
    backend, ``load(setting)`` imports it afresh for a ``passes.optimizing`` setting.
    Returns ``(outcome, record)``: the outcome with the levels' findings folded in (status
    ``levels`` where only they failed) and a record for the summary (status ok,
    disagree or skipped; applied and inexact passes; each pass alone off, where run:
    ``each_pass``, or ``diagnose`` and the levels disagree)."""
    applied, rounding = optimizations(mod, backend)
    rec = {"status": "skipped", "applied": sorted(applied), "inexact": sorted(rounding),
           "exact": not (_rounding_in("gradient", rounding) | _rounding_in("value", rounding))}
    if out.status not in ("ok", "mismatch") or not passes.current():
        return out, rec             # (a refusal or an error: nothing computed to compare)
    with passes.optimizing(False):
        plain = run(load(False))
    notes, status = [], out.status
    if plain.status not in ("ok", "mismatch"):
        differs = f"unoptimized: {plain.status}: {plain.detail.strip()}"
        status = _worse(status, "internal" if plain.status == "internal" else "levels")
    else:
        differs = difference(out.values, plain.values, rounding, "unoptimized")
        if plain.status == "mismatch":
            notes.append(f"the unoptimized run (ADJOINT_OPTIMIZE=0) fails"
                         f"{' too' if out.status == 'mismatch' else ''}: "
                         + plain.detail.strip().replace("\n", "\n  "))
            status = "mismatch"
        elif out.status == "mismatch" and differs:
            notes.append("the unoptimized code agrees with the finite differences: an "
                         "optimization pass is wrong")
    if differs:
        status = _worse(status, "levels")
        notes.insert(0, f"optimized and unoptimized disagree: {differs} "
                        f"({context(applied, rounding)})")
    rec["status"] = "disagree" if differs else "ok"
    if differs and diagnose or each_pass:
        rec["each"] = each(out, applied, rounding, run, load)
        off = [f"-{n}" for n, r in rec["each"].items() if r != "agrees"]
        if differs or off:
            notes += [f"  with -{n} alone: {r}" for n, r in rec["each"].items()]
        if differs:
            notes.insert(1 + any(n.startswith("the unoptimized") for n in notes),
                         f"turned off alone, {', '.join(off) or 'no single pass'} "
                         f"change{'s' if len(off) == 1 else ''} the results")
        elif off:
            status = _worse(status, "levels")
            rec["status"] = "disagree"
            notes.insert(0, f"optimized and one pass off disagree: {', '.join(off)} "
                         f"({context(applied, rounding)})")
    if status != out.status or notes:
        # (a mismatch of the optimized run keeps its first line: --minimize shrinks by it)
        parts = (out.detail.strip(), *notes) if out.status == "mismatch" else \
            (*notes, out.detail.strip())
        out.status = status
        out.detail = "\n".join(d for d in parts if d)
    return out, rec


def each(out, applied, rounding, run, load):
    """``{pass: "agrees" or what differs}``: the program run with each applied
    optimization pass alone off, against the optimized run ``out``."""
    found, now = {}, passes.current()
    for name in sorted(applied):
        setting = f"-{name}"        # (the optimizations enabled now, but that one)
        mod = load(setting)
        with passes.optimizing(now - {name}):
            alone = run(mod)
            more = optimizations(mod, "")[1]
        if alone.status not in ("ok", "mismatch"):
            found[name] = f"{alone.status}: {alone.detail.strip().splitlines()[0][:200]}"
            continue
        found[name] = difference(out.values, alone.values, rounding | more,
                                 f"with -{name}") or "agrees"
    return found


ORDER = ["ok", "refusal", "generator", "levels", "mismatch", "internal"]


def _worse(a, b):
    return a if ORDER.index(a) >= ORDER.index(b) else b
