"""Seconds to the first gradient of the quickstart and of each example, cold and warm.

    python benchmarks/examples_start.py [NAME ...] [--runs 1] [--json OUT.json]

Each example (``examples/NAME.py``) runs in a fresh process, twice with the same
new empty ``ADJOINT_CACHE_DIR`` and ``NUMBA_CACHE_DIR``: cold (the first run
generates and compiles everything), then warm (the second finds the generated
modules and numba's on-disk cache). The child process runs the example as
``__main__`` and ends (``os._exit``) when its first derivative is computed:
the end of the first ``Tape.backward``, of the first ``launch(..., adjoint=True)``
or ``launch(..., tangents=...)``, or of the first call of a function that
``ad.grad``, ``ad.value_and_grad``, ``ad.jvp`` or ``ad.hessian`` made. The time
reported is the parent's wall clock from starting the child to its exit, so the
interpreter's start and every import are in it, and the child's CPU seconds (user
and system, all its threads: on a shared machine the steadier number; on an idle
one the wall time is about the CPU time, a first gradient runs on one core).

Python's own bytecode cache works in both runs as on a user's machine (adjoint's
modules are compiled to ``__pycache__`` first, ``PYTHONDONTWRITEBYTECODE`` is dropped:
``benchmarks/child_env.py``); "cold" means adjoint's and numba's caches are empty.

``floor`` is not an example: one hand-written ``numba.njit(cache=True)`` function
called once, what any numba program pays in a fresh process (its cold run compiles
it, its warm run loads it).

The child also breaks the time down (seconds):

- ``python``: the interpreter's start, before the child's first line;
- ``import_numpy``, ``import_numba``, ``import_adjoint``: each imported on its
  own, in that order (adjoint itself imports numba only when it first compiles);
- ``imports``: seconds of every import of the run by top-level package
  (``python -X importtime``, each module's own time), wherever it happened: gast
  and astor are imported by the transformer (inside ``load``), scipy by numba's
  first compile;
- ``load``: adjoint making or finding generated modules (``modules._load``):
  the key of a module's inputs, the transformer and emitter (``transform``,
  also shown on its own), writing and importing the module; no numba compiling;
- ``compile``: numba compiling, per function (``compile_self``: each function's
  own time, without the functions compiled while it was, such as runtime helpers
  ``rt.*`` it calls; numba's ``numba:compile`` events);
- ``other``: the rest: the example's own Python, numpy work, launches and
  whatever numba does outside a compile (loading cached functions on a warm start).

``EXAMPLES_START_PROFILE=FILE python -P benchmarks/examples_start.py --child
examples/NAME.py`` writes a cProfile of one child run to FILE (caches as they are).

Runs with the adjoint that ``import adjoint`` finds from the repository root
(``-P``: the current directory is not on ``sys.path``, so a ``PYTHONPATH`` that
selects another tree wins).
"""
import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import runpy  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["floor", "quickstart", "heat", "springs", "checkpointed_springs", "projectile",
            "rigid_body", "derivatives", "jacobian"]


class _Clock:
    """Seconds spent inside wrapped functions, counted once when they nest."""

    def __init__(self):
        self.total, self.depth = 0.0, 0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.total += time.perf_counter() - t0
        timed.__wrapped__ = fn
        return timed


def compile_times(records):
    """({function: seconds, outermost compilations}, {function: own seconds}) of a numba
    event recorder's buffer of (time, Event) for ``numba:compile``."""
    outer, own, stack = {}, {}, []
    for t, ev in records:
        if ev.is_start:
            stack.append([t, 0.0])
            continue
        start, inner = stack.pop()
        name = _name(ev)
        took = t - start
        own[name] = own.get(name, 0.0) + took - inner
        if stack:
            stack[-1][1] += took
        else:
            outer[name] = outer.get(name, 0.0) + took
    return outer, own


def _name(ev):
    fn = ev.data["dispatcher"].py_func
    module = getattr(fn, "__module__", "") or ""
    if module.startswith("adjoint.runtime"):
        return "rt." + fn.__name__
    return fn.__name__


def _floor(x, y):
    for i in range(x.shape[0]):
        y[i] = math.sin(x[i]) * x[i]


def floor():
    """The floor: one hand-written ``njit(cache=True)`` function called once, no adjoint."""
    t = time.perf_counter()
    import numpy as np
    t_numpy = time.perf_counter() - t
    t = time.perf_counter()
    import numba
    from numba.core import event
    t_numba = time.perf_counter() - t
    with event.install_recorder("numba:compile") as rec:
        x = np.linspace(-1.0, 1.0, 8)
        numba.njit(cache=True)(_floor)(x, np.zeros_like(x))
    outer, own = compile_times(rec.buffer)
    total = time.perf_counter() - T0
    print(json.dumps({"example": "floor", "first": "one njit call", "child_s": total,
                      "import_numpy": t_numpy, "import_numba": t_numba, "import_adjoint": 0.0,
                      "load": 0.0, "transform": 0.0, "compile": sum(outer.values()),
                      "compile_outer": outer, "compile_self": own,
                      "other": total - t_numpy - t_numba - sum(outer.values())}), flush=True)
    os._exit(0)


def child(path):
    """Run the example at ``path`` up to its first derivative; print one JSON line."""
    if os.path.basename(path) == "floor.py":
        floor()
    times = {}
    profile = None
    if os.environ.get("EXAMPLES_START_PROFILE"):     # a cProfile of the child, to this file
        import cProfile
        profile = cProfile.Profile()
        profile.enable()
    t = time.perf_counter()
    import numpy  # noqa: F401
    times["import_numpy"] = time.perf_counter() - t
    t = time.perf_counter()
    import numba  # noqa: F401
    from numba.core import event
    times["import_numba"] = time.perf_counter() - t
    t = time.perf_counter()
    import adjoint as ad
    from adjoint.build import modules
    from adjoint.derivatives import funcs
    times["import_adjoint"] = time.perf_counter() - t

    # the transformer and emitter: what ``_load`` spends besides the key, finding the
    # module by it and storing/importing it (adjoint.emit is imported on first use only)
    load, found = _Clock(), _Clock()
    modules._load = load.wrap(modules._load)
    for name in ("module_key", "load_indexed", "load"):
        setattr(modules, name, found.wrap(getattr(modules, name)))
    recorder = event.install_recorder("numba:compile")
    rec = recorder.__enter__()
    what = []

    def done(kind):
        end = time.perf_counter()
        recorder.__exit__(None, None, None)
        outer, own = compile_times(rec.buffer)
        compiled = sum(outer.values())
        total = end - T0
        rest = total - sum(times.values()) - load.total - compiled
        print(json.dumps({"example": os.path.basename(path), "first": kind,
                          "adjoint": os.path.dirname(ad.__file__),
                          "child_s": total, **times, "load": load.total,
                          "transform": load.total - found.total, "compile": compiled,
                          "compile_outer": outer, "compile_self": own, "other": rest}),
              flush=True)
        sys.stdout.flush()
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.environ["EXAMPLES_START_PROFILE"])
        os._exit(0)

    def first(kind, fn):
        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            if not what:
                what.append(kind)
                done(kind)
            return out
        return wrapped

    ad.Tape.backward = first("Tape.backward", ad.Tape.backward)
    launch = ad.launch

    def launch_(*args, **kwargs):
        out = launch(*args, **kwargs)
        if kwargs.get("adjoint") or kwargs.get("tangents") is not None:
            done("launch(adjoint=True)" if kwargs.get("adjoint") else "launch(tangents=...)")
        return out
    ad.launch = launch_
    for name in ("grad", "value_and_grad", "jvp", "hessian"):
        maker = getattr(ad, name)

        def make(*args, _maker=maker, _name=name, **kwargs):
            return first(f"ad.{_name}", _maker(*args, **kwargs))
        setattr(ad, name, make)
        setattr(funcs, name, make)
    sys.argv = [path]
    sys.path.insert(0, os.path.dirname(path))
    runpy.run_path(path, run_name="__main__")
    print(json.dumps({"example": os.path.basename(path), "error": "no derivative computed"}))
    os._exit(3)


def run_one(name, env, timeout):
    path = os.path.join(ROOT, "examples", f"{name}.py")
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-P", "-X", "importtime", os.path.abspath(__file__),
                           "--child", path],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (used.ru_utime + used.ru_stime)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{name}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-4000:]}")
    info = json.loads(lines[-1])
    info["wall_s"] = wall
    info["cpu_s"] = cpu
    info["python"] = wall - info["child_s"]
    info["imports"] = import_seconds(proc.stderr)
    return info


def import_seconds(stderr):
    """{top-level package: seconds} of ``-X importtime`` output (each module's own time)."""
    out = {}
    for line in stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S+)", line)
        if found:
            root = found.group(2).split(".")[0]
            out[root] = out.get(root, 0.0) + int(found.group(1)) * 1e-6
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def cold_warm(name, timeout=900):
    """{"cold": info, "warm": info} for example ``name``, in one new pair of cache dirs."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from benchmarks.child_env import child_env     # (the parent's import: not timed)
    with tempfile.TemporaryDirectory(prefix="adjoint-examples-start-") as cache:
        env = child_env(cache, MPLBACKEND="Agg")
        return {"cold": run_one(name, env, timeout), "warm": run_one(name, env, timeout)}


def _load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def summary(info):
    parts = [f"python {info['python']:.2f}"]
    parts += [f"{k[len('import_'):]} {info[k]:.2f}" for k in
              ("import_numpy", "import_numba", "import_adjoint")]
    parts += [f"load {info['load']:.2f} (transform {info['transform']:.2f})",
              f"compile {info['compile']:.2f}", f"other {info['other']:.2f}"]
    own = sorted(info["compile_self"].items(), key=lambda kv: -kv[1])
    fns = ", ".join(f"{n} {s:.2f}" for n, s in own if s >= 0.05)
    imports = ", ".join(f"{n} {s:.2f}" for n, s in info["imports"].items() if s >= 0.03)
    return ("; ".join(parts) + (f"\n      numba, own seconds: {fns}" if fns else "")
            + f"\n      imports by package: {imports}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=EXAMPLES, help="examples (default: all)")
    p.add_argument("--runs", type=int, default=1, help="cold+warm pairs per example")
    p.add_argument("--json", help="write every run here")
    args = p.parse_args(argv)
    out = {"load_average_start": _load_average(), "examples": {}}
    print(f"load average at start: {out['load_average_start']:.2f} on {os.cpu_count()} cores")
    print(f"{'example':24s} {'cold s':>8s} {'warm s':>8s} {'cold CPU':>9s} {'warm CPU':>9s}"
          "   first derivative")
    for name in args.names:
        runs = [cold_warm(name) for _ in range(args.runs)]
        if "adjoint" in runs[0]["cold"] and not out.get("adjoint"):
            out["adjoint"] = runs[0]["cold"]["adjoint"]
            print(f"adjoint from {out['adjoint']}")
        out["examples"][name] = runs
        med = {f"{k}_{m}": statistics.median(r[k][m] for r in runs)
               for k in ("cold", "warm") for m in ("wall_s", "cpu_s")}
        print(f"{name:24s} {med['cold_wall_s']:8.2f} {med['warm_wall_s']:8.2f} "
              f"{med['cold_cpu_s']:9.2f} {med['warm_cpu_s']:9.2f}   {runs[0]['cold']['first']}"
              f"   (load {_load_average():.2f})")
        print("    cold: " + summary(runs[-1]["cold"]))
        print("    warm: " + summary(runs[-1]["warm"]))
    out["load_average_end"] = _load_average()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(os.path.abspath(sys.argv[2]))
    else:
        main()
