"""Shrink a failing program while it keeps failing the same way (greedy delta debugging).

Candidates, tried until none helps: drop a step of the schedule (and kernels no
longer launched), drop a func nobody calls, drop one statement anywhere in a
kernel or func (``pass`` fills an emptied block), replace an ``if``/``for``/
``while`` by its body. A candidate counts when the reference still runs it
(it is still a valid program) and the backend fails with the same ``kind`` (a level
mismatch, levels.py, counts as one kind: the program's optimized and unoptimized runs
still disagree).
For a ``-ckpt`` backend the checkpointed segment is pinned (``Program.segment``) and
moves with the steps dropped before it.
"""
import ast
import copy
import dataclasses
import itertools
import math
import tempfile

from . import ckpt
from .check import finite_differences
from .driver import Modules, judge, signature

_names = itertools.count()


def kind(outcome):
    """The part of a failure a smaller program must reproduce."""
    first = outcome.detail.strip().splitlines()[0] if outcome.detail.strip() else ""
    if outcome.status == "mismatch":
        return "mismatch", first.split(" of ")[0].split(" (")[0]
    if outcome.status == "refusal":
        return "refusal", first.split(": ", 2)[-1][:60]
    if outcome.status == "levels":
        return ("levels",)
    # an internal error: its first line with numbers, generated names and paths blanked
    # (the exception's type alone let a TypeError shrink into another TypeError)
    return outcome.status, signature(outcome.status, first)


def attempt(prog, backend, folder, diagnose=False):
    """The outcome of ``prog`` on ``backend``, or None when it is no valid program.
    ``diagnose``: where its optimization levels disagree, each pass is turned off alone."""
    try:
        ref = finite_differences(prog, entries=2)
    except Exception:  # noqa: BLE001 - the candidate broke the program
        return None
    named = dataclasses.replace(prog, seed=prog.seed * 1000 + next(_names))  # a fresh file name
    modules = Modules(named, folder)
    # (checked under its own seed: -funcs draws its points, -hvp its data from the seed;
    # the optimization levels compared, a failing pass not looked for on every candidate)
    try:
        return judge(prog, ref, backend, modules, diagnose=diagnose)[0]
    except Exception:  # noqa: BLE001 - the candidate does not import
        return None


# --------------------------------------------------------------------------- candidates

def _statement_slots(tree):
    """(list, index) of every statement inside a function body, deepest last."""
    slots = []
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and not isinstance(node, ast.Module):
                slots += [(stmts, k) for k in range(len(stmts))]
    return slots


def _variants(source):
    """Sources with one statement dropped or one compound statement unwrapped."""
    tree = ast.parse(source)
    same = ast.unparse(tree) + "\n"
    n = len(_statement_slots(tree))
    for k in reversed(range(n)):
        for unwrap in (False, True):
            t = copy.deepcopy(tree)
            stmts, idx = _statement_slots(t)[k]
            node = stmts[idx]
            if unwrap:
                if not isinstance(node, (ast.If, ast.For, ast.While)):
                    continue
                stmts[idx:idx + 1] = node.body
            else:
                del stmts[idx]
                if not stmts:
                    stmts.append(ast.Pass())
            text = ast.unparse(t) + "\n"
            if text != same:
                yield text


def _regrid(prog, grid):
    """The same program on a smaller grid (accumulator scales are left as they are)."""
    arrays = {}
    for n, a in prog.arrays.items():
        shape = grid if a.shape == prog.grid else (grid[0],) if a.kind == "perm" else \
            grid + (3,) if a.dtype and a.shape[:-1] == prog.grid else a.shape
        arrays[n] = dataclasses.replace(a, shape=shape)
    return dataclasses.replace(prog, grid=grid, arrays=arrays)


def _with_source(prog, which, k, text):
    if which == "func":
        funcs = list(prog.funcs)
        funcs[k] = text
        return dataclasses.replace(prog, funcs=funcs)
    kernels = list(prog.kernels)
    kernels[k] = dataclasses.replace(kernels[k], source=text)
    return dataclasses.replace(prog, kernels=kernels)


def candidates(prog):
    if prog.threads > 64:
        small = (9,) if len(prog.grid) == 1 else (5, 4)
        for g in ([small, (2 * small[0],)] if len(small) == 1 else [small, (12, 10)]):
            if math.prod(g) < prog.threads:
                yield _regrid(prog, g)
    for k in reversed(range(len(prog.steps))):
        steps = prog.steps[:k] + prog.steps[k + 1:]
        used = {s.kernel for s in steps if s.op == "launch"}
        segment = prog.segment and tuple(end - (k < end) for end in prog.segment)
        if used:
            yield dataclasses.replace(prog, steps=steps, segment=segment,
                                      kernels=[kd for kd in prog.kernels if kd.name in used])
    for k in reversed(range(len(prog.funcs))):
        yield dataclasses.replace(prog, funcs=prog.funcs[:k] + prog.funcs[k + 1:])
    for which, sources in (("kernel", [kd.source for kd in prog.kernels]), ("func", prog.funcs)):
        for k, src in enumerate(sources):
            for text in _variants(src):
                yield _with_source(prog, which, k, text)


def minimize(prog, backend, log=print, max_tries=2000):
    """A smaller program failing like ``prog`` on ``backend``, and its outcome. After a
    candidate succeeds the search goes on from the same position in the new program's
    candidate list, and passes repeat until one changes nothing."""
    if ckpt.split(backend):
        prog = dataclasses.replace(prog, segment=ckpt.segment(prog))
    with tempfile.TemporaryDirectory() as folder:
        first = attempt(prog, backend, folder)
        if first is None or first.status == "ok":
            return prog, first
        want = kind(first)
        tries, improved = 0, True
        while improved and tries < max_tries:
            improved, pos = False, 0
            cands = list(candidates(prog))
            while pos < len(cands) and tries < max_tries:
                tries += 1
                out = attempt(cands[pos], backend, folder)
                if out is not None and kind(out) == want:
                    prog, first, improved = cands[pos], out, True
                    log(f"  shrunk to {len(prog.source().splitlines())} lines")
                    cands = list(candidates(prog))
                else:
                    pos += 1
        if first.status == "levels" or "disagree" in first.detail:
            first = attempt(prog, backend, folder, diagnose=True) or first   # (which pass)
        return prog, first
