"""Run seeds: one program per seed, checked on every backend asked for.

``run_seed`` is the unit of work (used in-process by tests/system/test_fuzz.py and by
the worker processes of ``python -m benchmarks.fuzz``): it draws the program,
computes the reference and its finite differences once, then runs each
backend. The CUDA simulator runs each GPU thread as a Python thread, so CUDA
takes only programs of at most ``cuda_max_threads`` threads. A float32 backend
(``numba32``: check.split_backend) runs the program's float32 module, made once; a
``-funcs`` one (``python-funcs``) checks the funcs called from Python (funcs.py), a
``-hvp`` one the Hessian-vector products of its launches (hvp.py), a ``-ckpt`` one its
launches with a run of them under ``ad.checkpoint`` (ckpt.py).

Every backend's run is then run again with no optimization pass, from a fresh import
of the program (``Modules``), checked against the finite differences as well, and the
two runs' results compared (``judge``, levels.py): bit for bit unless a pass that
rounds otherwise applied. ``each_pass``: the chance that a program is also run with
each optimization pass alone off (always done where the two levels disagree).
"""
import os
import random
import re
import tempfile
import time

from . import ckpt, funcs, hvp, levels
from .check import Outcome, finite_differences, load_module, run_backend, split_backend
from .program import Profile, gen_program

STATUSES = ["ok", "refusal", "mismatch", "internal", "generator", "levels"]


class Modules:
    """The program imported once per (float32, optimization setting), each a fresh
    module (levels.py: nothing one optimization level built is reused by another)."""

    def __init__(self, prog, folder):
        self.prog, self.folder, self.mods = prog, folder, {}

    def get(self, float32, setting=True):
        key = (float32, setting)
        if key not in self.mods:
            level = "" if setting is True else "O0" if setting is False else \
                "no_" + str(setting).lstrip("-").replace(",", "_")
            self.mods[key] = load_module(self.prog, self.folder, float32, level)
        return self.mods[key]


def each_pass_drawn(seed, chance):
    """Whether the program of ``seed`` is also run with each optimization pass alone off
    (``--each-pass``), from a random source of its own."""
    return chance > 0 and random.Random(f"each-pass {seed}").random() < chance


def judge(prog, ref, backend, modules, compare_levels=True, each_pass=False, diagnose=True):
    """``(outcome, levels record or None)``: ``prog`` on ``backend`` with the optimizations
    enabled now, and (``compare_levels``) again with none, compared (levels.py; ``each_pass``
    and ``diagnose`` as levels.check takes them). ``modules``: a ``Modules`` of ``prog``."""
    float32 = split_backend(backend)[1]
    mod = modules.get(float32)
    out = outcome(prog, mod, ref, backend)
    if not compare_levels:
        return out, None
    return levels.check(out, mod, backend, lambda m: outcome(prog, m, ref, backend),
                        lambda setting: modules.get(float32, setting), each_pass, diagnose)


def run_seed(seed, backends, profile=Profile(), folder=None, cuda_max_threads=128,
             compare_levels=True, each_pass=0.0):
    """``{"seed", "features", "threads", "reference_s", "results": {backend: {...}}}``;
    each result has ``status`` (see check.Outcome; ``levels`` where the optimized and
    unoptimized runs disagree and nothing else failed), ``detail``, ``located``,
    ``checked``, ``skipped``, ``seconds`` and, where the levels were compared
    (``compare_levels``), ``levels`` (levels.check's record). ``each_pass``: the chance
    that the program is also run with each optimization pass alone off."""
    prog = gen_program(seed, profile)
    each = each_pass_drawn(seed, each_pass)
    rec = {"seed": seed, "features": prog.features, "threads": prog.threads, "results": {}}
    t0 = time.perf_counter()
    try:
        ref = finite_differences(prog, entries=3 if prog.threads <= 2048 else 1)
    except Exception as exc:  # noqa: BLE001 - the generator wrote something Python rejects
        rec["results"]["reference"] = {"status": "generator", "detail": f"{type(exc).__name__}: {exc}",
                                       "seconds": time.perf_counter() - t0}
        return rec
    rec["reference_s"] = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        mods, modules = {}, Modules(prog, tmp)
        for float32 in sorted({split_backend(b)[1] for b in backends}):
            try:
                mods[float32] = modules.get(float32)
            except Exception as exc:  # noqa: BLE001 - adjoint's decorators raised at import
                for b in backends:
                    if split_backend(b)[1] == float32:
                        rec["results"][b] = {"status": "internal", "located": False,
                                             "detail": f"at import: {exc!r}", "seconds": 0.0}
        t = time.perf_counter()
        for mod in mods.values():           # transform once, outside any backend's time
            for k in prog.kernels:
                try:
                    getattr(mod, k.name).transformed
                except Exception:  # noqa: BLE001 - run_backend reports it
                    pass
        rec["transform_s"] = time.perf_counter() - t
        for b in backends:
            base, float32 = split_backend(b)
            if float32 not in mods or base.split("-")[0] == "cuda" and \
                    prog.threads > cuda_max_threads:
                continue
            t = time.perf_counter()
            try:
                out, lv = judge(prog, ref, b, modules, compare_levels, each)
            except Exception as exc:  # noqa: BLE001 - a second import failed
                out, lv = failed_import(exc), None
            rec["results"][b] = {"status": out.status, "detail": out.detail,
                                 "located": out.located, "checked": out.checked,
                                 "skipped": out.skipped, "diverged": out.diverged,
                                 "seconds": time.perf_counter() - t}
            if lv is not None:
                rec["results"][b]["levels"] = lv
    return rec


def failed_import(exc):
    return Outcome("internal", f"at import: {exc!r}", located=False)


def outcome(prog, mod, ref, backend):
    """The ``check.Outcome`` of ``prog`` on ``backend``; ``mod``: the program imported
    (check.load_module), as its float32 module for a float32 backend."""
    if funcs.split(backend):
        return funcs.check_funcs(prog, mod, funcs.split(backend))
    if hvp.split(backend):
        return hvp.check_hvp(prog, mod, hvp.split(backend))
    if ckpt.split(backend):
        return ckpt.check_ckpt(prog, mod, ref, ckpt.split(backend))
    return run_backend(prog, mod, ref, backend)


def signature(status, detail):
    """What makes two failures the same: the status and the message's first line with
    numbers, generated names and paths blanked out."""
    first = detail.strip().splitlines()[0] if detail.strip() else ""
    first = re.sub(r"\S+\.py:\d+(:\d+)?", "FILE:LINE", first)
    first = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", first)
    first = re.sub(r"\b(t|y|b|r|v|s|k|w|ip|im|nn|x|out|a|g|idx|perm)N\b", r"\1#", first)
    return f"{status}: {first[:160]}"


def reproducer(rec, prog, command):
    """Text of a reproducer file: symptom per backend, the command, source and schedule."""
    parts = [f"# fuzz seed {rec['seed']}", "", f"re-run: {command}", "",
             f"features: {', '.join(prog.features)}; grid {prog.dim!r}", ""]
    for backend, r in rec["results"].items():
        if r["status"] != "ok":
            parts += [f"## {backend}: {r['status']}", "", "```", r["detail"].rstrip(), "```", ""]
    seeds = f" and of {', '.join(prog.read_seeds)} (only read)" if prog.read_seeds else ""
    parts += ["## program", "", "```python", prog.source().rstrip(), "", "", "# schedule (recorded "
              f"on one ad.Tape; loss = sum(w * final value) of every written array{seeds})",
              *prog.schedule(), "```", ""]
    return "\n".join(parts)


def write_reproducer(folder, rec, profile, backends):
    os.makedirs(folder, exist_ok=True)
    prog = gen_program(rec["seed"], profile)
    cmd = (f"python -m benchmarks.fuzz --seed {rec['seed']} --count 1 "
           f"--backends {','.join(backends)} --big {profile.big} --vectors {profile.vectors} "
           f"--stores {profile.stores}")
    if profile.extras:
        cmd += f" --extras {profile.extras}"
    if profile.losses:
        cmd += f" --losses {profile.losses}"
    path = os.path.join(folder, f"seed-{rec['seed']}.md")
    with open(path, "w") as fh:
        fh.write(reproducer(rec, prog, cmd))
    return path
