"""Assemble a generated module: forward/backward functions and launch specs.

Generated modules import only ``math`` and ``adjoint.runtime`` (as ``rt``),
so they run where the transformer, gast and astor are absent. The same input
always gives byte-identical text: names come from the deterministic namer,
functions are emitted in a fixed order, and no path, time or random value is
written (only the source's relative name and its content hash).
"""
import copy
import hashlib

import gast

from .. import __version__
from .printer import Printer
from ..transform.ir import assign, const, name
from ..transform.reverse import comment

DECORATOR = "@rt.jit"


class _Lower(gast.NodeTransformer):
    """Spell kernel-only pieces for a target: tid() -> tid0, f(...) -> f_forward(...)."""

    def visit_Assign(self, node):
        v = node.value
        if isinstance(v, gast.Call) and getattr(v, "callee", None) is not None and v.callee.kind == "tid":
            t = node.targets[0]
            n = len(t.elts) if isinstance(t, gast.Tuple) else 1
            tids = [name(f"tid{k}") for k in range(n)]
            node.value = tids[0] if n == 1 else gast.Tuple(elts=tids, ctx=gast.Load())
            return node
        self.generic_visit(node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        callee = getattr(node, "callee", None)
        if callee is not None and callee.kind == "func":
            node.func = name(f"{callee.name}_forward")
        return node


def _lower(stmts):
    return [_Lower().visit(copy.deepcopy(s)) for s in stmts]


def kernel_functions(tr):
    """[(name, params, body, decorator)] of the thread and grid functions of a kernel."""
    k = tr.pf.name
    params = [p.name for p in tr.pf.params]
    tids = [f"tid{d}" for d in range(tr.dims)]
    dims = [f"dim{d}" for d in range(tr.dims)]
    adj_params = tr.rev.adj_params
    out = [(f"{k}_forward_thread", tids + params, _lower(tr.rev.forward), DECORATOR),
           (f"{k}_forward", dims + params,
            *_grid(f"{k}_forward_thread", tids, dims, params, tr.plans[0], backward=False))]
    if tr.rev.backward is not None:
        out += [(f"{k}_backward_thread", tids + params + adj_params, _lower(tr.rev.backward),
                 DECORATOR),
                (f"{k}_backward", dims + params + adj_params,
                 *_grid(f"{k}_backward_thread", tids, dims, params + adj_params, tr.plans[1],
                        backward=True))]
    return out


def _rt_call(fn, *args):
    return gast.Call(func=gast.Attribute(value=name("rt"), attr=fn, ctx=gast.Load()),
                     args=list(args), keywords=[])


def _grid(thread_fn, tids, dims, args, plan, backward):
    """Body and decorator of a grid function running ``thread_fn`` for every thread."""
    taken = set(args) | set(tids) | set(dims)

    def fresh(base):
        while base in taken:
            base = "_" + base
        taken.add(base)
        return base

    call_args = [name(a) for a in tids + args]
    if plan.mode == "serial":
        note = comment(f"threads run one after another{' in reverse order' if backward else ''}: "
                       f"{plan.reason}")
        loops = []
        for t, d in zip(tids, dims):
            rng = [gast.BinOp(left=name(d), op=gast.Sub(), right=const(1)), const(-1), const(-1)] \
                if backward else [name(d)]
            loops.append((t, gast.Call(func=name("range"), args=rng, keywords=[])))
        return [note] + _nest(loops, thread_fn, call_args), DECORATOR
    if plan.mode == "parallel":
        note = comment("each thread writes only its own elements: threads run in parallel")
        loops = [(tids[0], _rt_call("prange", name(dims[0])))] + [
            (t, gast.Call(func=name("range"), args=[name(d)], keywords=[]))
            for t, d in zip(tids[1:], dims[1:])]
        return [note] + _nest(loops, thread_fn, call_args), "@rt.jit_grid"
    n_chunks, chunk = fresh("n_chunks"), fresh("chunk")
    copies = {a: fresh(f"{a}_chunks") for a in plan.private}
    what = ", ".join(repr(a) for a in plan.private)
    body = [comment(f"{what} may be accumulated by several threads: each chunk of threads adds "
                    "into its own zeroed copy, and the copies are summed at the end (no races)"),
            assign(n_chunks, _rt_call("chunk_count", name(dims[0])), None)]
    body += [assign(c, _rt_call("private_copies", name(a), name(n_chunks)), None)
             for a, c in copies.items()]
    call_args = [gast.Subscript(value=name(copies[a.id]), slice=name(chunk), ctx=gast.Load())
                 if isinstance(a, gast.Name) and a.id in copies else a for a in call_args]
    start = _rt_call("chunk_start", name(dims[0]), name(n_chunks), name(chunk))
    stop = _rt_call("chunk_start", name(dims[0]), name(n_chunks),
                    gast.BinOp(left=name(chunk), op=gast.Add(), right=const(1)))
    loops = [(chunk, _rt_call("prange", name(n_chunks))),
             (tids[0], gast.Call(func=name("range"), args=[start, stop], keywords=[]))] + [
        (t, gast.Call(func=name("range"), args=[name(d)], keywords=[]))
        for t, d in zip(tids[1:], dims[1:])]
    body += _nest(loops, thread_fn, call_args)
    body += [gast.Expr(value=_rt_call("add_chunks", name(a), name(c))) for a, c in copies.items()]
    return body, "@rt.jit_grid"


def _nest(loops, thread_fn, call_args):
    body = [gast.Expr(value=gast.Call(func=name(thread_fn), args=call_args, keywords=[]))]
    for target, it in reversed(loops):
        body = [gast.For(target=name(target, store=True), iter=it, body=body, orelse=[],
                         type_comment=None)]
    return body


def func_functions(tr, custom_grad=None):
    f = tr.pf.name
    params = [p.name for p in tr.pf.params]
    out = [(f"{f}_forward", params, _lower(tr.rev.forward), DECORATOR)]
    if custom_grad is not None:
        gpf = custom_grad
        gparams = [a.id for a in gpf.node.args.args]
        out.append((f"{f}_adjoint", gparams, _lower(gpf.node.body), DECORATOR, gpf.source))
    else:
        out.append((f"{f}_adjoint", params + tr.rev.adj_params, _lower(tr.rev.backward), DECORATOR))
    return out


def function_sources(tr, stage):
    """The forward or backward functions of one kernel/func as source."""
    if tr.pf.role == "kernel":
        fns = kernel_functions(tr)
        picked = [f for f in fns if ("_forward" in f[0]) == (stage == "forward")]
    else:
        fns = func_functions(tr)
        picked = [fns[0]] if stage == "forward" else [fns[1]]
    p = Printer(tr.pf.source)
    for i, (fname, params, body, _deco, *src) in enumerate(picked):
        if i:
            p.emit(0, "")
        p.source = src[0] if src else tr.pf.source
        p.last_line = None
        p.function(fname, params, body)
    return p.text()


def _spec_lines(kind, tr, relname):
    n = tr.pf.name
    if kind == "func":
        return [f"{n} = adjoint.runtime.FuncSpec(name={n!r}, forward={n}_forward, adjoint={n}_adjoint, "
                f"n_params={len(tr.pf.params)}, n_returns={len(tr.return_kinds)})"]
    params = []
    for p in tr.pf.params:
        if p.is_array:
            params.append(f"adjoint.runtime.ParamSpec({p.name!r}, {p.type.dtype.name!r}, {p.type.ndim})")
        else:
            params.append(f"adjoint.runtime.ParamSpec({p.name!r}, {p.type.name!r}, 0)")
    lines = [f"{n} = adjoint.runtime.KernelSpec(",
             f"    name={n!r},",
             f"    params=({', '.join(params)}{',' if len(params) == 1 else ''}),",
             f"    dims={tr.dims},",
             f"    reads={tuple(sorted(tr.reads))!r},",
             f"    writes={tuple(sorted(tr.writes))!r},",
             f"    forward={n}_forward,",
             f"    backward={n + '_backward' if tr.rev.backward is not None else None},",
             f"    origin={relname + ':' + str(tr.pf.node.lineno)!r},",
             ")"]
    return lines


def module_source(items, relname, source_text):
    """Text of a module for ``items``: [(role, Transformed, custom_grad_pf or None)].

    Funcs must come before the kernels and funcs that call them.
    """
    digest = hashlib.sha256(source_text.encode()).hexdigest()
    p = Printer()
    p.lines = [
        f'"""Forward and backward code generated by adjoint {__version__} from {relname}.',
        "",
        "Do not edit: regenerate with `adjoint generate`; `adjoint check` tells when it is stale.",
        '"""',
        f"# adjoint-version: {__version__}",
        f"# adjoint-source: {relname}",
        f"# adjoint-source-sha256: {digest}",
        "import math",
        "",
        "import adjoint.runtime",
        "",
        "rt = adjoint.runtime.backend()  # numba.njit, or plain Python under ADJOINT_JIT=0",
    ]
    specs = []
    for role, tr, grad in items:
        fns = kernel_functions(tr) if role == "kernel" else func_functions(tr, grad)
        for fname, params, body, decorator, *src in fns:
            p.lines += ["", ""]
            p.source = src[0] if src else tr.pf.source
            p.last_line = None
            p.function(fname, params, body, decorator=decorator)
        specs += _spec_lines(role, tr, relname)
    p.lines += ["", ""] + specs
    return p.text()
