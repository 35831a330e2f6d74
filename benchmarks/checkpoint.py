"""Memory and time of a long simulation's gradient: plain tape against ``ad.simulate``.

    python -m benchmarks.checkpoint [--steps 10000] [--size 2000] [--checkpoints auto]
    python -m benchmarks.checkpoint --capture ...   (also ad.simulate(..., capture=True))
    python -m benchmarks.checkpoint --mode plain|simulate|captured ...   (one run, one JSON line)

Each mode runs in its own process, so that its peak RSS (``ru_maxrss``) is its own:
the loop is ``state_{t+1} = step(state_t)`` on ``--size`` damped oscillators (two
float64 arrays), one launch a step, recorded either step by step on a plain tape
(ping-pong buffers: copy-on-write keeps the state each step overwrote) or as one
``ad.simulate`` step. Reported: what the tape holds (``memory_report()``), the
peak RSS above the baseline before recording, forward and backward seconds, the
forward steps the checkpointed backward ran, and whether the two gradients are
bitwise equal. The first run of each mode compiles; times are the fastest of
``--repeat`` runs (peak RSS is the first run's: memory is given back between runs
but the peak stays). ``--capture`` adds a third mode, ``ad.simulate(..., capture=True)``
(its backward replays each step by a capture: one compiled call instead of a launch's
Python), and reports its backward's time against the uncaptured one's.
"""
import argparse
import json
import math
import resource
import subprocess
import sys
import time

import numpy as np

import adjoint as ad


@ad.kernel
def oscillate(x: ad.array(dtype=float), v: ad.array(dtype=float), w: ad.array(dtype=float),
              dt: float, x2: ad.array(dtype=float), v2: ad.array(dtype=float)):
    i = ad.tid()
    v2[i] = 0.9999 * (v[i] - dt * w[i] * math.sin(x[i]))
    x2[i] = x[i] + dt * v2[i]


@ad.kernel
def energy(x: ad.array(dtype=float), total: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(total, 0, x[i] * x[i])


def _rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run(mode, steps, size, checkpoints):
    """One gradient; returns the measurements as a dict (and the gradient)."""
    x = ad.array(np.linspace(-1.0, 1.0, size), requires_grad=True)
    v = ad.zeros(size, requires_grad=True)
    w = ad.array(np.linspace(1.0, 4.0, size), requires_grad=True)
    total = ad.zeros(1, requires_grad=True)

    def step(src, dst, t):
        ad.launch(oscillate, size, inputs=[src[0], src[1], w, 0.01], outputs=[dst[0], dst[1]])
    base = _rss_bytes()
    t0 = time.perf_counter()
    with ad.Tape() as tape:
        if mode == "plain":
            a = (ad.zeros(size, requires_grad=True), ad.zeros(size, requires_grad=True))
            b = (ad.zeros(size, requires_grad=True), ad.zeros(size, requires_grad=True))
            cur = (x, v)
            for t in range(steps):
                nxt = b if cur is a else a
                step(cur, nxt, t)
                cur = nxt
            final = cur[0]
        else:
            final = ad.simulate(step, (x, v), steps, checkpoints=checkpoints,
                                capture=mode == "captured")[0]
        ad.launch(energy, size, inputs=[final], outputs=[total])
    t1 = time.perf_counter()
    report = tape.memory_report()
    tape.backward(loss=total)
    t2 = time.perf_counter()
    out = {"mode": mode, "steps": steps, "size": size, "tape_bytes": report["total_bytes"],
           "peak_rss_above_baseline": _rss_bytes() - base, "forward_s": t1 - t0,
           "backward_s": t2 - t1, "state_bytes": 2 * 8 * size}
    if mode != "plain":
        sim = tape.steps[0]
        out.update(checkpoints=len(sim.loop.slots),
                   forward_steps=sim.loop.forward_steps, recomputed_steps=sim.recomputed,
                   replayed_steps=sim.replayed)
    return out, [x.grad.numpy().copy(), w.grad.numpy().copy()]


def child(args):
    run(args.mode, min(args.steps, 50), args.size, args.checkpoints)    # compile
    result, grads = run(args.mode, args.steps, args.size, args.checkpoints)
    for _ in range(args.repeat - 1):        # the fastest of several (a shared machine)
        again, _ = run(args.mode, args.steps, args.size, args.checkpoints)
        for key in ("forward_s", "backward_s"):
            result[key] = min(result[key], again[key])
    np.save(args.grads, np.concatenate(grads))
    print(json.dumps(result))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--checkpoints", default="auto")
    p.add_argument("--repeat", type=int, default=3, help="timed runs (the fastest counts)")
    p.add_argument("--mode", choices=["plain", "simulate", "captured"])
    p.add_argument("--capture", action="store_true",
                   help="also run ad.simulate(..., capture=True)")
    p.add_argument("--grads", default="/tmp/adjoint-checkpoint-grads")
    args = p.parse_args(argv)
    if args.checkpoints != "auto":
        args.checkpoints = int(args.checkpoints)
    if args.mode:
        return child(args)
    results = {}
    for mode in ("plain", "simulate") + (("captured",) if args.capture else ()):
        cmd = [sys.executable, "-m", "benchmarks.checkpoint", "--mode", mode,
               "--steps", str(args.steps), "--size", str(args.size),
               "--checkpoints", str(args.checkpoints), "--repeat", str(args.repeat),
               "--grads", f"{args.grads}-{mode}.npy"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if proc.returncode:
            sys.exit(proc.stderr)
        results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(results[mode]))
    plain, ckpt = results["plain"], results["simulate"]
    same = np.array_equal(np.load(f"{args.grads}-plain.npy"),
                          np.load(f"{args.grads}-simulate.npy"))
    k = ckpt["checkpoints"]
    print(f"\n{args.steps} steps of {args.size} oscillators ({plain['state_bytes']} bytes a "
          f"state), {k} checkpoints (sqrt(n) = {math.isqrt(args.steps)}):")
    share = 100 * ckpt['tape_bytes'] / plain['tape_bytes']
    print(f"  tape memory: plain {plain['tape_bytes'] / 2**20:.1f} MiB, checkpointed "
          f"{ckpt['tape_bytes'] / 2**20:.2f} MiB ({share:.2f}%)")
    rss_p, rss_c = plain["peak_rss_above_baseline"], ckpt["peak_rss_above_baseline"]
    print(f"  peak RSS above baseline: plain {rss_p / 2**20:.1f} MiB, checkpointed "
          f"{rss_c / 2**20:.1f} MiB ({100 * rss_c / max(rss_p, 1):.2f}%)")
    print(f"  backward: plain {plain['backward_s']:.2f} s, checkpointed {ckpt['backward_s']:.2f} s "
          f"({ckpt['backward_s'] / plain['backward_s']:.2f}x); the checkpointed backward ran "
          f"{ckpt['forward_steps'] - args.steps} untaped and {ckpt['recomputed_steps']} taped "
          "forward steps")
    print(f"  forward: plain {plain['forward_s']:.2f} s, checkpointed {ckpt['forward_s']:.2f} s")
    print(f"  gradients bitwise equal: {same}")
    if args.capture:
        cap = results["captured"]
        same = np.array_equal(np.load(f"{args.grads}-simulate.npy"),
                              np.load(f"{args.grads}-captured.npy"))
        print(f"  captured (capture=True): backward {cap['backward_s']:.2f} s "
              f"({cap['backward_s'] / ckpt['backward_s']:.2f}x the uncaptured), forward "
              f"{cap['forward_s']:.2f} s; {cap['replayed_steps']} steps replayed by a capture; "
              f"gradient bitwise the uncaptured's: {same}")


if __name__ == "__main__":
    main()
