"""Timing, gradient verification and reporting shared by every workload.

A workload module (``benchmarks/workloads/*.py``) provides:

``NAME``, ``TITLE``
    short name (for ``--only``) and a one-line description;
``SIZES``
    ``{"full": {...}, "quick": {...}, "tiny": {...}, "micro": {...}}`` keyword arguments
    of ``make`` (micro: a few hundred threads, for numba's CUDA simulator);
``make(rng, **size) -> Problem``
    float32 inputs, the output cotangent used for timing (``seed``) and a random one
    used for the gradient check (``check_seed``);
``reference(problem, seed) -> (outputs, grads)``
    float64 numpy: forward outputs and the gradients of ``sum(seed * output)``;
``ref_forward(inputs) -> outputs``
    float64 numpy forward, used to check ``reference`` by finite differences;
``SYSTEMS`` (and ``CUDA_SYSTEMS`` in ``gpu_<name>.py``, which imports numba.cuda)
    ``{system name: class}`` on the CPU and on the GPU; a class is built from a
    ``Problem`` and has ``forward()``, ``fwd_bwd(seed)`` and ``result() -> (outputs,
    grads)`` (numpy arrays), each system computing the same gradients. A GPU system
    also has ``sync()``, called before the clock is read. A system that also has
    ``record()`` and ``backward(seed)`` (``fwd_bwd`` = the one, then the other) has
    its backward timed on its own; for the others the backward column is the round's
    forward+backward minus its forward (shown with a ``~``).

Every system of a workload runs in this process. After warm-up its gradient is
checked against the float64 reference, then rounds alternate between systems
(the order rotates every round) and each round times forward and
forward+backward once per system; medians (and the spread of forward+backward,
min..max) are reported, and a system's ratio to
the baseline is the median of its per-round ratios (pair by pair). The JVPs are
timed after those rounds, in rounds of their own that time each system's forward
and then its JVP (so the JVP's traffic never disturbs the forward+backward
timings); the JVP/forward ratio pairs them the same way. A JVP is checked first
against float64 central differences of the workload's ``ref_forward``.
"""
import dataclasses
import statistics
import time

import numpy as np

import adjoint as ad
from adjoint.runtime import load

from .report import bounds_check_cost

BASELINE = "numba-par"
# the baseline of the ratio column per device: the hand-written numba pair
BASELINES = {"cpu": "numba-par", "cuda": "numba-cuda"}


def unchecked(kernel):
    """``kernel`` compiled with ``@ad.kernel(bounds_check=False)``: the ``adjoint-unchecked``
    system, which shows what the default bounds checks cost."""
    return ad.Kernel(kernel.pyfunc, enable_backward=kernel.enable_backward,
                     loop_capacity=kernel.loop_capacity, bounds_check=False)


class Spent:
    """What is left of a tape after its backward, as a training loop keeps it: the
    arrays whose gradients the next iteration zeroes (``zero()``, as ``Tape.zero``),
    and no tape. A tape kept alive watches the memory its launches read and copies it
    before a later launch overwrites it (copy-on-write: a backward may run again), so
    a benchmark that kept its last tape would time those copies in every forward."""

    def __init__(self, tape):
        self.arrays = list({id(a): a for s in tape.steps for a in s.arrays()}.values())
        self.arrays += [a for a in tape.seeded if all(a is not b for b in self.arrays)]

    def zero(self):
        for a in self.arrays:
            if a.grad is not None:
                a.grad.zero_()


def fresh_tape(last):
    """A new ``ad.Tape`` after zeroing the gradients of ``last`` (a ``Spent``, or None)."""
    if last is not None:
        last.zero()
    return ad.Tape()


class GradientMismatch(RuntimeError):
    """A system's forward value or gradient disagrees with the float64 reference;
    ``system`` names it (None when the reference itself is wrong)."""

    def __init__(self, message, system=None):
        super().__init__(message)
        self.system = system


class SystemFailed(RuntimeError):
    """A system raised while it was built, warmed up or checked (``system`` names it;
    the original exception is the cause)."""

    def __init__(self, system, exc):
        super().__init__(f"system '{system}' raised {type(exc).__name__}: {exc}")
        self.system = system


@dataclasses.dataclass
class Problem:
    inputs: dict           # name -> float32/int32 numpy array or scalar
    diff: tuple            # names of the inputs we differentiate with respect to
    outputs: tuple         # names of the outputs (keys of the outputs dict)
    seed: dict             # output name -> cotangent used for timing
    check_seed: dict       # output name -> random cotangent used for the check
    meta: dict = dataclasses.field(default_factory=dict)
    tangent: dict = None   # diff input name -> float32 direction of the JVP (set_tangent)


def set_tangent(problem, rng):
    """Give ``problem`` a random float32 tangent (standard normal) for every input it
    differentiates; the JVP systems build their tangent arrays from it."""
    problem.tangent = {name: rng.standard_normal(np.shape(problem.inputs[name])).astype(np.float32)
                       for name in problem.diff}
    return problem


def now():
    return time.perf_counter()


# JAX's CPU thread pool keeps spinning for tens of milliseconds after a call returns:
# the next system timed (always the same one, as the order only rotates) lost a core to it
# (n-body's forward measured 40 ms after JAX, 22 ms alone). A JAX call is followed by a pause.
SETTLE_AFTER_S = {"jax": 0.1}


def timed(fn, *args, sync=None):
    """Seconds ``fn(*args)`` takes; ``sync()`` (a GPU system's) waits for the device."""
    t0 = time.perf_counter()
    fn(*args)
    if sync is not None:
        sync()
    return time.perf_counter() - t0


def settle(system):
    """Let ``system``'s worker threads go idle before anything else is timed, and give
    numba's threads back: adjoint's governor (runtime/load.py) may have lowered them for
    the calling thread, which the hand-written pairs' ``prange`` loops run on too."""
    pause = SETTLE_AFTER_S.get(getattr(system, "requires", None), 0.0)
    if pause:
        time.sleep(pause)
    load.release()


def rel_errors(got, ref):
    """(relative L2 error, max abs error / max |ref|) of ``got`` against ``ref``."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    if got.shape != ref.shape:
        return float("inf"), float("inf")
    if not np.all(np.isfinite(got)):
        return float("inf"), float("inf")
    scale2 = np.linalg.norm(ref) or 1.0
    scalem = np.max(np.abs(ref)) if ref.size else 1.0
    scalem = scalem or 1.0
    return (float(np.linalg.norm(got - ref) / scale2),
            float(np.max(np.abs(got - ref)) / scalem) if ref.size else 0.0)


# float32 kernels against a float64 reference: a relative L2 error of 1e-3 and a
# worst entry within 1% of the largest are far below what a wrong gradient gives
# (a missing term, a race or a dropped overwrite is O(1)).
TOL_L2 = 1e-3
TOL_MAX = 1e-2


def verify(workload, system_name, system, problem, ref_cache):
    """Run ``fwd_bwd(check_seed)`` and compare outputs and gradients with float64."""
    if "ref" not in ref_cache:
        ref_cache["ref"] = workload.reference(problem, problem.check_seed)
    ref_out, ref_grads = ref_cache["ref"]
    system.fwd_bwd(problem.check_seed)
    outs, grads = system.result()
    pairs = [(f"out {n}", outs[n], ref_out[n]) for n in problem.outputs] + \
        [(f"d/d{n}", grads[n], ref_grads[n]) for n in problem.diff]
    return _judge(pairs, f"GRADIENT CHECK FAILED: workload '{workload.NAME}', system "
                         f"'{system_name}'", "", system_name)


def _judge(pairs, title, how, system):
    """The worst relative L2 error of ``pairs`` [(label, got, float64 reference)], or a
    ``GradientMismatch`` titled ``title`` listing every error when one is too large."""
    report = [(what, *rel_errors(got, ref)) for what, got, ref in pairs]
    bad = [what for what, l2, mx in report if not (l2 <= TOL_L2 and mx <= TOL_MAX)]
    if bad:
        lines = "\n".join(f"    {what:<12} rel L2 {l2:.2e}  rel max {mx:.2e}" for what, l2, mx in report)
        raise GradientMismatch(
            f"{title}: {', '.join(bad)} disagree(s) with the float64 reference{how} "
            f"(tolerance: rel L2 <= {TOL_L2:g}, rel max <= {TOL_MAX:g})\n{lines}", system)
    return max((r[1] for r in report), default=0.0)


def _float64(inputs):
    """``inputs`` with every float array in float64 (what the references compute in)."""
    return {k: (np.asarray(v, np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f"
                else v) for k, v in inputs.items()}


def tangent_arrays(problem, outputs):
    """The tangents of a system's JVP launch, ``{name: ad.Array}``: ``problem.tangent``
    of each differentiated input (none when the problem has no tangent, as in the
    start-up measurements) and a zeroed float32 tangent per output array of
    ``outputs`` ({name: ad.Array}), on the default device."""
    dots = {name: ad.array(v) for name, v in (problem.tangent or {}).items()}
    dots.update({name: ad.zeros(a.shape, dtype=ad.float32) for name, a in outputs.items()})
    return dots


def jvp_reference(workload, problem):
    """float64 outputs' directional derivatives along ``problem.tangent``: central
    differences of ``ref_forward`` (step 1e-6 of the largest input; the error is far
    below the float32 tolerance)."""
    x64 = _float64(problem.inputs)
    h = 1e-6 * max(1.0, *(float(np.max(np.abs(x64[k]))) for k in problem.diff))
    plus = dict(x64, **{k: x64[k] + h * problem.tangent[k] for k in problem.diff})
    minus = dict(x64, **{k: x64[k] - h * problem.tangent[k] for k in problem.diff})
    up, down = workload.ref_forward(plus), workload.ref_forward(minus)
    return {k: (up[k] - down[k]) / (2 * h) for k in problem.outputs}


def verify_jvp(workload, system_name, system, problem, ref_cache):
    """Run ``jvp()`` and compare its outputs with float64 and its output tangents with
    central differences (``jvp_reference``); a ``GradientMismatch`` when they disagree."""
    if "ref" not in ref_cache:
        ref_cache["ref"] = workload.reference(problem, problem.check_seed)
    if "jvp" not in ref_cache:
        ref_cache["jvp"] = jvp_reference(workload, problem)
    system.jvp()
    outs, dots = system.jvp_result()
    pairs = [p for n in problem.outputs for p in ((f"out {n}", outs[n], ref_cache["ref"][0][n]),
                                                   (f"dot {n}", dots[n], ref_cache["jvp"][n]))]
    return _judge(pairs, f"JVP CHECK FAILED: workload '{workload.NAME}', system '{system_name}'",
                  " (central differences for the tangents)", system_name)


def fd_check_reference(workload, rng):
    """Check the workload's analytic float64 reference against central finite
    differences of its float64 forward on the ``tiny`` instance (random directions)."""
    problem = workload.make(np.random.default_rng(1234), **workload.SIZES["tiny"])
    inputs64 = _float64(problem.inputs)
    seed = {k: np.asarray(v, np.float64) for k, v in problem.check_seed.items()}
    _, grads = workload.reference(problem, problem.check_seed)

    def loss(inp):
        outs = workload.ref_forward(inp)
        return sum(float(np.sum(seed[k] * outs[k])) for k in problem.outputs)

    worst = 0.0
    for name in problem.diff:
        for _ in range(2):
            v = rng.standard_normal(np.shape(inputs64[name]))
            h = 1e-6 * max(1.0, float(np.max(np.abs(inputs64[name]))))
            plus = dict(inputs64, **{name: inputs64[name] + h * v})
            minus = dict(inputs64, **{name: inputs64[name] - h * v})
            fd = (loss(plus) - loss(minus)) / (2 * h)
            ad_ = float(np.sum(np.asarray(grads[name], np.float64) * v))
            err = abs(fd - ad_) / max(abs(fd), abs(ad_), 1e-12)
            worst = max(worst, err)
            if err > 1e-5:
                raise GradientMismatch(
                    f"REFERENCE CHECK FAILED: workload '{workload.NAME}': the float64 reference "
                    f"gradient w.r.t. '{name}' gives {ad_:.9g} along a random direction, "
                    f"finite differences give {fd:.9g} (rel. error {err:.2e})")
    return worst


@dataclasses.dataclass
class Result:
    workload: str
    system: str
    fwd: list
    fb: list
    worst_err: float
    note: str = ""
    jvp: list = dataclasses.field(default_factory=list)   # seconds per JVP round; [] without one
    jvp_fwd: list = dataclasses.field(default_factory=list)   # the forward timed in that round
    jvp_err: float = None
    bwd: list = dataclasses.field(default_factory=list)   # seconds of the backward per round
    bwd_measured: bool = False      # timed on its own (else fwd+bwd - fwd of the round)

    @property
    def bwd_ms(self):
        return 1e3 * statistics.median(self.bwd)

    def bwd_text(self):
        return f"{'' if self.bwd_measured else '~'}{self.bwd_ms:.2f}"

    def spread_text(self):
        return f"{1e3 * min(self.fb):.2f}..{1e3 * max(self.fb):.2f}"

    @property
    def jvp_ms(self):
        return 1e3 * statistics.median(self.jvp) if self.jvp else None

    @property
    def fwd_ms(self):
        return 1e3 * statistics.median(self.fwd)

    @property
    def fb_ms(self):
        return 1e3 * statistics.median(self.fb)


def paired_ratio(a, b):
    """Median over rounds of a[r] / b[r] (pair by pair)."""
    return statistics.median(x / y for x, y in zip(a, b))


def run_workload(workload, problem, systems, repeat, warmup, log, jvp=True):
    """Build, warm up, verify and time ``systems`` ({name: class}) on ``problem``; with
    ``jvp``, the JVP of each system that has one too."""
    built, results, ref_cache = {}, {}, {}
    for name, cls in systems.items():
        t0 = now()
        try:
            sysobj = cls(problem)
            has_jvp = jvp and hasattr(sysobj, "jvp")
            for _ in range(warmup):
                sysobj.forward()
                sysobj.fwd_bwd(problem.seed)
                if has_jvp:
                    sysobj.jvp()
            if hasattr(sysobj, "sync"):
                sysobj.sync()
            t_warm = now() - t0
            worst = verify(workload, name, sysobj, problem, ref_cache)
            jvp_err = verify_jvp(workload, name, sysobj, problem, ref_cache) if has_jvp else None
        except GradientMismatch:
            raise
        except Exception as exc:
            raise SystemFailed(name, exc) from exc
        log(f"    {name:<11} built+warm-up {t_warm:6.2f} s, gradient check OK "
            f"(worst rel L2 error {worst:.1e})"
            + (f", JVP check OK ({jvp_err:.1e})" if has_jvp else ""))
        built[name] = sysobj
        results[name] = Result(workload.NAME, name, [], [], worst, getattr(sysobj, "note", ""),
                               jvp_err=jvp_err, bwd_measured=hasattr(sysobj, "record") and
                               hasattr(sysobj, "backward"))
    names = list(built)
    for r in range(repeat):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            s = built[name]
            sync = getattr(s, "sync", None)
            res = results[name]
            res.fwd.append(timed(s.forward, sync=sync))
            if res.bwd_measured:
                t_rec = timed(s.record, sync=sync)
                res.bwd.append(timed(s.backward, problem.seed, sync=sync))
                res.fb.append(t_rec + res.bwd[-1])
            else:
                res.fb.append(timed(s.fwd_bwd, problem.seed, sync=sync))
                res.bwd.append(res.fb[-1] - res.fwd[-1])
            settle(s)
    with_jvp = [n for n in names if jvp and hasattr(built[n], "jvp")]
    for r in range(repeat if with_jvp else 0):
        for name in with_jvp[r % len(with_jvp):] + with_jvp[:r % len(with_jvp)]:
            s = built[name]
            sync = getattr(s, "sync", None)
            results[name].jvp_fwd.append(timed(s.forward, sync=sync))
            results[name].jvp.append(timed(s.jvp, sync=sync))
            settle(s)
    return results


# issue 14's targets for adjoint: (label, system measured against, at most / at least)
TARGETS = (("fwd+bwd vs numba-par", "<=", 1.2), ("(fwd+bwd)/fwd", "<=", 3.0),
           ("warp / adjoint", ">=", 3.0))


def target_ratios(systems, system="adjoint", baseline=BASELINE, rival="warp"):
    """The three ratios of ``TARGETS`` for one workload's results ({name: Result}), each
    a median of per-round ratios (a round runs every system back to back, so a slow
    phase of the machine slows the systems of that round alike); None where a system
    is missing."""
    r = systems.get(system)
    if r is None:
        return None
    base, other = systems.get(baseline), systems.get(rival)
    return (paired_ratio(r.fb, base.fb) if base is not None else None,
            paired_ratio(r.fb, r.fwd),
            paired_ratio(other.fb, r.fb) if other is not None else None)


def format_targets(rows):
    """A markdown table of ``TARGETS`` per workload, each value with "ok" or "MISSED",
    and a last line counting what was missed."""
    by_wl = {}
    for r in rows:
        by_wl.setdefault(r.workload, {})[r.system] = r
    lines = ["| workload | " + " | ".join(f"{label} ({op} {bound:g})" for label, op, bound in TARGETS)
             + " |", "| --- |" + " ---: |" * len(TARGETS)]
    missed = []
    for wl, systems in by_wl.items():
        ratios = target_ratios(systems)
        if ratios is None:
            continue
        cells = []
        for (label, op, bound), v in zip(TARGETS, ratios):
            if v is None:
                cells.append("n/a")
                continue
            ok = v <= bound if op == "<=" else v >= bound
            cells.append(f"{v:.2f} {'ok' if ok else 'MISSED'}")
            if not ok:
                missed.append(f"{wl}: {label} {v:.2f}")
        lines.append(f"| {wl} | " + " | ".join(cells) + " |")
    lines.append("missed: " + "; ".join(missed) if missed else "every target met")
    return "\n".join(lines)


# issue 39's target for a captured tape (adjoint-captured, the user forms): fwd+bwd within
# 1.2x of the hand-written parallel pair, 1.3x for the stencil's 51 small launches
CAPTURE_TARGET = {"stencil-user": 1.3}
CAPTURE_DEFAULT = 1.2


def format_capture_targets(rows, system="adjoint-captured", baseline=BASELINE):
    """A markdown table of issue 39's capture target per workload with a captured system,
    or "" where none ran."""
    by_wl = {}
    for r in rows:
        by_wl.setdefault(r.workload, {})[r.system] = r
    lines, missed = [], []
    for wl, systems in by_wl.items():
        r, base = systems.get(system), systems.get(baseline)
        if r is None or base is None:
            continue
        bound = CAPTURE_TARGET.get(wl, CAPTURE_DEFAULT)
        v = paired_ratio(r.fb, base.fb)
        ok = v <= bound
        if not ok:
            missed.append(f"{wl}: {v:.2f}")
        lines.append(f"| {wl} | {v:.2f} | <= {bound:g} | {'ok' if ok else 'MISSED'} |")
    if not lines:
        return ""
    return "\n".join([f"| workload | {system} fwd+bwd vs {baseline} | target | |",
                      "| --- | ---: | ---: | --- |"] + lines +
                     ["missed: " + "; ".join(missed) if missed else "every target met"])


def format_table(rows, baseline=BASELINE):
    """rows: list of Result for all workloads; returns a markdown table (medians,
    per-round ratios, the backward (``~``: fwd+bwd minus fwd of the same round) and the
    spread min..max of fwd+bwd: the best time is the one a busy machine disturbs least)."""
    by_wl = {}
    for r in rows:
        by_wl.setdefault(r.workload, {})[r.system] = r
    head = ("| workload | system | forward ms | backward ms | fwd+bwd ms | (fwd+bwd)/fwd | jvp ms "
            f"| jvp/fwd | fwd+bwd vs {baseline} | fwd+bwd min..max ms |")
    lines = [head, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for wl, systems in by_wl.items():
        base = systems.get(baseline)
        for name, r in systems.items():
            ratio = f"{paired_ratio(r.fb, base.fb):.2f}x" if base is not None else "n/a"
            fb_over_f = paired_ratio(r.fb, r.fwd)
            jvp = (f"{r.jvp_ms:.2f} | {paired_ratio(r.jvp, r.jvp_fwd):.2f}" if r.jvp else "| ")
            lines.append(f"| {wl} | {name} | {r.fwd_ms:.2f} | {r.bwd_text()} | {r.fb_ms:.2f} | "
                         f"{fb_over_f:.2f} | {jvp} | {ratio} | {r.spread_text()} |")
    checks = bounds_check_cost({wl: {n: (r.fwd, r.fb) for n, r in s.items()}
                                for wl, s in by_wl.items()})
    return "\n".join(lines + ([""] + checks if checks else []))
