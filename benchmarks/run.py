"""Benchmark adjoint against hand-written numba, Warp and JAX, on CPU or GPU.

    python benchmarks/run.py                 # five workloads tuned and as a user writes them, CPU
    python benchmarks/run.py --quick         # small sizes (about a minute)
    python benchmarks/run.py --only springs --repeat 20 --json out.json
    python benchmarks/run.py --device cuda   # the same workloads on an NVIDIA GPU
    python benchmarks/run.py --busy 1        # each workload also beside a busy process
    python benchmarks/run.py --small --only stencil,stencil-user   # 128x128: many small launches

Systems on ``--device cpu``: ``adjoint`` (@ad.kernel + ad.Tape, numba backend),
``adjoint-unchecked`` (the same with @ad.kernel(bounds_check=False): the table
ends with what the default bounds checks cost, paired round by round),
``numba-ser`` and ``numba-par`` (a hand-written numba forward/adjoint pair,
serial ``njit`` and ``njit(parallel=True)`` with ``prange``, race-free), ``warp``
(NVIDIA Warp, CPU device) and ``jax`` (jax.jit on CPU) when importable. On
``--device cuda``: ``adjoint`` (CUDA backend), ``numba-cuda`` (a hand-written
``numba.cuda.jit`` forward/adjoint pair), ``warp`` (Warp's CUDA device) and
``jax`` (jax.jit on the GPU). Every system's outputs and gradients are checked
against a float64 reference before timing; a mismatch aborts the run (exit
status 2). adjoint's systems also time their JVP (forward mode,
``ad.launch(..., tangents=...)`` along a random tangent of every differentiated
input, checked against float64 central differences): the ``jvp ms`` and
``jvp/fwd`` columns; so does the parallel pair of springs and n-body, with a JVP
written by hand. Each workload also runs as a user writes it (``<name>-user``:
the loss reduced inside the kernel with ``ad.atomic_add``, launches on a tape, the
stencil periodic; ``--no-user`` skips them; CPU only). See docs/benchmarks.md.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.append(ROOT)  # after PYTHONPATH, so PYTHONPATH can select another adjoint tree

import numpy as np  # noqa: E402

import adjoint as ad  # noqa: E402
from benchmarks import busy, harness, startup  # noqa: E402
from benchmarks.workloads import ALL, ORDER, cuda_systems, load, optional  # noqa: E402

SYSTEMS_BY_DEVICE = {"cpu": ["adjoint", "adjoint-captured", "adjoint-vec3", "adjoint-unchecked", "numba-ser", "numba-par", "warp",
                             "jax"],
                     "cuda": ["adjoint", "adjoint-unchecked", "numba-cuda", "warp", "jax"]}
ALL_SYSTEMS = SYSTEMS_BY_DEVICE["cpu"]


def adjoint_revision():
    """Where adjoint was imported from, and the git commit (+ dirty flag) of that tree."""
    pkg = os.path.dirname(os.path.abspath(ad.__file__))
    info = {"path": pkg, "commit": "unknown (not a git checkout)", "dirty": None}
    stamp = os.path.join(os.path.dirname(pkg), "COMMIT")   # written next to a `git archive` export
    if os.path.exists(stamp):
        with open(stamp) as fh:
            info["commit"] = fh.read().strip() + " (exported tree)"
        info["dirty"] = False
    try:
        top = subprocess.run(["git", "-C", pkg, "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        info["commit"] = subprocess.run(["git", "-C", top, "rev-parse", "HEAD"], capture_output=True,
                                        text=True, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", top, "status", "--porcelain", "--", pkg],
                                capture_output=True, text=True, check=True).stdout
        info["dirty"] = bool(status.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def versions(selected):
    out = {"adjoint": ad.__version__}
    for name, probe in (("jax", optional.jax), ("warp", optional.warp)):
        if name in selected:
            mod = probe()
            out[name] = mod if isinstance(mod, str) else mod.__version__
    return out


def gpu_description():
    """The GPU's name and compute capability, and which numba CUDA target drives it."""
    import numba
    from numba import cuda
    target = f"numba.cuda {getattr(cuda, 'implementation', '?')} (numba {numba.__version__})"
    if numba.config.ENABLE_CUDASIM:
        return f"numba's CUDA simulator (no GPU), {target}"
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else dev.name
    cc = ".".join(str(c) for c in dev.compute_capability)
    return f"{name}, compute capability {cc}, {target}"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, fewer repeats")
    p.add_argument("--tiny", action="store_true",
                   help="tiny sizes (smoke test); implies --quick")
    p.add_argument("--small", action="store_true",
                   help="the stencils at 128x128, 50 launches (many small launches: issue 39's "
                        "case); workloads without such a size run at full size")
    p.add_argument("--micro", action="store_true",
                   help="a few hundred threads (smoke test in numba's CUDA simulator); "
                        "implies --quick")
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"run only this workload (repeatable or comma-separated): {', '.join(ALL)}")
    p.add_argument("--no-user", action="store_true",
                   help="skip the workloads as a user writes them (<name>-user)")
    p.add_argument("--device", choices=sorted(SYSTEMS_BY_DEVICE), default="cpu",
                   help="where every system runs (default cpu; cuda needs an NVIDIA GPU)")
    p.add_argument("--systems", default=None,
                   help="comma-separated systems to run (default: all of the device's; "
                        "numba-par on cpu and numba-cuda on cuda are the baselines)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed rounds per workload (default 15, 5 with --quick)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed forward+backward runs per system before the check (default 2, 1 with --quick)")
    p.add_argument("--json", metavar="OUT.json", help="write every measurement to this file")
    p.add_argument("--no-jvp", action="store_true",
                   help="skip the JVP (forward mode) checks and timings, as runs before it had")
    p.add_argument("--keep-going", action="store_true",
                   help="a system whose check fails (or that raises) is reported and left out "
                        "of its workload; the others are still timed (exit status 2 at the end)")
    p.add_argument("--busy", type=int, default=0, metavar="K",
                   help="time every workload again beside K processes that spin on a core "
                        "each, and report each system's slowdown against its own quiet time "
                        "(benchmarks/busy.py; issue 39)")
    p.add_argument("--no-startup", action="store_true",
                   help="skip the launch-overhead and cold/warm-start measurements")
    a = p.parse_args(argv)
    a.quick = a.quick or a.tiny or a.micro
    a.size = "micro" if a.micro else "tiny" if a.tiny else ("quick" if a.quick else
                                                            "small" if a.small else "full")
    a.repeat = a.repeat or (5 if a.quick else 15)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.quick else 2)
    names = []
    for item in a.only or []:
        names += [n.strip() for n in item.split(",") if n.strip()]
    known = ORDER if a.device == "cuda" else ALL     # the user forms have no GPU systems
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)} on --device {a.device}; choose from "
                f"{', '.join(known)}")
    a.workloads = [n for n in known if n in names] if names else \
        list(ORDER if a.no_user else known)
    a.all_systems = SYSTEMS_BY_DEVICE[a.device]
    a.baseline = harness.BASELINES[a.device]
    a.system_list = [s.strip() for s in (a.systems or ",".join(a.all_systems)).split(",")
                     if s.strip()]
    bad = [s for s in a.system_list if s not in a.all_systems]
    if bad:
        p.error(f"unknown system(s) {', '.join(bad)} on --device {a.device}; choose from "
                f"{', '.join(a.all_systems)}")
    if a.device == "cuda":
        a.no_startup = True        # the launch-overhead and cold-start runs are CPU ones
    return a


def main(argv=None):
    args = parse_args(argv)
    t_start = time.perf_counter()

    def log(msg=""):
        print(msg, flush=True)

    if args.device == "cuda":
        from adjoint.runtime import backend_cuda
        if not backend_cuda.available():
            log("--device cuda: no NVIDIA GPU with a working CUDA driver here (and numba's "
                "simulator is off); nothing to measure")
            return 2
        ad.use_backend("cuda")        # adjoint's arrays and launches go to the GPU
        optional.use_gpu()            # and JAX's
    mach = startup.machine()
    if args.device == "cuda":
        mach["gpu"] = gpu_description()
    rev = adjoint_revision()
    vers = versions(args.system_list)
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    log(f"adjoint benchmarks ({args.size} sizes, {args.repeat} timed rounds, "
        f"{args.warmup} warm-up) -- {date}")
    log(f"machine: {mach['cpu']}, {mach['logical_cores']} logical cores "
        f"({mach['usable_cores']} usable), numba {mach['numba']} "
        f"({mach['numba_threads']} threads, layer {mach['numba_threading_layer']}), "
        f"numpy {mach['numpy']}, python {mach['python']}")
    if args.device == "cuda":
        log(f"gpu: {mach['gpu']}")
        if "simulator" in mach["gpu"]:
            log("WARNING: numba's CUDA simulator runs GPU threads as Python threads: it checks "
                "the gradients, its timings mean nothing")
    loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    log(f"load average at start: {loadavg:.2f} on {mach['usable_cores']} cores")
    if loadavg > 0.5 * mach["usable_cores"]:
        log("WARNING: the machine is busy; parallel timings suffer most (a thread that loses "
            "its core stalls the whole parallel region). Re-run on a quiet machine.")
    mach["loadavg_start"] = loadavg
    dirty = {True: " + uncommitted changes", False: "", None: ""}[rev["dirty"]]
    log(f"adjoint {vers['adjoint']} from {rev['path']} at commit {rev['commit']}{dirty}")

    skipped = {}
    systems = []
    for s in args.system_list:
        need = {"warp": optional.warp, "jax": optional.jax}.get(s)
        if need is not None and isinstance(need(), str):
            skipped[s] = need()
            continue
        systems.append(s)
    for s in args.all_systems:
        if s not in args.system_list:
            skipped.setdefault(s, "not selected (--systems)")
    for s in ("warp", "jax"):
        if s in systems:
            log(f"{s} {vers[s]}: included")
    for s, why in skipped.items():
        log(f"SKIPPED {s}: {why}")
    if args.baseline not in systems:
        log(f"note: {args.baseline} (the baseline of the ratio column) is not selected; "
            "ratios are n/a")

    rng = np.random.default_rng(7)
    log("\nfloat64 references checked against central finite differences (tiny instances):")
    for name in args.workloads:
        wl = load(name)
        err = harness.fd_check_reference(wl, rng)
        log(f"    {name:<12} OK (worst rel. error {err:.1e})")

    rows, details, failures = [], {}, []
    quiet, loaded = {}, {}          # (--busy) {workload: {system: Result}}
    for name in args.workloads:
        wl = load(name)
        problem = wl.make(np.random.default_rng(42), **wl.SIZES.get(args.size, wl.SIZES["full"]))
        harness.set_tangent(problem, np.random.default_rng(43))
        log(f"\n[{name}] {wl.TITLE} -- {problem.meta.get('size', '')}")
        table = cuda_systems(name) if args.device == "cuda" else wl.SYSTEMS
        chosen = {s: table[s] for s in systems if s in table}
        while True:
            if not chosen:
                res = {}
                break
            try:
                res = harness.run_workload(wl, problem, chosen, args.repeat, args.warmup, log,
                                           jvp=not args.no_jvp)
                break
            except (harness.GradientMismatch, harness.SystemFailed) as exc:
                if not args.keep_going or exc.system not in chosen:
                    if isinstance(exc, harness.SystemFailed):
                        raise
                    log(f"\n{exc}\nAborting: no timings are reported for systems with wrong "
                        "gradients.")
                    return 2
                if isinstance(exc, harness.SystemFailed):
                    log("".join(traceback.format_exception(exc.__cause__)).rstrip())
                log(f"\n{exc}\n--keep-going: {name} runs again without {exc.system}\n")
                failures.append({"workload": name, "system": exc.system, "error": str(exc)})
                del chosen[exc.system]
        for s, r in res.items():
            base = res.get(args.baseline)
            ratio = f"{harness.paired_ratio(r.fb, base.fb):5.2f}x {args.baseline}" if base else ""
            jvp = ""
            if r.jvp:
                jvp = (f"jvp {r.jvp_ms:9.2f} ms   "
                       f"jvp/fwd {harness.paired_ratio(r.jvp, r.jvp_fwd):5.2f}   ")
            log(f"    {s:<11} fwd {r.fwd_ms:9.2f} ms   bwd {r.bwd_text():>9} ms   "
                f"fwd+bwd {r.fb_ms:9.2f} ms ({r.spread_text()})   "
                f"(fwd+bwd)/fwd {harness.paired_ratio(r.fb, r.fwd):5.2f}   {jvp}{ratio}"
                + (f"   [{r.note}]" if r.note else ""))
            rows.append(r)
        if args.busy and res:
            quiet[name] = res
            log(f"    beside {args.busy} busy process(es):")
            with busy.busy(args.busy):
                loaded[name] = harness.run_workload(
                    wl, problem, {s: chosen[s] for s in res}, args.repeat, args.warmup,
                    lambda msg: None, jvp=False)
            for s, r in loaded[name].items():
                log(f"    {s:<11} fwd+bwd {busy.median_ms(r.fb):9.2f} ms   slowdown "
                    f"{busy.median_ms(r.fb) / res[s].fb_ms:5.2f}")
        details[name] = {"size": problem.meta.get("size", ""), "title": wl.TITLE,
                         "systems": {s: {"fwd_s": r.fwd, "fwd_bwd_s": r.fb, "bwd_s": r.bwd,
                                         "bwd_measured": r.bwd_measured,
                                         "fwd_ms_median": r.fwd_ms, "fwd_bwd_ms_median": r.fb_ms,
                                         "check_worst_rel_l2": r.worst_err, "note": r.note,
                                         **({"jvp_s": r.jvp, "jvp_fwd_s": r.jvp_fwd,
                                             "jvp_ms_median": r.jvp_ms,
                                             "jvp_check_worst_rel_l2": r.jvp_err}
                                            if r.jvp else {})}
                                     for s, r in res.items()}}

    table = harness.format_table(rows, args.baseline)
    log("\n" + table)
    targets = harness.format_targets(rows)
    log("\nissue 14's targets for adjoint (medians of per-round ratios"
        + ("" if args.size == "full" else "; they are set for the full sizes, not these")
        + "):\n" + targets)
    captured = harness.format_capture_targets(rows)
    if captured:
        log("\nissue 39's target for a captured tape (medians of per-round ratios):\n" + captured)

    extra = {}
    if args.busy:
        table_busy = busy.rows(quiet, loaded)
        log(f"\nbeside {args.busy} busy process(es) (medians; slowdown: busy / quiet, each "
            "system against its own quiet time):\n" + busy.format_table(table_busy, args.busy))
        extra["busy"] = {"processes": args.busy, "max_slowdown": busy.MAX_SLOWDOWN,
                         "rows": [{"workload": wl, "system": s, "quiet_fwd_bwd_ms": q,
                                   "busy_fwd_bwd_ms": t, "slowdown": x,
                                   "busy_fwd_bwd_s": loaded[wl][s].fb}
                                  for wl, s, q, t, x in table_busy]}
    if not args.no_startup and "adjoint" in systems:
        log("\nlaunch overhead (tape of 50 launches of a 16-element kernel, medians):")
        lo = startup.launch_overhead(repeat=20 if args.quick else 200)
        extra["launch_overhead"] = lo
        log(f"    adjoint: launch without tape {lo['adjoint_launch_no_tape_us']:.1f} us, "
            f"recorded on a tape {lo['adjoint_launch_on_tape_us']:.1f} us, "
            f"backward {lo['adjoint_backward_per_launch_us']:.1f} us per launch")
        log(f"    adjoint: the tape captured (tape.capture()): forward replay "
            f"{lo['adjoint_captured_forward_us']:.1f} us, backward replay "
            f"{lo['adjoint_captured_backward_us']:.1f} us per launch")
        if lo["adjoint_compiled_forward_call_us"] is not None:
            log(f"    adjoint: its compiled forward called directly (no launch, no tape) "
                f"{lo['adjoint_compiled_forward_call_us']:.1f} us")
        log(f"    numba:   direct call of a compiled serial function {lo['numba_direct_call_us']:.1f} us")
        if "warp_launch_on_tape_us" in lo:
            log(f"    warp:    recorded on a tape {lo['warp_launch_on_tape_us']:.1f} us, "
                f"backward {lo['warp_backward_per_launch_us']:.1f} us per launch")
        else:
            log(f"    warp:    {lo['warp']}")
        st = details.get("stencil", {}).get("systems", {}).get("adjoint")
        if st:
            per = (lo["adjoint_launch_on_tape_us"] + lo["adjoint_backward_per_launch_us"]) * 50e-3
            log(f"    in the stencil workload: 50 launches x (record + backward) overhead "
                f"= {per:.2f} ms of its {st['fwd_bwd_ms_median']:.2f} ms forward+backward "
                f"({100 * per / st['fwd_bwd_ms_median']:.0f}%)")
        log("\ncold vs warm start (time to first gradient in a fresh process, tiny instance; "
            "the second run reuses the generated module and numba's on-disk cache"
            + ("; --quick: first workload only" if args.quick else "") + "):")
        cold_wls = args.workloads[:1] if args.quick else args.workloads
        cw = startup.cold_warm(cold_wls + ["numba-floor"])
        extra["cold_warm"] = cw
        for name, r in cw.items():
            if name == "numba-floor":
                log(f"    {'(floor: one cached hand-written njit function, no adjoint)':<12}\n"
                    f"    {'':<12} cold {r['cold']['process_wall_s']:6.2f} s   "
                    f"warm {r['warm']['process_wall_s']:6.2f} s")
                continue
            if os.path.dirname(r["warm"]["adjoint"]) != rev["path"]:
                log(f"WARNING: the subprocess imported adjoint from {r['warm']['adjoint']}")
            log(f"    {name:<12} cold {r['cold']['process_wall_s']:6.2f} s   "
                f"warm {r['warm']['process_wall_s']:6.2f} s   "
                f"(process wall time; imports {r['warm']['import_s']:.2f} s of the warm run)")
            log(f"    {'':<12} numba compiling, cold: {startup.compile_summary(r['cold'])}; "
                f"warm: {startup.compile_summary(r['warm'])}")

    mach["loadavg_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    log(f"\nload average at end: {mach['loadavg_end']:.2f}")
    log(f"total benchmark time {time.perf_counter() - t_start:.0f} s")
    for s, why in skipped.items():
        log(f"SKIPPED {s}: {why}")
    for f in failures:
        log(f"FAILED {f['workload']}/{f['system']}: {f['error'].splitlines()[0]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"date": date, "device": args.device, "baseline": args.baseline,
                       "machine": mach, "adjoint": rev, "versions": vers,
                       "size": args.size, "repeat": args.repeat, "warmup": args.warmup,
                       "skipped": skipped, "check_failures": failures,
                       "workloads": details, "table": table,
                       "targets": targets, **extra},
                      fh, indent=2)
        log(f"wrote {args.json}")
    return 2 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
