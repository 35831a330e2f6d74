"""Hessian-vector products of a program's kernels: ``ad.autograd.hvp``, both ways.

A backend named ``<backend>-hvp`` (``python-hvp``, ``numba-hvp``) takes each launch of
the program's schedule, up to ``LAUNCHES`` of them, at the values its arguments hold
there (the reference's state before it), and checks ``ad.autograd.hvp`` of that one
launch -- the Hessian of ``sum(w * outputs)`` times a random direction ``v`` on its
float array inputs -- forward over reverse and reverse over forward, against a central
difference of the launch's gradient along ``v`` (the gradient from a tape's backward,
which the launch backends check against the reference). Each argument is a copy of its
own, so an array passed for two parameters is two inputs here, as ``hvp`` takes them.

Forward over reverse differentiates the kernel's backward, which adjoint refuses where
it calls a func's hand-written gradient (documented); there only reverse over forward
(through the func's hand-written JVP) is checked. The difference is skipped where a
branch switched between its two points (the
reference's branch traces of the launch differ), as in check.py.
"""
import numpy as np

import adjoint as ad

from .check import Outcome, _array, failed, first_off
from .program import program_data
from .reference import Reference

SUFFIX = "-hvp"
LAUNCHES = 2
H = 1e-5
RTOL, ATOL = 1e-5, 1e-7


def split(backend):
    """``base backend`` of ``python-hvp``, or None for another backend."""
    return backend[:-len(SUFFIX)] if backend.endswith(SUFFIX) else None


def states(prog, data):
    """``(step, arrays before it)`` for each launch of the schedule, from the reference."""
    ref = Reference(prog)
    arrays = {n: v.copy() for n, v in data.items()}
    for s in prog.steps:
        if s.op == "launch":
            yield s, {n: v.copy() for n, v in arrays.items()}
            with np.errstate(all="ignore"):
                ref.launch(s.kernel, [ref.view(a, arrays[a]) if isinstance(a, str) else a
                                      for a in s.args])
        elif s.op == "clone":
            arrays[s.dest] = arrays[s.src].copy()
        else:
            np.copyto(arrays[s.dest], arrays[s.src])


def check_hvp(prog, mod, backend):
    """An ``Outcome`` for the first ``LAUNCHES`` launches of ``prog`` on ``backend``."""
    data, _ = program_data(prog)
    rng = np.random.default_rng(prog.seed + 11)
    errors, checked, skipped, values = [], 0, 0, {}
    try:
        with ad.backend_scope(backend):
            for n, (step, arrays) in enumerate(states(prog, data)):
                if n == LAUNCHES:
                    break
                found = _check_launch(prog, mod, step, arrays, rng, values, f"launch {n} ")
                if found is None:
                    skipped += 1
                    continue
                checked += 1
                errors += [f"launch {n} of {step.kernel}: {e}" for e in found]
    except Exception as exc:  # noqa: BLE001 - a refusal, or else a finding
        return failed(exc)
    return Outcome("mismatch" if errors else "ok", "\n".join(errors), skipped=skipped,
                   checked=checked, errors=errors, values=values)


class _Launch:
    """One launch of a kernel on copies of its arguments."""

    def __init__(self, prog, mod, step, arrays):
        self.prog, self.kdef = prog, prog.kernel(step.kernel)
        self.kernel = getattr(mod, step.kernel)
        self.names = step.args
        self.args = [arrays[a].copy() if isinstance(a, str) else a for a in step.args]
        self.outs = [k for k, p in enumerate(self.kdef.params) if p.is_output]
        self.ins = [k for k, p in enumerate(self.kdef.params) if not p.is_output]
        self.diff = [k for k in self.ins if isinstance(self.args[k], np.ndarray) and
                     self.args[k].dtype.kind == "f"]

    def split(self, args):
        return [args[k] for k in self.ins], [args[k] for k in self.outs]

    def moved(self, v, h):
        return [a + h * v[k] if k in v else (a.copy() if isinstance(a, np.ndarray) else a)
                for k, a in enumerate(self.args)]

    def gradient(self, args, w):
        """The gradient of ``sum(w * outputs)`` with respect to the float inputs, by a
        tape's backward; and the reference's branch trace of the launch at ``args``."""
        arrays = [_array(self.prog, self.names[k], a, "cpu", k in self.diff or k in self.outs)
                  if isinstance(a, np.ndarray) else a for k, a in enumerate(args)]
        ins, outs = self.split(arrays)
        tape = ad.Tape()
        with tape:
            ad.launch(self.kernel, self.prog.dim, inputs=ins, outputs=outs)
        tape.backward(grads={arrays[k]: w[k] for k in self.outs if k in w})
        ref = Reference(self.prog)
        with np.errstate(all="ignore"):
            ref.launch(self.kdef.name, [ref.view(n, a.copy()) if isinstance(a, np.ndarray)
                                        else a for n, a in zip(self.names, args)])
        return {k: arrays[k].grad.numpy().copy() for k in self.diff}, list(ref.trace)


def _check_launch(prog, mod, step, arrays, rng, values, label):
    """Errors of ``hvp`` on one launch, or None when the difference is unreliable; what it
    computed goes into ``values`` (names starting with ``label``), the gradients at the
    two points included."""
    ln = _Launch(prog, mod, step, arrays)
    if not ln.diff:
        return []
    v = {k: rng.uniform(-1.0, 1.0, ln.args[k].shape) for k in ln.diff}
    w = {k: rng.uniform(0.5, 1.5, ln.args[k].shape) for k in ln.outs
         if ln.args[k].dtype.kind == "f"}
    (gp, tp), (gm, tm) = ln.gradient(ln.moved(v, H), w), ln.gradient(ln.moved(v, -H), w)
    for sign, g in (("+", gp), ("-", gm)):
        for k, x in g.items():
            values[f"{label}gradient of {ln.kdef.params[k].name} at x {sign} h v"] = x
    if tp != tm or not all(np.all(np.isfinite(g[k])) for g in (gp, gm) for k in ln.diff):
        return None
    want = {k: (gp[k] - gm[k]) / (2 * H) for k in ln.diff}
    scale = 1.0 + max(float(np.max(np.abs(x))) for x in want.values())
    ins, outs = ln.split(ln.args)
    vs = [v.get(k) for k in ln.ins]
    ws = [w.get(k) for k in ln.outs]
    errors = []
    for mode in ("fwd-rev", "rev-fwd"):
        try:
            got = ad.autograd.hvp(ln.kernel, prog.dim, [a.copy() if isinstance(a, np.ndarray)
                                                        else a for a in ins],
                                  [a.copy() for a in outs], vs, ws, mode=mode)
        except ad.AdjointError as exc:
            if mode == "fwd-rev" and "custom gradient" in str(exc):
                continue    # (a hand-written backward is not differentiated again: documented)
            raise
        for j, k in enumerate(ln.ins):
            if k not in want:
                continue
            values[f"{label}hvp ({mode}) of {ln.kdef.params[k].name}"] = np.asarray(got[j])
            bad = ~np.isclose(got[j], want[k], rtol=RTOL, atol=ATOL * scale)
            if bad.any():
                e = first_off(bad)
                errors.append(f"hvp ({mode}) of parameter {ln.kdef.params[k].name}{list(e)}: "
                              f"{got[j][e]!r}, difference of the gradient {want[k][e]!r} "
                              f"({int(bad.sum())} elements differ)")
    return errors
