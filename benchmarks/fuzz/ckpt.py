"""Checkpointed segments: a program's launches with a run of them under ``ad.checkpoint``.

A backend named ``<backend>-ckpt`` (``python-ckpt``, ``race-ckpt``, ``numba-ckpt``,
``cuda-ckpt``) records the program's schedule on a tape as the launch backends do
(check.record), except that one contiguous run of its steps -- from a launch to a
launch, chosen from the seed (``segment``), possibly every launch -- runs inside a
function decorated with ``ad.checkpoint``: the tape gets one step for it, and the
backward recomputes it. The run is checked twice:

- against the reference, as a launch backend is (check.compare: forward values, the
  arrays the backward must leave as they were, the gradients against the central
  differences; the JVPs are not, forward mode does not go through a tape);
- against the same backend's plain tape on the same data: forward values and
  gradients bit for bit (ad.checkpoint promises the plain tape's gradient when the
  segment is deterministic). The python backend (``race`` too) and numba are
  deterministic (numba's parallel plans add privatized copies chunk by chunk in a
  fixed order, docs/backends.md); CUDA adds with ``cuda.atomic.add`` in whatever
  order threads arrive, so there the two need only agree to ``RTOL``.

A segment's function changes no Python state (it runs twice): it works on a copy of
the table of arrays, and returns the arrays its clones made, which ``ad.checkpoint``
matches with those of the recomputation (check._checkpointed).
"""
import random

import numpy as np

from .check import TOL64, backend_context, compare, failed, first_off, observed, taped

SUFFIX = "-ckpt"
BASES = ("python", "race", "numba", "cuda")
RTOL = 1e-10        # cuda only: atomics add in any order


def split(backend):
    """``base backend`` of ``python-ckpt``, or None for another backend."""
    return backend[:-len(SUFFIX)] if backend.endswith(SUFFIX) else None


def segment(prog):
    """``(start, stop)``: steps ``start .. stop - 1`` of the schedule run as one
    checkpointed segment: ``prog.segment`` where set (the minimizer pins it), else drawn
    from the seed: a first launch, a number of launches (at least 1, at most all that
    follow), and at each end some of the clones and copies between the segment's launch
    and the launch beyond it."""
    if prog.segment is not None:
        return prog.segment
    launches = [k for k, s in enumerate(prog.steps) if s.op == "launch"]
    if not launches:
        return 0, 0
    rng = random.Random(f"ckpt {prog.seed}")
    first = rng.randrange(len(launches))
    last = first + rng.randrange(len(launches) - first)
    before = launches[first - 1] + 1 if first else 0
    after = launches[last + 1] if last + 1 < len(launches) else len(prog.steps)
    return rng.randint(before, launches[first]), rng.randint(launches[last] + 1, after)


def describe(prog, start, stop):
    """The segment ``(start, stop)`` in words, steps and launches counted from 1."""
    launches = [k for k, s in enumerate(prog.steps) if s.op == "launch"]
    inside = [n for n, k in enumerate(launches) if start <= k < stop]
    which = f"launches {inside[0] + 1}-{inside[-1] + 1}" if inside else "no launch"
    return (f"checkpointed segment: steps {start + 1}-{stop} of the schedule's "
            f"{len(prog.steps)} ({which} of {len(launches)})")


def check_ckpt(prog, mod, ref, backend, steps=None):
    """An ``Outcome`` for ``prog`` on ``backend`` (python, race, numba, cuda) with the
    steps ``steps`` (``(start, stop)``; by default ``segment(prog)``) checkpointed."""
    device = "cuda" if backend == "cuda" else "cpu"
    start, stop = steps or segment(prog)
    try:
        with backend_context(backend):
            got = taped(prog, mod, ref.data, ref.weights, device, (start, stop))
            plain = taped(prog, mod, ref.data, ref.weights, device)
    except Exception as exc:  # noqa: BLE001 - a refusal, or else a finding
        out = failed(exc)
    else:
        out = compare(ref, *got, None, TOL64)
        out.values = observed(*got)
        off = differences(plain, got, exact=backend != "cuda")
        if off:
            out.status, out.errors = "mismatch", off + out.errors
            out.detail = "\n".join(out.errors)
    if out.status != "ok":
        out.detail = "\n".join(d for d in (out.detail, describe(prog, start, stop)) if d)
    return out


def differences(plain, got, exact=True):
    """What differs between the plain tape's ``(forward, after, grads)`` and the
    checkpointed one's: forward values and gradients, bit for bit (``exact``) or to
    ``RTOL``."""
    errors = []
    for what, want, have in (("forward value", plain[0], got[0]), ("gradient", plain[2], got[2])):
        for n, x in want.items():
            y = have[n]
            bad = ~_same(x, y, exact)
            if bad.any():
                e = first_off(bad)
                errors.append(f"checkpointed {what} of {n}{list(e)}: {y[e]!r}, plain tape "
                              f"{x[e]!r} ({int(bad.sum())} elements differ"
                              f"{', bit for bit' if exact else ''})")
    return errors


def _same(x, y, exact):
    """Elementwise: ``x`` and ``y`` equal bit for bit (``exact``), else within ``RTOL``."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return np.zeros(x.shape, bool)
    if exact and x.dtype.kind == "f":
        u = f"u{x.dtype.itemsize}"
        return x.view(u) == y.view(u)
    if exact:
        return x == y
    return np.isclose(y, x, rtol=RTOL, atol=RTOL * (1.0 + float(np.max(np.abs(x), initial=0.0))),
                      equal_nan=True)
