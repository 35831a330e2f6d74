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

cuda = None         # numba.cuda, once --primitives imports it
warp_add1 = None    # backend_cuda's rt.warp_add1 device function, likewise


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
    ap.add_argument("--cprofile", type=int, default=0, metavar="N",
                    help="after the table: where adjoint's host time goes, the functions "
                         "of N rounds of each workload's fwd+bwd by own time (cProfile)")
    ap.add_argument("--primitives", action="store_true",
                    help="after the table: the host time of numba-cuda's launch paths and "
                         "of the device copies and allocations adjoint's rounds make")
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
    profiles = []
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
            if args.cprofile and sname == "adjoint":
                profiles.append((name, host_profile(system, seed, sync, args.cprofile)))
    for name, text in profiles:
        print(f"\n#### {name}: adjoint's fwd+bwd, {args.cprofile} rounds, by own time\n")
        print("```\n" + text + "```", flush=True)
    if args.primitives:
        print("\n#### numba-cuda's primitives, host microseconds (median of 200)\n")
        for what, us in primitives():
            print(f"- {what}: {us:.1f}", flush=True)
    return 0


def host_profile(system, seed, sync, rounds):
    """The top functions by own time of ``rounds`` fwd+bwd rounds, the host's issuing only
    (the profiler is off while ``sync`` waits for the GPU between rounds)."""
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    for _ in range(rounds):
        prof.enable()
        system.fwd_bwd(seed)
        prof.disable()
        sync()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(22)
    lines = out.getvalue().splitlines()
    start = next((k for k, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(line.replace(os.path.dirname(np.__file__), "numpy")[:150]
                     for line in lines[start:] if line.strip()) + "\n"


def primitives():
    """``[(what, host µs)]``: numba-cuda's launch of one tiny kernel by its dispatcher and
    by its compiled ``_Kernel`` directly, with 1 and 6 array arguments; adjoint's
    configured launch; a device-to-device copy, an allocation and a fill of 4M float32."""
    global cuda, warp_add1  # (module globals: the simulator swaps cuda while a kernel runs)
    import numba.cuda
    cuda = numba.cuda
    from adjoint.runtime import backend_cuda
    warp_add1 = backend_cuda.warp_add1

    @cuda.jit
    def one(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += 1.0

    @cuda.jit
    def six(n, a, b, c, d, e, f):
        i = cuda.grid(1)
        if i < n:
            a[i] += b[i] + c[i] + d[i] + e[i] + f[i]

    import numba
    sim = bool(numba.config.ENABLE_CUDASIM)      # (a trial of the code: tiny, few rounds)
    small = [cuda.to_device(np.zeros(256, np.float32)) for _ in range(6)]
    big = cuda.to_device(np.zeros(64 if sim else 4_000_000, np.float32))
    big2 = cuda.device_array_like(big)

    def timed(fn, rounds=2 if sim else 200):
        fn()
        cuda.synchronize()
        ts = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
            cuda.synchronize()
        return float(np.median(ts)) * 1e6

    out = [("dispatcher, 1 array: one[1, 256](a)", timed(lambda: one[1, 256](small[0]))),
           ("dispatcher, int + 6 arrays", timed(lambda: six[1, 256](256, *small))),
           ("backend_cuda._configured(...)(int + 6 arrays)",
            timed(lambda: backend_cuda._configured(six, (1,), (256,))(256, *small)))]
    for disp, args, what in ((one, (small[0],), "1 array"), (six, (256, *small), "int + 6 arrays")):
        try:
            kernel = next(iter(disp.overloads.values()))
            out.append((f"_Kernel.launch directly, {what}",
                        timed(lambda: kernel.launch(args, (1, 1, 1), (256, 1, 1), 0, 0))))
        except Exception as exc:  # noqa: BLE001 - a private API: name what failed
            out.append((f"_Kernel.launch directly, {what}: failed ({type(exc).__name__}: "
                        f"{exc})", float("nan")))
    out += [("copy_to_device, device to device, 4M float32", timed(lambda: big2.copy_to_device(big))),
            ("cuda.device_array(4M float32)", timed(lambda: cuda.device_array(big.size, np.float32))),
            ("backend_cuda.fill(4M float32)", timed(lambda: backend_cuda.fill(big2, np.float32(0)))),
            ("cuda.synchronize() with nothing queued", timed(cuda.synchronize))]
    out += scatter(sim, timed)
    return out


def scatter(sim, timed):
    """A dense layer's backward into x: every row's thread adds ``W[i, k] * g[i]`` into
    ``out[k]`` for every k (the same k across a warp at once), by plain atomics and by
    ``rt.warp_add1``; each until done (µs), and whether the two sums agree."""
    @cuda.jit
    def plain(n, W, g, out):
        i = cuda.grid(1)
        if i < n:
            for k in range(n):
                cuda.atomic.add(out, k, W[i, k] * g[i])

    @cuda.jit
    def warp(n, W, g, out):
        i = cuda.grid(1)
        if i < n:
            for k in range(n):
                warp_add1(out, k, W[i, k] * g[i])

    # the same sums with each lane at another element (k + 33 i mod n): what rt.warp_add1
    # costs where it cannot help
    @cuda.jit
    def plain_spread(n, W, g, out):
        i = cuda.grid(1)
        if i < n:
            for k in range(n):
                cuda.atomic.add(out, (k + 33 * i) % n, W[i, (k + 33 * i) % n] * g[i])

    @cuda.jit
    def warp_spread(n, W, g, out):
        i = cuda.grid(1)
        if i < n:
            for k in range(n):
                warp_add1(out, (k + 33 * i) % n, W[i, (k + 33 * i) % n] * g[i])

    n = 40 if sim else 2048
    rng = np.random.default_rng(0)
    W = cuda.to_device(rng.standard_normal((n, n)).astype(np.float32))
    g = cuda.to_device(rng.standard_normal(n).astype(np.float32))
    outs = {}
    rows = []
    blocks = ((n + 255) // 256, 256) if not sim else ((n + 31) // 32, 32)
    for label, kernel in (("plain cuda.atomic.add", plain), ("rt.warp_add1", warp),
                          ("spread, plain", plain_spread), ("spread, rt.warp_add1", warp_spread)):
        out = cuda.to_device(np.zeros(n, np.float32))

        def run():
            kernel[blocks](n, W, g, out)
            cuda.synchronize()
        try:
            us = timed(run, rounds=3 if sim else 20)
        except Exception as exc:  # noqa: BLE001 - name what failed
            rows.append((f"scatter {n}x{n}, {label}: failed ({type(exc).__name__}: {exc})",
                         float("nan")))
            continue
        out.copy_to_device(np.zeros(n, np.float32))
        run()
        outs[label] = out.copy_to_host()
        rows.append((f"scatter {n}x{n} until done, {label}", us))
    ref = W.copy_to_host().astype(np.float64).T @ g.copy_to_host().astype(np.float64)
    rows.append(("scatter: max |sum - float64| " + ", ".join(
        f"{label} {np.abs(got - ref).max():.2e}" for label, got in outs.items()) +
        f" (max |ref| {np.abs(ref).max():.1f})", 0.0))
    return rows


if __name__ == "__main__":
    sys.exit(main())
