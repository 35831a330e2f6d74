"""Run one program on adjoint's backends and judge it against the float64 reference.

``finite_differences`` draws the checks of a program once (backend-independent):
for each leaf array a few single entries and one random direction over all of
it, each a central difference of the reference loss, marked unreliable when the
branch traces at ``x + h v`` and ``x - h v`` differ (a branch switched in
between). ``run_backend`` records the schedule on an ``ad.Tape`` on one backend,
runs ``backward`` and returns an ``Outcome``:

Then (forward mode) the schedule runs again with tangents, once per leaf along the
leaf's random direction (``ad.launch(..., tangents=...)``, tangents carried through
clones and copies like their arrays): the loss's tangent must match the same
central difference the reverse pass is checked against. (A documented refusal of the
JVP alone -- a func with ``@ad.func_grad`` and no ``@ad.func_jvp`` -- leaves the JVP
unchecked and is noted in the outcome's detail.)

A backend named with ``32`` (``race32``, ``numba32``, ...) runs the program as a
float32 program (``as_float32``: float arrays, scalars and funcs in float32) on float32
copies of the data, against the same float64 reference with float32 tolerances
(``TOL32``): what a kernel computes in float32 is the same function, rounded. Rounding
can take another branch than the reference did (a value compared with another it
nearly equals, a difference that is 0 in float32). Where a forward value is off, the
reference runs the program once more in float32 (``Reference(prog, float32=True)``:
each math function's result rounded to float32): if adjoint's forward values agree
with that run, the run counts as ``diverged`` (status ok, every check skipped,
reported apart); if not, it is a mismatch.

``ok``        forward values, gradients, the arrays after backward and the JVPs agree;
``refusal``   adjoint raised one of its own errors (TransformError, LaunchError...);
              ``located`` says whether the message names a file:line;
``mismatch``  a forward value, a gradient (beyond tolerance), an array the
              backward pass changed, or a race the checker saw (backend "race");
``internal``  any other exception (numba TypingError, IndentationError...); a
              crash or a hang is classified by the driver that runs the worker.
"""
import contextlib
import importlib.util
import os
import re
import sys
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

import adjoint as ad
from adjoint.runtime.racecheck import RaceError, racecheck

from . import captured
from .program import program_data
from .reference import Reference

H = 1e-6
LOCATED = re.compile(r"\.py:\d+")


@dataclass(frozen=True)
class Tolerance:
    """How close adjoint's numbers must be to the reference's: forward values within
    ``forward * (1 + max |value|)``; a gradient or JVP within ``grad`` of the larger of
    the finite difference and the gradient's own size, plus ``floor * (1 + scale)``.
    ``rounded``: a forward value off the reference may be rounding taking another branch
    (float32: ``x - 0.84 >= y`` can flip, ``cosh(t) - 1`` of a tiny ``t`` is 0); the
    run is then ``diverged`` and its gradients are not compared (check.py docstring)."""
    forward: float
    grad: float
    floor: float
    rounded: bool = False


TOL64 = Tolerance(forward=1e-9, grad=1e-5, floor=1e-8)
TOL32 = Tolerance(forward=1e-4, grad=1e-3, floor=1e-5, rounded=True)  # ~1e-7 a rounding
FLOAT32 = "32"          # the suffix of a backend name that runs the program in float32


def split_backend(backend):
    """``(base backend, float32?)`` of a backend name: ``numba32`` is numba in float32."""
    if backend.endswith(FLOAT32):
        return backend[:-len(FLOAT32)], True
    return backend, False


def as_float32(source):
    """A generated program's source as a float32 program: float arrays, float scalar
    parameters and returns of kernels, funcs and rules float32, and vector types their
    float32 kinds (``ad.vec3`` -> ``ad.vec3f``). Only the spellings the generators
    write are rewritten."""
    source = source.replace("dtype=float)", "dtype=ad.float32)").replace(
        "dtype=float,", "dtype=ad.float32,")
    source = re.sub(r"(\w+): float\b", r"\1: ad.float32", source)
    source = re.sub(r"-> float\b", "-> ad.float32", source)
    return re.sub(r"\bad\.(vec[234]|mat22|mat33|mat44|quat|transform)\b(?![\w(])",
                  r"ad.\1f", source)


@dataclass
class Check:
    leaf: str
    what: str              # "entry 3" or "direction"
    fd: float
    reliable: bool
    direction: np.ndarray = None    # None: one entry
    entry: tuple = ()


@dataclass
class Reference64:
    """What the reference says about a program: initial data, weights, final arrays, checks."""
    data: dict
    weights: dict
    finals: dict
    scale: float           # sum of |w * final|: the size of the loss, for the FD tolerance
    checks: list
    rounded: object = None  # () -> the final arrays of the program run in float32 (Reference)


@dataclass
class Outcome:
    status: str            # ok, refusal, mismatch, internal
    detail: str = ""
    located: bool = True
    skipped: int = 0
    checked: int = 0
    errors: list = field(default_factory=list)
    diverged: bool = False  # a float32 forward value off the reference: gradients not compared
    values: dict = field(default_factory=dict)  # what the run computed, by name (levels.py)


def finite_differences(prog, entries=3):
    ref = Reference(prog)
    data, weights = program_data(prog)
    finals, _ = ref.run(data)
    scale = sum(float(np.sum(np.abs(w * finals[n]))) for n, w in weights.items())
    rng = np.random.default_rng(prog.seed + 1)
    checks = []
    for leaf in prog.leaves():
        x = data[leaf]
        picks = [tuple(int(c) for c in np.unravel_index(rng.integers(x.size), x.shape))
                 for _ in range(min(entries, x.size))]
        for e in dict.fromkeys(picks):
            v = np.zeros_like(x)
            v[e] = 1.0
            checks.append(_difference(ref, data, weights, leaf, v, f"entry {e}", e))
        checks.append(_difference(ref, data, weights, leaf, rng.standard_normal(x.shape),
                                  "direction", None))
    return Reference64(data, weights, finals, scale, checks, _once(
        lambda: Reference(prog, float32=True).run(_as_float32(data))[0]))


def _once(fn):
    """``fn``, called at most once (its result kept)."""
    kept = []

    def call():
        if not kept:
            with np.errstate(all="ignore"):
                kept.append(fn())
        return kept[0]
    return call


def _difference(ref, data, weights, leaf, v, what, entry):
    plus, minus = dict(data), dict(data)
    plus[leaf] = data[leaf] + H * v
    minus[leaf] = data[leaf] - H * v
    fp, tp = ref.loss(plus, weights)
    fm, tm = ref.loss(minus, weights)
    reliable = tp == tm and np.isfinite(fp) and np.isfinite(fm)
    return Check(leaf, what, (fp - fm) / (2 * H), reliable,
                 None if entry is not None else v, entry or ())


# --------------------------------------------------------------------------- adjoint side

def load_module(prog, folder, float32=False, level=""):
    """Write the program's source (``as_float32`` of it for ``float32``) to a real file
    (adjoint reads source) and import it. ``level``: a word naming another import of the
    same program (a fresh module, whose kernels and funcs share nothing with the first's:
    levels.py imports it once per optimization setting)."""
    tag = (f"{prog.seed}_f32" if float32 else f"{prog.seed}") + (f"_{level}" if level else "")
    path = os.path.join(folder, f"fuzz_{tag}.py")
    with open(path, "w") as fh:
        fh.write(as_float32(prog.source()) if float32 else prog.source())
    name = f"fuzz_program_{tag}_{os.getpid()}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _array(prog, name, values, device, requires_grad=False):
    """An ``ad.Array`` of ``values`` for the program's array ``name`` (of vec3 where it is one)."""
    dtype = prog.arrays[name].dtype
    if dtype and values.dtype == np.float32:
        dtype += "f"                # (ad.vec3f: a float32 program's, check.as_float32)
    kw = {"dtype": getattr(ad, dtype)} if dtype else {}
    return ad.array(values, requires_grad=requires_grad, device=device, **kw)


def record(prog, mod, data, device, segment=None, first=None):
    """Arrays and a tape holding the program's schedule, run on ``device``. ``segment``:
    ``(start, stop)``, steps ``start .. stop - 1`` run as one ``ad.checkpoint`` segment
    (ckpt.py); None: every step recorded on its own. ``first``: a dict given the arrays
    the schedule starts from (clones rebind names in the one returned)."""
    arrays = {n: _array(prog, n, v, device, prog.arrays[n].kind in ("leaf", "buffer"))
              for n, v in data.items()}
    if first is not None:
        first.update(arrays)
    start, stop = segment or (len(prog.steps), len(prog.steps))
    tape = ad.Tape()
    with tape:
        run_steps(prog, mod, arrays, prog.steps[:start])
        if start < stop:
            arrays.update(zip(*_checkpointed(prog, mod, arrays, prog.steps[start:stop])))
        run_steps(prog, mod, arrays, prog.steps[stop:])
    return arrays, tape


def run_steps(prog, mod, arrays, steps):
    """Run ``steps`` of the schedule on ``arrays`` (names to ``ad.Array``; a clone
    rebinds its name there)."""
    for s in steps:
        if s.op == "launch":
            k = prog.kernel(s.kernel)
            vals = [arrays[a] if isinstance(a, str) else a for a in s.args]
            ad.launch(getattr(mod, s.kernel), prog.dim,
                      inputs=[v for p, v in zip(k.params, vals) if not p.is_output],
                      outputs=[v for p, v in zip(k.params, vals) if p.is_output])
        elif s.op == "clone":
            arrays[s.dest] = ad.clone(arrays[s.src])
        elif s.op == "copy":
            ad.copy(arrays[s.dest], arrays[s.src])
        else:
            arrays[s.dest].assign(arrays[s.src])


def _checkpointed(prog, mod, arrays, steps):
    """``(names, arrays)`` of the clones ``steps`` make, the steps run as one
    ``ad.checkpoint`` segment. The segment's function changes no Python state (it runs
    again in the backward): it works on a copy of the name table and returns the arrays
    it created, which ``ad.checkpoint`` matches with those of the recomputation."""
    made = list(dict.fromkeys(s.dest for s in steps if s.op == "clone"))

    @ad.checkpoint
    def segment(given):
        local = dict(given)
        run_steps(prog, mod, local, steps)
        return tuple(local[n] for n in made)

    return made, segment(dict(arrays))


def run_backend(prog, mod, ref, backend):
    """Run ``prog`` on ``backend`` and compare with ``ref`` (a ``Reference64``).
    ``backend`` is python, numba, cuda, or race: the python backend with the race
    checker on (every launch takes its parallel plan, whatever its size); any of them
    with the suffix ``32`` runs ``mod``, the program's float32 module (``as_float32``),
    on float32 data."""
    backend, float32 = split_backend(backend)
    device = "cuda" if backend == "cuda" else "cpu"
    data, weights = ref.data, ref.weights
    if float32:
        data, weights = _as_float32(data), _as_float32(weights)
    try:
        with backend_context(backend):
            forward, after, grads = taped(prog, mod, data, weights, device)
            if device == "cpu":     # the tape's capture replays it bit for bit (captured.py)
                *replayed, eager = captured.replay(prog, mod, data, weights, device, record)
                differs = captured.mismatch((forward, after, grads), replayed, eager)
                if differs:
                    return Outcome("mismatch", differs)
            try:
                tangents = {c.leaf: directional(prog, mod, data, weights, device, c.leaf,
                                                c.direction.astype(data[c.leaf].dtype))
                            for c in ref.checks if c.direction is not None}
            except ad.AdjointError as exc:      # a documented refusal of forward mode only
                tangents, jvp_refused = None, f"JVP {type(exc).__name__}: {exc}"
            else:
                jvp_refused = ""
    except Exception as exc:  # noqa: BLE001 - a refusal, or else a finding
        return failed(exc)
    out = compare(ref, forward, after, grads, tangents, TOL32 if float32 else TOL64)
    if jvp_refused:
        out.detail = "\n".join(d for d in (out.detail, jvp_refused) if d)
    out.values = observed(forward, after, grads, tangents)
    return out


def observed(forward, after, grads, tangents=None):
    """What a taped run computed, by name (compared between optimization levels:
    levels.py): forward values, the arrays after the backward, gradients, JVPs."""
    values = {}
    for what, table in (("forward value", forward), ("after backward", after),
                        ("gradient", grads), ("JVP along", tangents or {})):
        for n, x in table.items():
            values[f"{what} {n}"] = x
    return values


@contextlib.contextmanager
def backend_context(backend):
    """Launches on ``backend`` (``race``: python with the race checker on); numba's
    parallel-safety warnings are errors."""
    with ad.backend_scope("python" if backend == "race" else backend), \
            racecheck() if backend == "race" else contextlib.nullcontext(), \
            warnings.catch_warnings():
        _race_warnings_are_errors()
        yield


def taped(prog, mod, data, weights, device, segment=None):
    """``(forward, after, grads)``: the schedule recorded (``record``) and its tape's
    backward seeded with ``weights``; the values of the weighed arrays before and after
    the backward, and the leaves' gradients."""
    arrays, tape = record(prog, mod, data, device, segment)
    forward = {n: arrays[n].numpy().copy() for n in weights}
    tape.backward(grads={arrays[n]: w for n, w in weights.items()})
    after = {n: arrays[n].numpy() for n in weights}
    grads = {n: arrays[n].grad.numpy() if arrays[n].grad is not None
             else np.zeros(data[n].shape) for n in prog.leaves()}
    return forward, after, grads


def _as_float32(arrays):
    return {n: x.astype(np.float32) if x.dtype.kind == "f" else x for n, x in arrays.items()}


def directional(prog, mod, data, weights, device, leaf, v):
    """The loss's directional derivative along ``v`` on ``leaf`` by forward mode: the
    schedule on ``data`` with a tangent array beside every float array (zero but for
    ``leaf``), its tangents weighed by ``weights``. A tangent still all zeros (no step
    has written one into it) is not given for an array a kernel only reads: the launch
    holds that array constant (pass zero_tangents; with it off, zeros are computed)."""
    arrays = {n: _array(prog, n, x, device) for n, x in data.items()}
    dots = {n: _array(prog, n, v if n == leaf else np.zeros_like(x), device)
            for n, x in data.items() if x.dtype.kind == "f"}
    zero = {n for n in dots if n != leaf}      # tangents known to be all zeros
    for s in prog.steps:
        if s.op == "launch":
            k = prog.kernel(s.kernel)
            vals = [arrays[a] if isinstance(a, str) else a for a in s.args]
            given = {p.name: dots[a] for p, a in zip(k.params, s.args)
                     if isinstance(a, str) and a in dots and (p.is_output or a not in zero)}
            zero -= {a for p, a in zip(k.params, s.args) if p.is_output}
            ad.launch(getattr(mod, s.kernel), prog.dim,
                      inputs=[x for p, x in zip(k.params, vals) if not p.is_output],
                      outputs=[x for p, x in zip(k.params, vals) if p.is_output],
                      tangents=given)
        elif s.op == "clone":
            arrays[s.dest] = ad.clone(arrays[s.src])
            if s.src in dots:
                dots[s.dest] = ad.clone(dots[s.src])
        elif s.op == "copy":
            ad.copy(arrays[s.dest], arrays[s.src])
            if s.src in dots:
                ad.copy(dots[s.dest], dots[s.src])
        else:
            arrays[s.dest].assign(arrays[s.src])
            if s.src in dots:
                dots[s.dest].assign(dots[s.src])
        if s.op != "launch" and s.src in dots:      # (clone, copy, assign: dest = src)
            (zero.add if s.src in zero else zero.discard)(s.dest)
    return sum(float(np.sum(w.astype(np.float64) * dots[n].numpy())) for n, w in weights.items())


def _race_warnings_are_errors():
    try:
        from numba.core.errors import NumbaParallelSafetyWarning
    except ImportError:
        return
    warnings.simplefilter("error", NumbaParallelSafetyWarning)


def failed(exc):
    """The ``Outcome`` of a run that raised ``exc``: a mismatch for a race the checker
    saw, a refusal for one of adjoint's own errors (``located`` when its message names a
    file:line), else an internal error."""
    if isinstance(exc, RaceError):
        return Outcome("mismatch", f"race: {exc}")
    if isinstance(exc, ad.AdjointError):
        msg = str(exc)
        return Outcome("refusal", f"{type(exc).__name__}: {msg}", bool(LOCATED.search(msg)))
    return Outcome("internal", f"{type(exc).__name__}: {exc}\n{_tail(exc)}")


def _tail(exc, lines=12):
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-lines:])


def first_off(bad):
    """The index of the first True of the mask ``bad`` (C order), as a tuple of ints."""
    return tuple(int(c) for c in np.argwhere(bad)[0])


def compare(ref, forward, after, grads, tangents=None, tol=TOL64):
    """An ``Outcome`` from adjoint's forward values, arrays after the backward, gradients
    and JVPs, against the reference ``ref`` within ``tol`` (a ``Tolerance``)."""
    errors, off = [], []
    for n, want in ref.finals.items():
        if n not in forward:
            continue
        bad = ~np.isclose(forward[n], want, rtol=tol.forward,
                          atol=tol.forward * (1.0 + np.max(np.abs(want))))
        if bad.any():
            e = first_off(bad)
            off.append(f"forward value of {n}{list(e)}: adjoint {forward[n][e]!r}, "
                       f"reference {want[e]!r} ({int(bad.sum())} elements differ)")
        if not np.array_equal(after[n], forward[n], equal_nan=True):
            errors.append(f"backward changed {n} (it holds a forward output)")
    if off and tol.rounded and not errors and ref.rounded is not None:
        rounded = ref.rounded()
        if all(np.allclose(forward[n], rounded[n], rtol=tol.forward, equal_nan=True,
                           atol=tol.forward * (1.0 + np.max(np.abs(want))))
               for n, want in ref.finals.items() if n in forward):
            return Outcome("ok", "diverged (the program run in float32 by the reference "
                           "takes the same other branch): " + off[0],
                           skipped=len(ref.checks), diverged=True)
        off.append("(the reference run in float32 does not agree either)")
    errors = off + errors
    skipped = checked = 0
    for c in ref.checks:
        g = grads[c.leaf]
        got = float(g[c.entry]) if c.direction is None else float(np.sum(g * c.direction))
        size = abs(float(g[c.entry])) if c.direction is None else float(np.sum(np.abs(g * c.direction)))
        if not np.isfinite(got):
            errors.append(f"gradient of {c.leaf} ({c.what}) is {got}")
            continue
        if not c.reliable:
            skipped += 1
            continue
        checked += 1
        within = tol.grad * max(abs(c.fd), size) + tol.floor * (1.0 + ref.scale)
        if abs(got - c.fd) > within:
            errors.append(f"gradient of {c.leaf} ({c.what}): adjoint {got!r}, "
                          f"finite difference {c.fd!r}")
        if c.direction is not None and tangents:
            t = tangents[c.leaf]
            if not np.isfinite(t) or abs(t - c.fd) > within:
                errors.append(f"JVP along {c.leaf}'s direction: forward mode {t!r}, "
                              f"finite difference {c.fd!r}")
    status = "mismatch" if errors else "ok"
    return Outcome(status, "\n".join(errors), skipped=skipped, checked=checked, errors=errors)
