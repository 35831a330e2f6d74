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

import adjoint as ad
from adjoint.emit import module as emit_module
from adjoint.frontend.fence import fence
from adjoint.frontend.parse import parse, transforming
from adjoint.transform import (activity, bounds, hazards, ir, jvp, normalize, parallel, reverse,
                               ssa, store, types)
from adjoint.transform.ir import walk_stmts

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


def _undeclared(trees):
    """``(node type, attribute)`` for every attribute a node carries that its class does
    not declare (``_fields``, ``_attributes``), in the statements of ``trees`` and the
    blocks of their loop records."""
    out = set()
    todo = [t for tree in trees for t in (tree if isinstance(tree, list) else [tree])]
    while todo:
        node = todo.pop()
        for n in gast.walk(node):
            declared = set(n._fields) | set(getattr(n, "_attributes", ()))
            # (a call's Callee record: what it calls, resolved by parse)
            out |= {(type(n).__name__, a) for a in vars(n) if a not in declared | {"callee"}}
            info = getattr(n, "loop", None)
            if info is not None:
                todo += info.cond + info.latch
    return out


@pytest.mark.parametrize("name, role", [("loops", "kernel"), ("damp", "func")])
def test_node_facts_are_declared_fields(kernel_module, name, role):
    """Loop records, merge copies and every other fact a pass knows of a node are declared
    fields of its class (``For.loop``) or tables of the pass (``SSA.phis``), never
    attributes set on a node afterwards."""
    fn = getattr(kernel_module(SOURCE), name)
    tr = fn.transformed
    trees = {"normalize": tr.norm.body, "ssa": tr.ssa.body, "forward": tr.rev.forward,
             "backward": tr.rev.backward, "jvp": tr.tangent.body}
    if tr.saved is not None:
        trees.update(forward_save=tr.saved.forward, backward_saved=tr.saved.backward)
    for what, tree in trees.items():
        assert _undeclared([tree]) == set(), f"{what}: undeclared node attributes"
    loops = [s for s in walk_stmts(tr.ssa.body) if isinstance(s, (gast.For, gast.While))]
    assert loops and all(isinstance(s, (ir.For, ir.While)) and "loop" in s._fields
                         for s in loops)
    assert tr.ssa.phis          # the loops' headers


def test_float32_is_a_printing_decision(kernel_module):
    """A float32 kernel's conversions are IR nodes (``Float32``) that emit/ieee.py prints
    as ``rt.float32(...)``; the float32 pass reads what a call returns from its Callee,
    never from a printed ``rt.<name>``."""
    m = kernel_module('''
        @ad.kernel
        def k32(n: int, x: ad.array(dtype=ad.float32), y: ad.array(dtype=ad.float32)):
            i = ad.tid()
            s = x[i] * 0.5
            for j in range(n):
                s = s * x[i] + math.floor(s) * j + float(n)
            y[i] = s
    ''')
    tr = m.k32.transformed
    fns = emit_module.kernel_functions(tr, "cpu", ())
    bodies = [s for _, _, body, *_ in fns for s in body]
    nodes = [n for s in bodies for n in gast.walk(s)]
    assert any(isinstance(n, ir.Float32) for n in nodes)
    printed = [n for n in nodes if isinstance(n, gast.Attribute) and n.attr == "float32"]
    assert printed == [], "the float32 pass printed rt.float32 itself"
    text = ad.source(m.k32, "backward")
    assert "rt.float32(0.5)" in text and "rt.float32(n)" in text
    assert "rt.float32(rt.floor(" in text or "rt.float32(t" in text
