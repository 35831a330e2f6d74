"""Every pass returns a new tree and leaves its input as it was.

Each pass of the pipeline is run by hand on kernels and a func with loops (``for``,
``while``, ``break``), branches, a func call and a stored loop; the input of each
pass is dumped before and compared after the pass (and after every later one), so a
pass that renames, rewrites or annotates a tree it was given fails here. Generated
modules being byte-identical across runs depends on it: a cached tree edited by one
caller would change what the next one sees.
"""
import gast
import pytest

from adjoint.emit import module as emit_module
from adjoint.frontend.fence import fence
from adjoint.frontend.parse import parse, transforming
from adjoint.transform import (activity, bounds, hazards, jvp, normalize, parallel, reverse,
                               ssa, store, types)

SOURCE = '''
@ad.func
def damp(x: float, n: int) -> float:
    s = x
    for k in range(n):
        s = ad.sin(s) * x
        if s > 2.0:
            break
    return s


@ad.kernel
def loops(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    p = x[i]
    j = 0
    while p < 10.0:
        p = p * p + 1.0
        j += 1
        if j > n:
            break
    e = 0.0
    for a in range(n):
        e += damp(x[a], a) * p
    out[i] = e * e
'''


def _dump(tree):
    return [gast.dump(s) for s in (tree if isinstance(tree, list) else [tree])]


@pytest.mark.parametrize("name, role", [("loops", "kernel"), ("damp", "func")])
def test_no_pass_edits_its_input(kernel_module, name, role):
    fn = getattr(kernel_module(SOURCE), name)
    seen = []                       # (what, the tree, its dump when the pass got it)

    def given(what, tree):
        seen.append((what, tree, _dump(tree)))

    def unchanged(after):
        for what, tree, before in seen:
            assert _dump(tree) == before, f"{after} edited the output of {what}"

    with transforming(fn.pyfunc):
        pf = fence(parse(fn.pyfunc, role))
        given("parse", pf.node)
        norm = normalize.normalize(pf)
        unchanged("normalize")
        given("normalize", norm.body)
        kinds, _ = types.infer(norm)
        s = ssa.ssa(norm, kinds)
        unchanged("ssa")
        given("ssa", s.body)
        dims, threads = parallel.grid_dims(s), parallel.thread_indices(s)
        if role == "kernel":
            hazards.check(s, dims, threads)
        act = activity.active(s)
        checked = bounds.bound(s, dims, threads, enabled=role == "kernel")
        unchanged("bounds")
        given("bounds", checked.ssa.body)
        rev = reverse.reverse(checked.ssa, act)
        tangent = jvp.jvp(checked.ssa, act)
        unchanged("reverse and jvp")
        given("reverse (forward)", rev.forward)
        given("reverse (backward)", rev.backward)
        given("jvp", tangent.body)
        saved = store.saving(checked.ssa, act, rev, dims)
        unchanged("store")
        if role == "kernel":
            assert saved is not None            # the accumulating loop is stored
            parallel.plan(s, dims, threads, {p.name for p in pf.differentiable()})
            unchanged("parallel")
    tr = fn.transformed
    for what, tree in [("forward", tr.rev.forward), ("backward", tr.rev.backward),
                       ("jvp", tr.tangent.body)]:
        given(f"the transformed {what}", tree)
    for target in ("cpu", "cuda"):
        if role == "kernel":
            emit_module.kernel_functions(tr, target, ())
        else:
            emit_module.func_functions(tr, target=target)
        unchanged(f"emit for {target}")
