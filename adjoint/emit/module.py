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
from ..transform.ir import name

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
    """[(name, params, body)] of the thread and grid functions of a kernel."""
    k = tr.pf.name
    params = [p.name for p in tr.pf.params]
    tids = [f"tid{d}" for d in range(tr.dims)]
    dims = [f"dim{d}" for d in range(tr.dims)]
    out = [(f"{k}_forward_thread", tids + params, _lower(tr.rev.forward)),
           (f"{k}_backward_thread", tids + params + tr.rev.adj_params, _lower(tr.rev.backward))]
    out.insert(1, (f"{k}_forward", dims + params,
                   _grid(f"{k}_forward_thread", tids, dims, params)))
    out.append((f"{k}_backward", dims + params + tr.rev.adj_params,
                _grid(f"{k}_backward_thread", tids, dims, params + tr.rev.adj_params)))
    return out


def _grid(thread_fn, tids, dims, args):
    call = gast.Expr(value=gast.Call(func=name(thread_fn), args=[name(a) for a in tids + args],
                                     keywords=[]))
    body = [call]
    for t, d in reversed(list(zip(tids, dims))):
        rng = gast.Call(func=name("range"), args=[name(d)], keywords=[])
        body = [gast.For(target=name(t, store=True), iter=rng, body=body, orelse=[],
                         type_comment=None)]
    return body


def func_functions(tr, custom_grad=None):
    f = tr.pf.name
    params = [p.name for p in tr.pf.params]
    out = [(f"{f}_forward", params, _lower(tr.rev.forward))]
    if custom_grad is not None:
        gpf = custom_grad
        gparams = [a.id for a in gpf.node.args.args]
        out.append((f"{f}_adjoint", gparams, _lower(gpf.node.body), gpf.source))
    else:
        out.append((f"{f}_adjoint", params + tr.rev.adj_params, _lower(tr.rev.backward)))
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
    for i, (fname, params, body, *src) in enumerate(picked):
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
             f"    backward={n}_backward,",
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
        for fname, params, body, *src in fns:
            p.lines += ["", ""]
            p.source = src[0] if src else tr.pf.source
            p.last_line = None
            p.function(fname, params, body, decorator=DECORATOR)
        specs += _spec_lines(role, tr, relname)
    p.lines += ["", ""] + specs
    return p.text()
