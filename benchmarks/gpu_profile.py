"""Where a GPU forward and backward spend their time: launches, copies and waits per round.

    python benchmarks/gpu_profile.py [--size full|quick|tiny] [--workloads a,b]

For each workload, adjoint's system and the hand-written ``numba.cuda`` pair run their
forward and their forward + backward (``run.py --device cuda``'s systems, on the GPU)
after warming up; one round of each is counted: the GPU kernels launched (by name),
host-to-device and device-to-host copies, explicit synchronizations, and the time the
host spends issuing the round (the launches return before the GPU is done) beside the
time until the GPU is done. What adjoint does beyond the pair, in launches and waits,
names the cause of a row of docs/benchmarks.md's GPU table above the pair.
Counts are read by wrapping numba-cuda's launch, copy and synchronize entry points.
"""
import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


class Counter:
    """Counts of what numba-cuda is asked to do while ``on``."""

    def __init__(self):
        self.on = False
        self.launches = collections.Counter()
        self.h2d = self.d2h = self.syncs = 0

    def reset(self):
        self.launches.clear()
        self.h2d = self.d2h = self.syncs = 0


def install(counter):
    import numba
    from numba import cuda
    if numba.config.ENABLE_CUDASIM:     # (a trial of this script: the simulator's classes)
        from numba.cuda.simulator import kernel as config_module
        from numba.cuda.simulator.cudadrv import devicearray
        config, name_of = config_module.FakeCUDAKernel, lambda k: k.fn
    else:
        from numba.cuda import dispatcher as config_module
        from numba.cuda.cudadrv import devicearray
        config = config_module._LaunchConfiguration
        name_of = lambda c: getattr(c.dispatcher, "py_func", None)   # noqa: E731
    call = config.__call__

    def counted_call(self, *args):
        if counter.on and not getattr(self, "_device", False):
            counter.launches[getattr(name_of(self), "__name__", "?")] += 1
        return call(self, *args)
    config.__call__ = counted_call

    array_class = getattr(devicearray, "DeviceNDArray", None) or devicearray.FakeCUDAArray
    copy_to_host = array_class.copy_to_host

    def counted_d2h(self, *args, **kwargs):
        if counter.on:
            counter.d2h += 1
        return copy_to_host(self, *args, **kwargs)
    array_class.copy_to_host = counted_d2h

    to_device, synchronize = cuda.to_device, cuda.synchronize

    def counted_h2d(*args, **kwargs):
        if counter.on:
            counter.h2d += 1
        return to_device(*args, **kwargs)

    def counted_sync(*args, **kwargs):
        if counter.on:
            counter.syncs += 1
        return synchronize(*args, **kwargs)
    cuda.to_device, cuda.synchronize = counted_h2d, counted_sync
    return synchronize


def profile(counter, sync, fn, rounds=5):
    """(counts of one round, host ms, wall ms) of ``fn()``: medians of ``rounds``."""
    fn()
    sync()
    counter.reset()
    counter.on = True
    fn()
    counter.on = False
    counts = (dict(counter.launches), counter.h2d, counter.d2h, counter.syncs)
    sync()
    host, wall = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e3)
        wall.append((t2 - t0) * 1e3)
    return counts, float(np.median(host)), float(np.median(wall))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="full")
    ap.add_argument("--workloads", default="elementwise,springs,nbody,stencil,dense")
    ap.add_argument("--systems", default="adjoint,adjoint-unchecked,numba-cuda")
    args = ap.parse_args(argv)
    import adjoint as ad
    from benchmarks import harness
    from benchmarks.workloads import cuda_systems, load
    from adjoint.runtime import backend_cuda
    if not backend_cuda.available():
        print("no GPU (and the simulator is off): nothing to profile")
        return 2
    ad.use_backend("cuda")
    counter = Counter()
    install(counter)
    # the wait between rounds: cuda.synchronize(), and for adjoint the status rows its
    # checked launches left pending read (one copy, uncounted: the counter is off), so
    # that they never pile up into a check at a counted launch
    sync = ad.synchronize
    print("| workload | system | phase | GPU launches | H2D | D2H | syncs | host ms | "
          "until done ms | launches by kernel |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name in args.workloads.split(","):
        wl = load(name)
        problem = wl.make(np.random.default_rng(42), **wl.SIZES[args.size])
        harness.set_tangent(problem, np.random.default_rng(43))
        table = cuda_systems(name)
        for sname in args.systems.split(","):
            if sname not in table:
                continue
            system = table[sname](problem)
            seed = problem.seed
            for phase, fn in (("fwd", system.forward), ("fwd+bwd", lambda: system.fwd_bwd(seed))):
                try:
                    (launches, h2d, d2h, syncs), host, wall = profile(counter, sync, fn)
                except Exception as exc:  # noqa: BLE001 - one system's failure is a row
                    print(f"| {name} | {sname} | {phase} | failed: {type(exc).__name__}: "
                          f"{exc} |||||||")
                    continue
                top = ", ".join(f"{k} x{v}" for k, v in sorted(launches.items(),
                                                                key=lambda kv: -kv[1]))
                print(f"| {name} | {sname} | {phase} | {sum(launches.values())} | {h2d} | "
                      f"{d2h} | {syncs} | {host:.3f} | {wall:.3f} | {top} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
