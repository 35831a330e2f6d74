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
A difference is skipped where a branch switched between its two points (the
reference's branch traces differ), as in check.py. A func with a hand-written
``@ad.func_grad`` has the exact ``@ad.func_jvp`` too (gen_func.py), so forward mode
and second derivatives are checked through its rules as well.
"""
import random
import re

import numpy as np

import adjoint as ad

from .check import LOCATED, Outcome, _tail
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
    """One func at one point: the reference's value and branch trace around it."""

    def __init__(self, ref, name, args, floats):
        self.ref, self.fn, self.args, self.floats = ref, ref.ns[name], list(args), floats

    def at(self, args):
        self.ref.trace.clear()
        with np.errstate(all="ignore"):
            return float(self.fn(*args)), list(self.ref.trace)

    def outputs(self, args):
        """(the reference's return values as an array, its trace)."""
        self.ref.trace.clear()
        with np.errstate(all="ignore"):
            out = self.fn(*args)
        return np.array(out if isinstance(out, tuple) else (out,), dtype=float), list(self.ref.trace)

    def moved(self, v, h):
        return [a + h * v[k] if k in self.floats else a for k, a in enumerate(self.args)]

    def difference(self, fn, v, h):
        """``(central difference of fn along v, reliable)``; fn returns (value, trace)."""
        (fp, tp), (fm, tm) = fn(self.moved(v, h)), fn(self.moved(v, -h))
        ok = tp == tm and np.all(np.isfinite(fp)) and np.all(np.isfinite(fm))
        return (fp - fm) / (2 * h), ok


def check_funcs(prog, mod, backend):
    """An ``Outcome`` for every func of ``prog`` (imported as ``mod``) on ``backend``."""
    ref = Reference(prog)
    rng = random.Random(prog.seed + 7)
    errors, checked, skipped = [], 0, 0
    try:
        with ad.backend_scope(backend):
            for name in func_names(prog):
                f = getattr(mod, name)
                params = f.transformed.pf.params
                kinds = list(f.return_kinds)
                if not kinds or any(k != "float" for k in kinds):
                    continue
                floats = [k for k, p in enumerate(params) if p.kind == "float"]
                args = [rng.uniform(-1.0, 1.0) if p.kind == "float" else rng.randint(0, 3)
                        for p in params]
                pt = _Point(ref, name, args, floats)
                check = _check_one if len(kinds) == 1 else _check_several
                e, c, s = check(f, name, pt, rng)
                errors += e
                checked += c
                skipped += s
    except ad.AdjointError as exc:
        msg = str(exc)
        return Outcome("refusal", f"{type(exc).__name__}: {msg}", bool(LOCATED.search(msg)))
    except Exception as exc:  # noqa: BLE001 - every other exception is a finding
        return Outcome("internal", f"{type(exc).__name__}: {exc}\n{_tail(exc)}")
    return Outcome("mismatch" if errors else "ok", "\n".join(errors), skipped=skipped,
                   checked=checked, errors=errors)


def _close(got, want, rtol, atol):
    return np.isfinite(got) and abs(got - want) <= rtol * abs(want) + atol


def _check_one(f, name, pt, rng):
    """(errors, checked, skipped) for func ``name`` at ``pt``."""
    errors, checked, skipped = [], 0, 0
    where = f"{name}{tuple(pt.args)}"
    value, _ = pt.at(pt.args)
    if not np.isfinite(value):
        return [], 0, 1
    n = len(pt.args)
    unit = [[1.0 if i == k else 0.0 for i in range(n)] for k in range(n)]
    # first derivatives
    got_value, grads = ad.value_and_grad(f, argnums=tuple(pt.floats))(*pt.args)
    if not _close(got_value, value, 1e-9, 1e-9):
        errors.append(f"{where}: value {got_value!r}, reference {value!r}")
    for k, g in zip(pt.floats, grads):
        fd, ok = pt.difference(pt.at, unit[k], H)
        if not ok:
            skipped += 1
            continue
        checked += 1
        if not _close(g, fd, RTOL, ATOL * (1 + abs(value))):
            errors.append(f"{where}: ad.grad along argument {k}: {g!r}, finite difference {fd!r}")
    if f.custom_grad is not None and f.custom_jvp is None:
        return errors, checked, skipped         # (forward mode refused: documented)
    # forward mode
    v = [rng.uniform(-1.0, 1.0) if k in pt.floats else 0.0 for k in range(n)]
    jv, jt = ad.jvp(f)(tuple(pt.args), tuple(v))
    fd, ok = pt.difference(pt.at, v, H)
    if not _close(jv, value, 1e-9, 1e-9):
        errors.append(f"{where}: ad.jvp value {jv!r}, reference {value!r}")
    if ok:
        checked += 1
        if not _close(jt, fd, RTOL, ATOL * (1 + abs(value))):
            errors.append(f"{where}: ad.jvp along {v}: {jt!r}, finite difference {fd!r}")
    else:
        skipped += 1
    # second derivatives: columns against differences of ad.grad
    nums = tuple(pt.floats)
    hess = {"rev-fwd": ad.hessian(f, argnums=nums, mode="rev-fwd")(*pt.args)}
    try:
        hess["fwd-rev"] = ad.hessian(f, argnums=nums, mode="fwd-rev")(*pt.args)
    except ad.AdjointError as exc:
        if "custom gradient" not in str(exc):
            raise           # (only a hand-written backward, f's or a callee's, is refused)
    modes = sorted(hess)
    grad = ad.grad(f, argnums=nums)

    def gradient(args):
        ref_trace = pt.at(args)[1]
        return np.array(grad(*args), dtype=float), ref_trace
    for c, j in enumerate(nums):
        (gp, tp), (gm, tm) = gradient(pt.moved(unit[j], H2)), gradient(pt.moved(unit[j], -H2))
        if tp != tm or not (np.all(np.isfinite(gp)) and np.all(np.isfinite(gm))):
            skipped += 1
            continue
        col = (gp - gm) / (2 * H2)
        checked += 1
        for mode, h in hess.items():
            got = [h[r][c] for r in range(len(nums))]
            scale = ATOL2 * (1 + float(np.max(np.abs(col))))
            if not all(_close(x, y, RTOL2, scale) for x, y in zip(got, col)):
                errors.append(f"{where}: ad.hessian ({mode}) column {j}: {got}, "
                              f"difference of ad.grad {list(col)}")
    a, b = (np.array(hess[m], dtype=float) for m in (modes[0], "rev-fwd"))   # (fwd-rev first)
    if not np.allclose(a, b, rtol=1e-9, atol=1e-9 * (1 + np.max(np.abs(a)))):
        errors.append(f"{where}: ad.hessian fwd-rev {a.tolist()} and rev-fwd {b.tolist()} differ")
    if len(nums) == 1:
        gg = ad.grad(ad.grad(f, nums[0]), nums[0])(*pt.args)
        if not _close(gg, float(a[0][0]), 1e-9, 1e-9 * (1 + abs(float(a[0][0])))):
            errors.append(f"{where}: ad.grad(ad.grad(f)) {gg!r}, ad.hessian {a[0][0]!r}")
    return errors, checked, skipped


def _check_several(f, name, pt, rng):
    """(errors, checked, skipped) for func ``name`` returning several floats: its JVP
    (``ad.grad`` and the Hessian take one output) against a central difference."""
    if f.custom_grad is not None and f.custom_jvp is None:
        return [], 0, 0
    where = f"{name}{tuple(pt.args)}"
    values, _ = pt.outputs(pt.args)
    v = [rng.uniform(-1.0, 1.0) if k in pt.floats else 0.0 for k in range(len(pt.args))]
    got, tangents = ad.jvp(f)(tuple(pt.args), tuple(v))
    fd, ok = pt.difference(pt.outputs, v, H)
    errors = [f"{where}: ad.jvp value {k} {g!r}, reference {w!r}"
              for k, (g, w) in enumerate(zip(got, values)) if not _close(g, w, 1e-9, 1e-9)]
    if not ok:
        return errors, 0, 1
    scale = ATOL * (1 + float(np.max(np.abs(values))))
    errors += [f"{where}: ad.jvp output {k} along {v}: {t!r}, finite difference {d!r}"
               for k, (t, d) in enumerate(zip(tangents, fd)) if not _close(t, d, RTOL, scale)]
    return errors, 1, 0

