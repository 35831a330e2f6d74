"""Where the periodic stencil's captured round goes, part by part (issue 39's 128x128 case).

    python -m benchmarks.stencil_parts [--n 128] [--steps 50] [--repeat 30]

The ``stencil-user`` workload (benchmarks/workloads/periodic.py and user.py: ``steps``
launches of ``heat_periodic`` on a tape and one of ``field_sum``) captured with
``tape.capture()``, against the hand-written parallel numba pair. Reported, each the
median over ``--repeat`` timed runs after three warm-ups, in milliseconds:

- the capture's forward, and its forward and backward without the zeroing of the
  gradients, and the pair's forward and forward+backward (the pair's backward is its
  step again: the periodic stencil is its own transpose);
- per call, in microseconds: each backward variant of ``heat_periodic`` the tape can
  run (``backward``; ``_clean``: it stores into gradients known to be zero; ``_norest``:
  without the pass that only clears ``out``'s gradient, whose zero the tape then owes,
  runtime/owed.py), its forward, and the pair's step, on arrays of the workload's size.

Each part is timed in this one process, back to back, so that the machine's slow
phases slow them alike; the numbers are for comparing the parts, not for the tables.
"""
import argparse
import statistics

import numpy as np

from adjoint.runtime.capture_code import resolve
from adjoint.runtime.bounds import STATUS_SIZE
from benchmarks.harness import timed
from benchmarks.workloads import periodic, stencil, user

BACKWARDS = ("backward", "backward_clean", "backward_norest", "backward_norest_clean")


def _median(fn, repeat, inner=1):
    for _ in range(3):
        fn()
    def many():
        for _ in range(inner):
            fn()
    return statistics.median(timed(many) / inner for _ in range(repeat))


def rounds(n, steps, repeat):
    """{part: ms} of the captured user form and the pair, whole rounds."""
    p = stencil.make(np.random.default_rng(0), n, steps)
    cap, pair = user.Captured(user.StencilUser, p), periodic.NumbaParallel(p)
    seed = np.ones(1, np.float32)
    pair_seed = {"u": np.ones((n, n), np.float32)}

    def captured():
        cap.forward()
        cap.capture.backward(grads={cap.loss: seed})
    return {"captured forward": _median(cap.forward, repeat) * 1e3,
            "captured forward+backward": _median(captured, repeat) * 1e3,
            "pair forward": _median(pair.forward, repeat) * 1e3,
            "pair forward+backward": _median(lambda: pair.fwd_bwd(pair_seed), repeat) * 1e3}


def calls(n, repeat, inner=50):
    """{part: µs} of one call of each of heat_periodic's compiled parts, and the pair's
    (each timed run makes ``inner`` calls)."""
    spec = periodic.heat_periodic.spec_for("cpu")
    rng = np.random.default_rng(1)
    u, adj_out = (rng.uniform(0, 1, (n, n)).astype(np.float32) for _ in range(2))
    out, adj_u = np.zeros_like(u), np.zeros_like(u)
    alpha = np.float32(periodic.ALPHA)
    out_us = {}
    for part in ("forward",) + BACKWARDS:
        fn, _, status = resolve(getattr(spec, part), (n, n), [alpha, u])
        args = [n, n, alpha, u, out] + ([adj_u, adj_out] if part != "forward" else [])
        if part != "forward" and spec.handed_arrays:
            args.append(True)
        if status:
            args.append(np.zeros(STATUS_SIZE, np.int64))
        out_us[part] = _median(lambda: fn(*args), repeat, inner) * 1e6
    out_us["pair step"] = _median(lambda: periodic._step_par(alpha, u, out), repeat,
                                  inner) * 1e6
    return out_us


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args(argv)
    for name, ms in rounds(args.n, args.steps, args.repeat).items():
        print(f"{name:28s} {ms:8.3f} ms")
    for name, us in calls(args.n, args.repeat).items():
        print(f"{'call: ' + name:28s} {us:8.2f} us")


if __name__ == "__main__":
    main()
