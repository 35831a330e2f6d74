"""Launch overhead (a tape of 50 small launches) and cold vs warm start.

Cold vs warm: ``first_gradient.py`` runs in a fresh subprocess twice with the
same fresh ``ADJOINT_CACHE_DIR`` and ``NUMBA_CACHE_DIR``. The first run
generates and compiles everything; the second finds the generated module and
numba's on-disk cache (adjoint compiles generated files with
``numba.njit(cache=True)``).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np

import adjoint as ad

from .child_env import child_env
from .workloads import optional
from .workloads.elementwise import _fwd_ser, wave

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launch_overhead(n_launches=50, n_elems=16, repeat=200):
    """µs per launch of a tape of ``n_launches`` launches of a tiny elementwise kernel,
    each reading the previous launch's output (forward recording, backward replay)."""
    xs = [ad.array(np.linspace(-1, 1, n_elems).astype(np.float32), requires_grad=True)]
    xs += [ad.zeros(n_elems, dtype=ad.float32, requires_grad=True) for _ in range(n_launches)]
    seed = np.ones(n_elems, np.float32)

    def record():
        tape = ad.Tape()
        with tape:
            for k in range(n_launches):
                ad.launch(wave, dim=n_elems, inputs=[xs[k]], outputs=[xs[k + 1]])
        return tape

    def no_tape():
        for k in range(n_launches):
            ad.launch(wave, dim=n_elems, inputs=[xs[k]], outputs=[xs[k + 1]])

    tape = record()
    tape.backward(grads={xs[-1]: seed})
    tape.zero()
    t_rec, t_bwd, t_plain = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        tape = record()
        t1 = time.perf_counter()
        tape.backward(grads={xs[-1]: seed})
        t2 = time.perf_counter()
        tape.reset()        # zero, and stop watching: the launches below would make it copy
        tape = None
        t3 = time.perf_counter()
        no_tape()
        t4 = time.perf_counter()
        t_rec.append(t1 - t0)
        t_bwd.append(t2 - t1)
        t_plain.append(t4 - t3)
    # the same tape captured (tape.capture(), issue 39): its replay, one call each way
    cap = record().capture()
    cap.zero()
    cap.forward()
    cap.backward(grads={xs[-1]: seed})
    t_cfwd, t_cbwd = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        cap.forward()
        t1 = time.perf_counter()
        cap.backward(grads={xs[-1]: seed})
        t2 = time.perf_counter()
        cap.zero()
        t_cfwd.append(t1 - t0)
        t_cbwd.append(t2 - t1)
    cap = None
    # adjoint's compiled forward called directly (no argument checks, no tape): the
    # difference to a launch is adjoint's Python-side overhead. Internal API, may move.
    t_kernel = []
    try:
        spec = wave.spec
        xa, xb = xs[0].numpy(), xs[1].numpy()
        spec.forward(n_elems, xa, xb)
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _k in range(n_launches):
                spec.forward(n_elems, xa, xb)
            t_kernel.append(time.perf_counter() - t0)
    except Exception:  # the runtime's internals changed: report n/a
        t_kernel = []
    # the floor: calling a compiled numba function directly (dispatch cost only)
    a = xs[0].numpy().copy()
    b = np.zeros_like(a)
    _fwd_ser(a, b)
    t_numba = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _k in range(n_launches):
            _fwd_ser(a, b)
        t_numba.append(time.perf_counter() - t0)
    us = 1e6 / n_launches
    out = {
        "n_launches": n_launches, "elements_per_launch": n_elems,
        "adjoint_launch_no_tape_us": statistics.median(t_plain) * us,
        "adjoint_launch_on_tape_us": statistics.median(t_rec) * us,
        "adjoint_backward_per_launch_us": statistics.median(t_bwd) * us,
        "adjoint_captured_forward_us": statistics.median(t_cfwd) * us,
        "adjoint_captured_backward_us": statistics.median(t_cbwd) * us,
        "numba_direct_call_us": statistics.median(t_numba) * us,
        "adjoint_compiled_forward_call_us": statistics.median(t_kernel) * us if t_kernel else None,
    }
    wp = optional.warp()
    if isinstance(wp, str):
        out["warp"] = "skipped: " + wp
    else:
        wk = optional.warp_kernels()
        ws = [wp.array(xs[0].numpy(), dtype=wp.float32, device="cpu", requires_grad=True)]
        ws += [wp.zeros(n_elems, dtype=wp.float32, device="cpu", requires_grad=True)
               for _ in range(n_launches)]
        wseed = wp.array(seed, dtype=wp.float32, device="cpu")
        w_rec, w_bwd = [], []
        for r in range(repeat + 2):
            t0 = time.perf_counter()
            tape = wp.Tape()
            with tape:
                for k in range(n_launches):
                    wp.launch(wk.wave, dim=n_elems, inputs=[ws[k]], outputs=[ws[k + 1]],
                              device="cpu")
            t1 = time.perf_counter()
            tape.backward(grads={ws[-1]: wseed})
            t2 = time.perf_counter()
            tape.zero()
            if r >= 2:
                w_rec.append(t1 - t0)
                w_bwd.append(t2 - t1)
        out["warp_launch_on_tape_us"] = statistics.median(w_rec) * us
        out["warp_backward_per_launch_us"] = statistics.median(w_bwd) * us
    return out


def cold_warm(workloads, size="tiny", timeout=600):
    """Time to the first gradient of each workload's adjoint kernels in a fresh
    process: twice with the same fresh caches (cold, then warm)."""
    results = {}
    for name in workloads:
        with tempfile.TemporaryDirectory(prefix="adjoint-bench-cache-") as cache:
            env = child_env(cache)
            runs = []
            for _ in range(2):
                t0 = time.perf_counter()
                # -P: no current directory on sys.path, so a PYTHONPATH that selects
                # another adjoint tree wins over the checkout's own adjoint/
                proc = subprocess.run([sys.executable, "-P", "-m", "benchmarks.first_gradient",
                                       name, size],
                                      cwd=ROOT, env=env, capture_output=True, text=True,
                                      timeout=timeout)
                wall = time.perf_counter() - t0
                if proc.returncode != 0:
                    raise RuntimeError(f"first-gradient subprocess for '{name}' failed:\n"
                                       f"{proc.stdout}\n{proc.stderr}")
                info = json.loads(proc.stdout.strip().splitlines()[-1])
                info["process_wall_s"] = wall
                runs.append(info)
            results[name] = {"cold": runs[0], "warm": runs[1]}
    return results


def compile_summary(run):
    """'1.23 s in total: wave_forward 0.61 s, ...': a first-gradient run's numba compile
    time, per compiled function (the largest first); 'none' when all came from the cache."""
    per = run.get("compile_s") or {}
    if not per:
        return "none (everything from the on-disk caches)"
    parts = ", ".join(f"{n} {t:.2f} s" for n, t in sorted(per.items(), key=lambda kv: -kv[1]))
    return f"{sum(per.values()):.2f} s in total: {parts}"


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return {"cpu": model, "logical_cores": os.cpu_count(), "usable_cores": affinity,
            "numba": numba.__version__, "numba_threads": numba.get_num_threads(),
            "numba_threading_layer": numba.config.THREADING_LAYER,
            "numpy": np.__version__, "python": sys.version.split()[0]}
