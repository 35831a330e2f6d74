"""Every pass returns a new tree and leaves its input as it was.

Each pass of the pipeline's list (adjoint/build/passes.py), optimizations on and off, is run
in its order on kernels and a func with loops (``for``, ``while``, ``break``, a loop over a
vector's components),
branches, a func call and a stored loop; every tree a pass makes is dumped and
compared after each later pass (and after emit), so a pass that renames, rewrites or
annotates a tree it was given fails here. Generated
modules being byte-identical across runs depends on it: a cached tree edited by one
caller would change what the next one sees.
"""
import gast
import pytest


import adjoint as ad
from adjoint.build import calls, passes, pipeline
from adjoint.emit import module as emit_module
from adjoint.frontend.parse import transforming
from adjoint.derive import ir
from adjoint.derive.ir import walk_stmts

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
    w = ad.vec3(e, p, 1.0)
    for c in range(3):
        w[c] = w[c] * w[2 - c]
    out[i] = e * e + w[0]
'''


def _dump(tree):
    return [gast.dump(s) for s in (tree if isinstance(tree, list) else [tree])]


def _trees(value):
    """The trees (statement lists, nodes) inside a field a pass made."""
    if isinstance(value, gast.AST):
        return [value]
    if isinstance(value, list):
        return [value] if value and isinstance(value[0], gast.AST) else []
    if hasattr(value, "__dataclass_fields__") or hasattr(value, "__dict__"):
        return [t for v in vars(value).values() if not callable(v) for t in _trees(v)]
    return []


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "unoptimized"])
@pytest.mark.parametrize("name, role", [("loops", "kernel"), ("damp", "func")])
def test_no_pass_edits_its_input(kernel_module, name, role, optimize):
    """Each pass of ``passes.PASSES`` (in the list's order, as pipeline.transform runs
    them) leaves every tree an earlier pass made as it was."""
    fn = getattr(kernel_module(SOURCE), name)
    enabled = passes.ALL if optimize else passes.NONE
    st = pipeline.start(fn.pyfunc, role, True, enabled)
    seen = []                       # (what, the tree, its dump when the pass made it)
    ran = []
    with transforming(fn.pyfunc):
        for p in passes.PASSES:
            if p.stage != "transform" or role not in p.roles or \
                    p.optimization and p.name not in enabled:
                continue
            made = calls.RUN[p.name](st)
            for what, tree, before in seen:
                assert [gast.dump(t) for t in _flat(tree)] == before, \
                    f"pass {p.name} edited what {what} made"
            vars(st).update(made)
            ran.append(p.name)
            for field, value in made.items():
                for tree in _trees(value):
                    seen.append((f"{p.name} ({field})", tree, [gast.dump(t) for t in _flat(tree)]))
    assert [n for n in ran if n != "unroll"][:3] == ["parse", "scalarize", "fence"]
    assert "reverse" in ran
    assert all((n in ran) == optimize for n in ("unroll", "prune", "scale")), ran
    if role == "kernel":
        # the accumulating loop is stored by pass store, which is an optimization
        assert (st.saved is not None) == optimize
    tr = fn.transformed
    for what, tree in [("forward", tr.rev.forward), ("backward", tr.rev.backward),
                       ("jvp", tr.tangent.body)]:
        seen.append((f"the transformed {what}", tree, [gast.dump(t) for t in _flat(tree)]))
    for target in ("cpu", "cuda"):
        if role == "kernel":
            emit_module.kernel_functions(tr, target, ())
        else:
            emit_module.func_functions(tr, target=target)
        for what, tree, before in seen:
            assert [gast.dump(t) for t in _flat(tree)] == before, \
                f"emit for {target} edited what {what} made"


def _flat(tree):
    return tree if isinstance(tree, list) else [tree]


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
