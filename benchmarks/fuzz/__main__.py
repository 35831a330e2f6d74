"""``python -m benchmarks.fuzz``: run many seeds in worker processes, summarise, keep reproducers.

    python -m benchmarks.fuzz --count 1000 --seed 0 --backends python,numba --jobs 1

Seeds ``seed .. seed + count - 1`` are split into batches; each batch runs in a
fresh worker process (``--worker``), which prints one JSON line as it starts a
seed and one with the result. A worker that dies or stays silent past
``--timeout`` seconds marks the seed it was on as an internal error (crash or
hang) and the batch goes on in a new worker. Every program is also run with no
optimization pass and the two runs compared (levels.py; ``--no-levels`` skips that).
Every failure gets a reproducer (``seed-N.md``: symptom, command, program source and
schedule) in ``--out``, and ``summary.txt`` there lists the distinct failures. The
last line printed is

    fuzz: 1000 programs, 0 mismatches, 0 level mismatches, 0 internal errors, 12 refusals
"""
import argparse
import collections
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")   # before numba is imported

from . import ckpt  # noqa: E402
from .driver import run_seed, signature, write_reproducer  # noqa: E402
from .minimize import minimize  # noqa: E402
from .program import Profile, gen_program  # noqa: E402

MARK = "@fuzz "    # worker lines the parent reads (anything else on stdout is ignored)


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--backends", default="python,numba",
                    help="comma-separated: python, race, numba, cuda; with 32 after one "
                         "(numba32), the program runs in float32; with -funcs after python "
                         "or numba, its funcs' ad.grad/jvp/hessian are checked; with -hvp, "
                         "its launches' Hessian-vector products; with -ckpt after python, "
                         "race, numba or cuda, its launches with a run of them under "
                         "ad.checkpoint")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes at once")
    ap.add_argument("--big", type=float, default=Profile.big,
                    help="chance of a grid above the parallel threshold (2048 threads)")
    ap.add_argument("--vectors", type=float, default=Profile.vectors,
                    help="chance of a program with vector types (vec3, mat33, quat)")
    ap.add_argument("--extras", type=float, default=Profile.extras,
                    help="chance of a program with the extras: math.asinh, acosh, atanh, "
                         "hypot, fmod, isnan/isinf/isfinite, func parameters with defaults "
                         "and calls passing keyword arguments")
    ap.add_argument("--losses", type=float, default=Profile.losses,
                    help="chance that a kernel's one output is a one-element total (a loss, "
                         "whose taped launch runs its VJP at once on numba)")
    ap.add_argument("--stores", type=float, default=Profile.stores,
                    help="chance that a kernel stores one element several times (the same "
                         "value and others, with reads and stores between), and that a "
                         "program seeds some arrays it only reads in its backward")
    ap.add_argument("--each-pass", type=float, default=0.0,
                    help="chance that a program also runs with each optimization pass that "
                         "applied alone off, compared with the optimized run (always done "
                         "for a program whose optimized and unoptimized runs disagree)")
    ap.add_argument("--no-levels", action="store_true",
                    help="do not run programs again with no optimization pass (levels.py)")
    ap.add_argument("--cuda-max-threads", type=int, default=128,
                    help="CUDA (simulator) runs only programs with at most this many threads")
    ap.add_argument("--batch", type=int, default=20, help="seeds per worker process")
    ap.add_argument("--timeout", type=float, default=600, help="seconds one program may take")
    ap.add_argument("--out", default="fuzz-failures", help="folder for reproducers")
    ap.add_argument("--minimize", action="store_true",
                    help="shrink the program of --seed on the first of --backends and print it")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seeds", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for b in args.backends.split(","):
        if ckpt.split(b) is not None and ckpt.split(b) not in ckpt.BASES:
            ap.error(f"backend {b!r}: -ckpt runs after {', '.join(ckpt.BASES)} (float64 "
                     f"only), not after {ckpt.split(b)!r}")
    return args


def profile_of(args):
    return Profile(big=args.big, vectors=args.vectors, extras=args.extras, losses=args.losses,
                   stores=args.stores)


# --------------------------------------------------------------------------- worker

def worker(args):
    backends = args.backends.split(",")
    for seed in map(int, args.seeds.split(",")):
        print(MARK + json.dumps({"start": seed}), flush=True)
        rec = run_seed(seed, backends, profile_of(args),
                       cuda_max_threads=args.cuda_max_threads,
                       compare_levels=not args.no_levels, each_pass=args.each_pass)
        print(MARK + json.dumps(rec), flush=True)


# --------------------------------------------------------------------------- parent

class Tally:
    """Results so far: counts per status and backend, times, distinct failures."""

    def __init__(self):
        self.programs = 0
        self.status = Counter()              # worst status per program
        self.by_backend = defaultdict(Counter)
        self.seconds = Counter()
        self.runs = Counter()
        self.distinct = defaultdict(list)    # signature -> seeds
        self.unlocated = 0
        self.checked = self.skipped = 0
        self.diverged = defaultdict(list)    # backend -> seeds whose float32 forward diverged
        self.levels = Counter()              # level comparisons: exact, tolerance, skipped
        self.level_programs = 0              # programs whose optimization levels disagree
        self.each = Counter()                # programs run with each pass alone off

    def add(self, rec):
        self.programs += 1
        worst = "ok"
        disagree = each = False
        for backend, r in rec["results"].items():
            lv = r.get("levels")
            if lv:
                self.levels["skipped" if lv["status"] == "skipped" else
                            "exact" if lv["exact"] else "tolerance"] += 1
                disagree |= lv["status"] == "disagree"
                each |= "each" in lv
            self.by_backend[backend][r["status"]] += 1
            self.seconds[backend] += r.get("seconds", 0.0)
            self.runs[backend] += 1
            self.checked += r.get("checked", 0)
            self.skipped += r.get("skipped", 0)
            if r.get("diverged"):
                self.diverged[backend].append(rec["seed"])
            if r["status"] != "ok":
                self.distinct[f"[{backend}] " + signature(r["status"], r["detail"])].append(rec["seed"])
                if r["status"] == "refusal" and not r.get("located", True):
                    self.unlocated += 1
            order = ["ok", "refusal", "generator", "levels", "mismatch", "internal"]
            if order.index(r["status"]) > order.index(worst):
                worst = r["status"]
        self.level_programs += disagree
        self.each["programs"] += each
        for stage in ("reference", "transform"):
            if f"{stage}_s" in rec:
                self.seconds[stage] += rec[f"{stage}_s"]
                self.runs[stage] += 1
        self.status[worst] += 1
        return worst

    def line(self):
        s = self.status
        extra = f", {s['generator']} generator errors" if s["generator"] else ""
        return (f"fuzz: {self.programs} programs, {s['mismatch']} mismatches, "
                f"{self.level_programs} level mismatches, "
                f"{s['internal']} internal errors, {s['refusal']} refusals{extra}")

    def report(self, wall):
        lines = [f"{b:10} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) +
                 f"; {60 * self.runs[b] / max(self.seconds[b], 1e-9):.1f} programs/min"
                 for b, c in sorted(self.by_backend.items())]
        for stage, what in (("reference", "float64 forward + finite differences, once a program"),
                            ("transform", "adjoint's passes, once a program")):
            lines.append(f"{stage:10} {60 * self.runs[stage] / max(self.seconds[stage], 1e-9):.1f}"
                         f" programs/min ({what})")
        lines.append(f"gradient checks: {self.checked} compared, {self.skipped} skipped "
                     "(a branch switched within the step)")
        lv = self.levels
        lines.append(f"optimization levels: {lv['exact'] + lv['tolerance']} runs compared with "
                     f"their unoptimized run ({lv['exact']} bit for bit, {lv['tolerance']} to "
                     f"a tolerance: a pass that rounds otherwise applied), {lv['skipped']} "
                     f"not (the optimized run failed); {self.level_programs} programs "
                     f"disagree; {self.each['programs']} programs also run with each pass "
                     f"alone off")
        for b, seeds in sorted(self.diverged.items()):
            lines.append(f"{b}: {len(seeds)} runs diverged (a float32 forward value off the "
                         f"reference: rounding took another branch?), gradients not compared "
                         f"(seeds {', '.join(map(str, seeds[:8]))})")
        lines.append(f"wall clock {wall:.0f} s: {60 * self.programs / max(wall, 1e-9):.1f} programs/min")
        if self.unlocated:
            lines.append(f"{self.unlocated} refusals name no file:line")
        if self.distinct:
            lines.append("distinct failures:")
            for sig, seeds in sorted(self.distinct.items(), key=lambda kv: -len(kv[1])):
                lines.append(f"  {len(seeds):4}x {sig}  (seeds {', '.join(map(str, seeds[:6]))})")
        return "\n".join(lines)


def _reader(proc, q):
    for line in proc.stdout:
        q.put(line)
    q.put(None)


def run_batch(args, seeds, env, on_record):
    """Run ``seeds`` in worker processes, restarting after a crash or a hang."""
    while seeds:
        cmd = [sys.executable, "-m", "benchmarks.fuzz", "--worker", "--seeds",
               ",".join(map(str, seeds)), "--backends", args.backends, "--big", str(args.big),
               "--vectors", str(args.vectors), "--extras", str(args.extras),
               "--losses", str(args.losses), "--stores", str(args.stores),
               "--each-pass", str(args.each_pass)] + ["--no-levels"] * args.no_levels + [
               "--cuda-max-threads", str(args.cuda_max_threads)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, cwd=os.getcwd())
        q = queue.Queue()
        threading.Thread(target=_reader, args=(proc, q), daemon=True).start()
        stderr = collections.deque(maxlen=20)
        threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()
        current, why = None, None
        while True:
            try:
                line = q.get(timeout=args.timeout)
            except queue.Empty:
                why = f"hang: no result within {args.timeout:.0f} s"
                proc.kill()
                break
            if line is None:
                break
            if not line.startswith(MARK):
                continue
            msg = json.loads(line[len(MARK):])
            if "start" in msg:
                current = msg["start"]
                continue
            on_record(msg)
            seeds = seeds[seeds.index(msg["seed"]) + 1:]
            current = None
        proc.wait()
        if current is None:
            if proc.returncode and seeds:
                current = seeds[0]       # died before starting a seed
            else:
                return
        why = why or f"crash: worker exited with status {proc.returncode}\n" + "".join(stderr)
        on_record({"seed": current, "features": [], "threads": 0,
                   "results": {"worker": {"status": "internal", "detail": why, "seconds": 0.0}}})
        seeds = seeds[seeds.index(current) + 1:]


def shrink(args):
    prog = gen_program(args.seed, profile_of(args))
    small, outcome = minimize(prog, args.backends.split(",")[0])
    if outcome is None or outcome.status == "ok":
        print(f"seed {args.seed} does not fail on {args.backends.split(',')[0]}")
        return 0
    print(small.source())
    seeds = f" (and the leaves {', '.join(small.read_seeds)}: seeded, only read)" \
        if small.read_seeds else ""
    print(f"# schedule{seeds}\n" + "\n".join(small.schedule()))
    print(f"# {outcome.status}: {outcome.detail}")
    return 0


def main(argv=None):
    args = parse(argv)
    if args.worker:
        return worker(args)
    if args.minimize:
        return shrink(args)
    backends = args.backends.split(",")
    profile = profile_of(args)
    env = dict(os.environ)
    cache = tempfile.mkdtemp(prefix="adjoint-fuzz-cache-")
    env["ADJOINT_CACHE_DIR"] = cache
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    tally, lock = Tally(), threading.Lock()
    all_seeds = list(range(args.seed, args.seed + args.count))
    batches = [all_seeds[k:k + args.batch] for k in range(0, len(all_seeds), args.batch)]
    start = time.perf_counter()

    def on_record(rec):
        with lock:
            worst = tally.add(rec)
            if worst != "ok":
                path = write_reproducer(args.out, rec, profile, backends)
                print(f"seed {rec['seed']}: {worst} -> {path}", flush=True)
            if tally.programs % 50 == 0:
                print(f"... {tally.line()}", flush=True)

    def jobs():
        while True:
            with lock:
                if not batches:
                    return
                batch = batches.pop(0)
            run_batch(args, batch, env, on_record)

    threads = [threading.Thread(target=jobs) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shutil.rmtree(cache, ignore_errors=True)
    report = tally.report(time.perf_counter() - start)
    print(report)
    print(tally.line())
    if tally.distinct:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "summary.txt"), "w") as fh:
            fh.write(report + "\n" + tally.line() + "\n")
    return 1 if tally.status["mismatch"] or tally.status["internal"] or \
        tally.level_programs else 0


if __name__ == "__main__":
    sys.exit(main())
