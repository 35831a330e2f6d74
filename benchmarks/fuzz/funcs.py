"""The derivatives of a program's funcs called from plain Python: ``ad.grad`` and friends.

A backend named ``<backend>-funcs`` (``python-funcs``, ``numba-funcs``) checks each
``@ad.func`` of the program that returns one float, at a random point (floats in
[-1, 1], an int loop bound in 0..3), on that backend, against the plain-Python
reference (reference.py) and its central differences:

- ``ad.value_and_grad(f, argnums=<every float>)``: the value, and each partial
  derivative against a central difference along that argument;
- ``ad.jvp(f)`` along a random direction: the value and the tangent against a
  central difference along the direction;
- ``ad.hessian(f, argnums=<every float>)``, forward over reverse and reverse over
  forward: each column against a central difference of ``ad.grad`` (checked above)
  along that argument, and the two modes against each other (reverse over forward
  only, for a func with a hand-written gradient or calling one: forward over reverse
  would differentiate the user's backward, which adjoint refuses); for a func of one float,
  ``ad.grad(ad.grad(f))`` too.

A func returning several floats gets its ``ad.jvp`` checked (each output's tangent).
A func with defaulted parameters (programs drawn with extras) is called, half the time,
without some of them (their defaults used, from Python as from the reference).
A difference is skipped where a branch switched between its two points (the
reference's branch traces differ), as in check.py. A func with a hand-written
``@ad.func_grad`` has the exact ``@ad.func_jvp`` too (gen_func.py), so forward mode
and second derivatives are checked through its rules as well.
"""
import inspect
import random
import re

import numpy as np

import adjoint as ad

from .check import Outcome, failed
from .reference import Reference

H = 1e-6            # the step of a first difference of the reference
H2 = 1e-5           # the step of a difference of ad.grad (second derivatives)
RTOL, ATOL = 1e-5, 1e-8
RTOL2, ATOL2 = 1e-5, 1e-6
SUFFIX = "-funcs"
FUNC = re.compile(r"^@ad\.func\ndef (\w+)\(", re.M)


def split(backend):
    """``base backend`` of ``python-funcs``, or None for a backend of launches."""
    return backend[:-len(SUFFIX)] if backend.endswith(SUFFIX) else None


def func_names(prog):
    """The names of the program's ``@ad.func`` definitions (not their rules)."""
    return [m.group(1) for src in prog.funcs for m in FUNC.finditer(src)]


class _Point:
    """One func at one point: the reference's values and branch traces around it, and
    the findings so far (``errors``, ``checked``, ``skipped``)."""

    def __init__(self, ref, name, args, floats):
        self.ref, self.fn, self.args, self.floats = ref, ref.ns[name], list(args), floats
        self.where = f"{name}{tuple(args)}"
        self.errors, self.checked, self.skipped = [], 0, 0
        self.values = {}        # what adjoint computed, by name (levels.py)

    def note(self, what, value):
        self.values[f"{self.where}: {what}"] = np.array(value, dtype=float)

    def outputs(self, args):
        """(the reference's return values as an array, its branch trace)."""
        self.ref.trace.clear()
        with np.errstate(all="ignore"):
            out = self.fn(*args)
        return np.array(out if isinstance(out, tuple) else (out,), dtype=float), list(self.ref.trace)

    def unit(self, k):
        return [1.0 if i == k else 0.0 for i in range(len(self.args))]

    def moved(self, v, h):
        return [a + h * v[k] if k in self.floats else a for k, a in enumerate(self.args)]

    def difference(self, fn, v, h):
        """The central difference of ``fn`` (returning (values, trace)) along ``v``, or
        None where a branch switched between its two points (counted skipped)."""
        (fp, tp), (fm, tm) = fn(self.moved(v, h)), fn(self.moved(v, -h))
        if tp != tm or not (np.all(np.isfinite(fp)) and np.all(np.isfinite(fm))):
            self.skipped += 1
            return None
        self.checked += 1
        return (fp - fm) / (2 * h)

    def expect(self, got, want, rtol, atol, what):
        if not (np.isfinite(got) and abs(got - want) <= rtol * abs(want) + atol):
            self.errors.append(f"{self.where}: {what}: {got!r}, expected {want!r}")


def check_funcs(prog, mod, backend):
    """An ``Outcome`` for every func of ``prog`` (imported as ``mod``) on ``backend``."""
    ref = Reference(prog)
    rng = random.Random(prog.seed + 7)
    points = []
    try:
        with ad.backend_scope(backend):
            for name in func_names(prog):
                f = getattr(mod, name)
                if any(a not in (float, int) for a in f.pyfunc.__annotations__.values()):
                    continue            # (vectors: a func called from Python takes numbers)
                params = f.transformed.pf.params
                kinds = list(f.return_kinds)
                if not kinds or any(k != "float" for k in kinds):
                    continue
                floats = [k for k, p in enumerate(params) if p.kind == "float"]
                args = [rng.uniform(-1.0, 1.0) if p.kind == "float" else rng.randint(0, 3)
                        for p in params]
                args, floats = _leave_out_defaults(f, args, floats, rng)
                pt = _Point(ref, name, args, floats)
                points.append(pt)
                values, _ = pt.outputs(args)
                if not np.all(np.isfinite(values)):
                    pt.skipped += 1
                    continue
                if len(kinds) == 1:
                    _first(f, pt, values[0])
                if f.custom_grad is not None and f.custom_jvp is None:
                    continue            # (forward mode is refused: documented)
                _forward(f, pt, values, rng)
                if len(kinds) == 1:
                    _second(f, pt)
    except Exception as exc:  # noqa: BLE001 - a refusal, or else a finding
        return failed(exc)
    errors = [e for pt in points for e in pt.errors]
    return Outcome("mismatch" if errors else "ok", "\n".join(errors), errors=errors,
                   checked=sum(pt.checked for pt in points),
                   skipped=sum(pt.skipped for pt in points),
                   values={k: v for pt in points for k, v in pt.values.items()})


def _leave_out_defaults(f, args, floats, rng):
    """``(args, floats)``, half the time without some of the trailing arguments that have
    defaults (programs drawn with extras), so the call from Python uses the defaults;
    at least one float argument is kept. A func without defaults draws nothing."""
    defaults = [p.default is not inspect.Parameter.empty
                for p in inspect.signature(f.pyfunc).parameters.values()]
    if not any(defaults) or rng.random() < 0.5:
        return args, floats
    first = defaults.index(True)
    keep = rng.randint(max(first, 1), len(args) - 1) if len(args) > 1 else len(args)
    kept = [k for k in floats if k < keep]
    return (args[:keep], kept) if kept else (args, floats)


def _first(f, pt, value):
    """``ad.value_and_grad`` over every float argument: the value, and each partial
    derivative against a central difference."""
    got, grads = ad.value_and_grad(f, argnums=tuple(pt.floats))(*pt.args)
    pt.note("ad.value_and_grad", [got, *grads])
    pt.expect(got, value, 1e-9, 1e-9, "ad.value_and_grad's value")
    for k, g in zip(pt.floats, grads):
        fd = pt.difference(pt.outputs, pt.unit(k), H)
        if fd is not None:
            pt.expect(g, fd[0], RTOL, ATOL * (1 + abs(value)),
                      f"ad.grad along argument {k} (against a finite difference)")


def _forward(f, pt, values, rng):
    """``ad.jvp`` along a random direction: values, and each output's tangent against a
    central difference."""
    v = [rng.uniform(-1.0, 1.0) if k in pt.floats else 0.0 for k in range(len(pt.args))]
    got, tangents = ad.jvp(f)(tuple(pt.args), tuple(v))
    pt.note("ad.jvp", [np.atleast_1d(got), np.atleast_1d(tangents)])
    got, tangents = np.atleast_1d(got), np.atleast_1d(tangents)
    for k, (g, w) in enumerate(zip(got, values)):
        pt.expect(g, w, 1e-9, 1e-9, f"ad.jvp's value {k}")
    fd = pt.difference(pt.outputs, v, H)
    if fd is not None:
        atol = ATOL * (1 + float(np.max(np.abs(values))))
        for k, (t, d) in enumerate(zip(tangents, fd)):
            pt.expect(t, d, RTOL, atol, f"ad.jvp's tangent {k} along {v} (against a finite "
                      "difference)")


def _second(f, pt):
    """``ad.hessian`` both ways: each column against a central difference of ``ad.grad``,
    the two modes against each other, and ``ad.grad(ad.grad(f))`` for one float."""
    nums = tuple(pt.floats)
    hess = {"rev-fwd": np.array(ad.hessian(f, argnums=nums, mode="rev-fwd")(*pt.args))}
    try:
        hess["fwd-rev"] = np.array(ad.hessian(f, argnums=nums, mode="fwd-rev")(*pt.args))
    except ad.AdjointError as exc:
        if "custom gradient" not in str(exc):
            raise           # (only a hand-written backward, f's or a callee's, is refused)
    for mode, h in sorted(hess.items()):
        pt.note(f"ad.hessian ({mode})", h)
    grad = ad.grad(f, argnums=nums)

    def gradient(args):
        return np.array(grad(*args), dtype=float), pt.outputs(args)[1]
    for c, j in enumerate(nums):
        col = pt.difference(gradient, pt.unit(j), H2)
        if col is None:
            continue
        atol = ATOL2 * (1 + float(np.max(np.abs(col))))
        for mode, h in sorted(hess.items()):
            for r in range(len(nums)):
                pt.expect(h[r][c], col[r], RTOL2, atol, f"ad.hessian ({mode}) [{r}][{c}] "
                          "(against a difference of ad.grad)")
    rf = hess["rev-fwd"]
    for r, c in np.ndindex(rf.shape):
        if "fwd-rev" in hess:
            pt.expect(hess["fwd-rev"][r, c], rf[r, c], 1e-9, 1e-9 * (1 + np.max(np.abs(rf))),
                      f"ad.hessian (fwd-rev) [{r}][{c}] against rev-fwd")
    if len(nums) == 1:
        gg = ad.grad(ad.grad(f, nums[0]), nums[0])(*pt.args)
        pt.note("ad.grad(ad.grad(f))", gg)
        pt.expect(gg, rf[0, 0], 1e-9, 1e-9 * (1 + abs(rf[0, 0])), "ad.grad(ad.grad(f))")
