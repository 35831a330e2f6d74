"""A 16-column Jacobian in one vector-mode sweep against 16 separate JVP sweeps (issue 40).

    python -m benchmarks.vector_mode [--size 1000] [--k 16] [--wrt mass|pos] [--repeat 5]

The workload is n-body's energy kernel (benchmarks/workloads/nbody.py, float32, every
output reads every input): ``k`` columns of the Jacobian of the energies, ``d out /
d mass[j]`` for ``j < k`` (``--wrt mass``: one-hot tangents) or ``k`` directional
derivatives along random directions of all positions (``--wrt pos``). ``separate``:
``k`` launches ``ad.launch(..., tangents={name: T[j]})``, each computing the primal
again; ``vector``: one ``adjoint.vector_mode.jvp_launch`` with ``T`` of shape ``(k, ...)``,
the primal once.
Both are compiled first (numba backend, CPU); times are the fastest of ``--repeat``
runs, and the two results are checked to be equal bit for bit before timing.
"""
import argparse
import json
import os
import time

import numpy as np

import adjoint as ad
from adjoint.vector_mode import jvp_launch
from benchmarks.workloads.nbody import nbody_energy


def _best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(size, k, repeat, wrt="mass"):
    rng = np.random.default_rng(0)
    mass = ad.array(rng.uniform(0.5, 1.5, size).astype(np.float32))
    pos = ad.array(rng.normal(size=(size, 3)).astype(np.float32))
    if wrt == "pos":
        directions = rng.normal(size=(k, size, 3)).astype(np.float32)
    else:
        directions = np.eye(k, size, dtype=np.float32)     # columns 0 .. k-1
    rows = [ad.array(d) for d in directions]
    args = [size, np.float32(0.01), mass, pos]

    def separate():
        return [ad.launch(nbody_energy, size, args, [ad.zeros(size, dtype=ad.float32)],
                          tangents={wrt: r}, record_tape=False)["out"] for r in rows]
    block = ad.array(directions)

    def vector():
        return jvp_launch(nbody_energy, size, args, [ad.zeros(size, dtype=ad.float32)],
                          tangents={wrt: block})["out"]
    one, many = separate(), vector()       # (compiles both)
    same = all(np.array_equal(o.numpy(), many.numpy()[j]) for j, o in enumerate(one))
    if not same:
        raise SystemExit("vector mode differs from the separate sweeps")
    t_sep, t_vec = _best(separate, repeat), _best(vector, repeat)
    return {"workload": "nbody_energy", "wrt": wrt, "size": size, "k": k, "separate_s": t_sep,
            "vector_s": t_vec, "speedup": t_sep / t_vec, "bitwise_equal": same,
            "cpus": os.cpu_count(), "load": os.getloadavg()[0]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--wrt", choices=("mass", "pos"), default="mass")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    with ad.backend_scope("numba"):
        r = measure(a.size, a.k, a.repeat, a.wrt)
    print(f"{r['workload']} d out/d {r['wrt']}, n={r['size']}: {r['k']} separate JVP sweeps {r['separate_s'] * 1e3:.1f} ms, "
          f"one vector sweep of k={r['k']} {r['vector_s'] * 1e3:.1f} ms: {r['speedup']:.2f}x "
          f"(bit for bit equal: {r['bitwise_equal']}; load average {r['load']:.1f} "
          f"on {r['cpus']} CPUs)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(r, fh, indent=1)


if __name__ == "__main__":
    main()
