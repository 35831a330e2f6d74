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
from ..generate import TARGETS
from . import cuda
from .declare import declare
from .printer import Printer
from ..transform.ir import assign, const, name
from ..transform.reverse import comment

DECORATOR = "@rt.jit"
INLINE = "@rt.jit_inline"    # thread functions: inlined into the grid loop


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


def kernel_functions(tr, target="cpu", custom_grads=()):
    """[(name, params, body, decorator)] of the thread and grid functions of a kernel."""
    out = _kernel_functions(tr, target, custom_grads)
    return _float32_functions(out, tr.ssa.kinds) if float32_kernel(tr) else out


def _kernel_functions(tr, target, custom_grads):
    k = tr.pf.name
    params = [p.name for p in tr.pf.params]
    tids = [f"tid{d}" for d in range(tr.dims)]
    dims = [f"dim{d}" for d in range(tr.dims)]
    adj_params = tr.rev.adj_params
    if target == "cuda":
        cap = getattr(tr, "loop_capacity", 256)
        out = [(f"{k}_forward_thread", tids + params,
                cuda.lower_body(_lower(tr.rev.forward), tr, cap, custom_grads), cuda.DEVICE),
               (f"{k}_forward", dims + params,
                cuda.grid(f"{k}_forward_thread", tids, dims, params), cuda.KERNEL)]
        if tr.rev.backward is not None:
            bparams = params + adj_params + [cuda.STATUS]
            out += [(f"{k}_backward_thread", tids + bparams,
                     cuda.lower_body(_lower(tr.rev.backward), tr, cap, custom_grads), cuda.DEVICE),
                    (f"{k}_backward", dims + bparams,
                     cuda.grid(f"{k}_backward_thread", tids, dims, bparams), cuda.KERNEL)]
        return out
    out = [(f"{k}_forward_thread", tids + params,
            *_thread_body(_lower(tr.rev.forward), tids + params, tr)),
           (f"{k}_forward", dims + params,
            *_grid(f"{k}_forward_thread", tids, dims, params, tr.plans[0], backward=False))]
    if tr.rev.backward is not None:
        out += [(f"{k}_backward_thread", tids + params + adj_params,
                 *_thread_body(_lower(tr.rev.backward), tids + params + adj_params, tr)),
                (f"{k}_backward", dims + params + adj_params,
                 *_grid(f"{k}_backward_thread", tids, dims, params + adj_params, tr.plans[1],
                        backward=True))]
    return out


def float32_kernel(tr):
    """A kernel whose float parameters (arrays and scalars) are all float32: its float
    literals, adjoint variables and loop stacks are float32 too (see _Float32)."""
    dtypes = [str(p.type.dtype if p.is_array else p.type.name) for p in tr.pf.params
              if p.kind == "float"]
    return bool(dtypes) and all(d == "float32" for d in dtypes)


_INT_MATH = {"floor", "ceil"}     # math functions numba returns as int64


class _Float32(gast.NodeTransformer):
    """Spell a float32 kernel's numbers so that numba keeps its arithmetic in float32.

    To numba a bare ``0.5`` is a float64, an int an int64, and either widens a
    float32 it meets to float64. So: float literals become ``rt.float32(c)``
    (numpy's float32); an int (literal, variable, ``math.floor``/``ceil`` result)
    meeting a float in ``+ - * / **``, or given to a float variable, is converted the
    same way, as C converts an int meeting a float;
    ``float(n)`` becomes ``rt.float32(n)``; float loop stacks hold float32. ``kinds`` are the SSA kinds (bool/int/float)."""

    def __init__(self, kinds):
        self.kinds = kinds

    def is_float(self, node):
        if isinstance(node, gast.Constant):
            return isinstance(node.value, float)
        if isinstance(node, gast.Name):
            return node.id.startswith("adj_") or self.kinds.get(node.id) == "float"
        if isinstance(node, gast.Subscript):
            return self.is_float(node.value)
        if isinstance(node, gast.BinOp):
            return isinstance(node.op, gast.Div) or self.is_float(node.left) or \
                self.is_float(node.right)
        if isinstance(node, gast.UnaryOp):
            return self.is_float(node.operand)
        if isinstance(node, gast.IfExp):
            return self.is_float(node.body) or self.is_float(node.orelse)
        if isinstance(node, gast.Call):
            f = node.func
            if isinstance(f, gast.Attribute) and isinstance(f.value, gast.Name):
                if f.value.id == "rt" and f.attr == "float32":
                    return True
                if f.value.id == "math":
                    return f.attr not in _INT_MATH
            return any(self.is_float(a) for a in node.args)
        return False

    def is_int(self, node):
        if isinstance(node, gast.Constant):
            return type(node.value) is int
        if isinstance(node, gast.Name):
            return self.kinds.get(node.id) == "int"
        if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
            return self.is_int(node.operand)
        if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and \
                isinstance(node.func.value, gast.Name) and node.func.value.id == "math":
            return node.func.attr in _INT_MATH
        return False

    def visit_Constant(self, node):
        if isinstance(node.value, float):
            return _rt_call("float32", node)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, (gast.Add, gast.Sub, gast.Mult, gast.Div, gast.Pow)):
            if self.is_float(node.left) and self.is_int(node.right):
                node.right = _rt_call("float32", node.right)
            elif self.is_float(node.right) and self.is_int(node.left):
                node.left = _rt_call("float32", node.left)
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        t = node.targets[0]
        if isinstance(t, gast.Name) and self.kinds.get(t.id) == "float" and \
                (self.is_int(node.value) or (isinstance(node.value, gast.Name) and
                                             self.kinds.get(node.value.id) == "int")):
            node.value = _rt_call("float32", node.value)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, gast.Name) and f.id == "float" and len(node.args) == 1:
            node.func = _rt_attr("float32")                # float(n) in a float32 kernel
        if isinstance(f, gast.Attribute) and isinstance(f.value, gast.Name) and \
                f.value.id == "rt" and f.attr == "stack_new_float":
            f.attr = "stack_new_float32"
        if isinstance(f, gast.Attribute) and f.attr == "array" and \
                isinstance(f.value, gast.Attribute) and f.value.attr == "local" and \
                len(node.args) == 2 and isinstance(node.args[1], gast.Name) and \
                node.args[1].id == "float64":
            node.args[1] = name("float32")                 # cuda.local.array(n, float32)
        return node


class _Calls(gast.NodeTransformer):
    """Collect (or, with ``suffix``, rename) calls of ``<func>_forward/_adjoint``."""

    def __init__(self, funcs, suffix=None):
        self.funcs, self.suffix, self.found = funcs, suffix, set()

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, gast.Name):
            for part in ("_forward", "_adjoint"):
                base = f.id[:-len(part)]
                if f.id.endswith(part) and base in self.funcs:
                    self.found.add(base)
                    if self.suffix:
                        node.func = name(f.id + self.suffix)
        return node


def _called(fns, funcs):
    c = _Calls(funcs)
    for _fname, _params, body, *_ in fns:
        for st in body:
            c.visit(st)
    return c.found


def _float32_funcs(built):
    """Funcs that float32 kernels call, directly or through other funcs: each gets a
    float32 variant (funcs are shared by kernels of either precision)."""
    funcs = {tr.pf.name for role, tr, _ in built if role == "func"}
    calls = {tr.pf.name: _called(fns, funcs) for _, tr, fns in built}
    todo = [f for role, tr, fns in built if role == "kernel" and float32_kernel(tr)
            for f in calls[tr.pf.name]]
    need = set()
    while todo:
        f = todo.pop()
        if f not in need:
            need.add(f)
            todo += calls.get(f, ())
    return need


def _call_float32(fns, f32_funcs):
    """``fns`` calling the float32 variants of the funcs in ``f32_funcs``."""
    out = []
    for fname, params, body, *rest in fns:
        body = [_Calls(f32_funcs, "_f32").visit(copy.deepcopy(st)) for st in body]
        out.append((fname, params, body, *rest))
    return out


def _float32_variant(fns, tr, f32_funcs, custom_grad):
    """A func's ``<name>_forward_f32``/``_adjoint_f32``: its functions with float32
    numbers, for float32 kernels. A custom gradient is the user's code, whose kinds
    the transformer does not know: only its literals change."""
    out = []
    for fname, params, body, *rest in _call_float32(fns, f32_funcs):
        kinds = {} if custom_grad and fname.endswith("_adjoint") else tr.ssa.kinds
        out.append((fname + "_f32", params, [_Float32(kinds).visit(st) for st in body], *rest))
    return out


def _float32_functions(fns, kinds):
    return [(fname, params, [_Float32(kinds).visit(st) for st in body], *rest)
            for fname, params, body, *rest in fns]


def _thread_body(body, params, tr):
    """(body, decorator) of a CPU thread function: inlined into the grid loop when every
    local can be made definitely assigned (see emit/declare.py), else called."""
    decls, ok = declare(body, params, tr)
    if not ok:
        return body, DECORATOR
    return decls + body, INLINE


def _rt_attr(attr):
    return gast.Attribute(value=name("rt"), attr=attr, ctx=gast.Load())


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
    serial_loops = [(t, gast.Call(func=name("range"), args=[name(d)], keywords=[]))
                    for t, d in zip(tids, dims)]
    if plan.mode != "serial":
        size = name(dims[0])
        for d in dims[1:]:
            size = gast.BinOp(left=size, op=gast.Mult(), right=name(d))
        small = gast.If(test=gast.Compare(left=size, ops=[gast.Lt()],
                                          comparators=[_rt_attr("PARALLEL_MIN_THREADS")]),
                        body=_nest(serial_loops, thread_fn, call_args) + [gast.Return(value=None)],
                        orelse=[])
        small_note = comment("a small launch runs serially: starting threads would cost more")
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
        return [small_note, small, note] + _nest(loops, thread_fn, call_args), "@rt.jit_grid"
    if plan.mode == "color":
        return [small_note, small] + _colored(thread_fn, tids, dims, call_args, plan, fresh), \
            "@rt.jit_grid"
    n_chunks, chunk = fresh("n_chunks"), fresh("chunk")
    copies = {a: fresh(f"{a}_chunks") for a in plan.private}
    what = ", ".join(repr(a) for a in plan.private)
    body = [small_note, small,
            comment(f"{what} may be accumulated by several threads: each chunk of threads adds "
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


def _colored(thread_fn, tids, dims, call_args, plan, fresh):
    """Two parallel phases over blocks of rows (see transform/parallel.py, mode color)."""
    n_blocks, phase, pair, block = fresh("n_blocks"), fresh("phase"), fresh("pair"), fresh("block")
    what = ", ".join(repr(a) for a in plan.private)
    note = comment(f"{what} may be updated by several threads, but only at rows within "
                   f"{plan.radius} of the thread's own: rows are split into blocks at least "
                   f"{2 * plan.radius} high; even blocks run in parallel, then odd blocks (no races)")
    count = assign(n_blocks, _rt_call("block_count", name(dims[0]), const(plan.radius)), None)
    first = gast.BinOp(left=gast.BinOp(left=const(2), op=gast.Mult(), right=name(pair)),
                       op=gast.Add(), right=name(phase))
    pairs = gast.BinOp(left=gast.BinOp(left=name(n_blocks), op=gast.Add(),
                                       right=gast.BinOp(left=const(1), op=gast.Sub(),
                                                        right=name(phase))),
                       op=gast.FloorDiv(), right=const(2))
    start = _rt_call("chunk_start", name(dims[0]), name(n_blocks), name(block))
    stop = _rt_call("chunk_start", name(dims[0]), name(n_blocks),
                    gast.BinOp(left=name(block), op=gast.Add(), right=const(1)))
    rows = [(tids[0], gast.Call(func=name("range"), args=[start, stop], keywords=[]))] + [
        (t, gast.Call(func=name("range"), args=[name(d)], keywords=[]))
        for t, d in zip(tids[1:], dims[1:])]
    inner = [assign(block, first, None)] + _nest(rows, thread_fn, call_args)
    pair_loop = gast.For(target=name(pair, store=True), iter=_rt_call("prange", pairs), body=inner,
                         orelse=[], type_comment=None)
    phase_loop = gast.For(target=name(phase, store=True),
                          iter=gast.Call(func=name("range"), args=[const(2)], keywords=[]),
                          body=[pair_loop], orelse=[], type_comment=None)
    return [note, count, phase_loop]


def _nest(loops, thread_fn, call_args):
    body = [gast.Expr(value=gast.Call(func=name(thread_fn), args=call_args, keywords=[]))]
    for target, it in reversed(loops):
        body = [gast.For(target=name(target, store=True), iter=it, body=body, orelse=[],
                         type_comment=None)]
    return body


def func_functions(tr, custom_grad=None, target="cpu", custom_grads=()):
    f = tr.pf.name
    params = [p.name for p in tr.pf.params]
    deco = cuda.DEVICE if target == "cuda" else DECORATOR

    def lower(body):
        body = _lower(body)
        return cuda.lower_body(body, tr, 256, custom_grads) if target == "cuda" else body
    out = [(f"{f}_forward", params, lower(tr.rev.forward), deco)]
    if custom_grad is not None:
        gpf = custom_grad
        gparams = [a.id for a in gpf.node.args.args]
        out.append((f"{f}_adjoint", gparams, _lower(gpf.node.body), deco, gpf.source))
    else:
        status = [cuda.STATUS] if target == "cuda" else []
        out.append((f"{f}_adjoint", params + tr.rev.adj_params + status, lower(tr.rev.backward),
                    deco))
    return out


def _known_target(target):
    """``target`` if it is one adjoint can emit, else a ValueError naming the choices."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    return target


def function_sources(tr, stage, target="cpu"):
    """The forward or backward functions of one kernel/func as source, spelled for
    ``target`` (decorators are left out, as in ``ad.source``)."""
    custom = {f.name for f in tr.pf.funcs if f.custom_grad is not None}
    if tr.pf.role == "kernel":
        fns = kernel_functions(tr, _known_target(target), custom)
        picked = [f for f in fns if ("_forward" in f[0]) == (stage == "forward")]
    else:
        fns = func_functions(tr, None, _known_target(target), custom)
        picked = [fns[0]] if stage == "forward" else [fns[1]]
    p = Printer(tr.pf.source)
    for i, (fname, params, body, _deco, *src) in enumerate(picked):
        if i:
            p.emit(0, "")
        p.source = src[0] if src else tr.pf.source
        p.last_line = None
        p.function(fname, params, body)
    return p.text()


def _writes_status(fns, kernel):
    """Whether a CUDA backward can report a loop overflow (it has loop stacks, or calls
    a func adjoint that may): only then does its launcher read the status back."""
    for fname, _params, body, *_ in fns:
        if fname == f"{kernel}_backward_thread":
            return any(isinstance(n, gast.Name) and n.id == cuda.STATUS
                       for st in body for n in gast.walk(st))
    return False


def _spec_lines(kind, tr, relname, target="cpu", check_status=True):
    n = tr.pf.name
    if kind == "func":
        return [f"{n} = adjoint.runtime.FuncSpec(",
                f"    name={n!r},",
                f"    forward={n}_forward,",
                f"    adjoint={n}_adjoint,",
                f"    n_params={len(tr.pf.params)},",
                f"    n_returns={len(tr.return_kinds)},",
                ")"]
    params = []
    for p in tr.pf.params:
        if p.is_array:
            params.append(f"        adjoint.runtime.ParamSpec({p.name!r}, {p.type.dtype.name!r}, "
                          f"{p.type.ndim}),")
        else:
            params.append(f"        adjoint.runtime.ParamSpec({p.name!r}, {p.type.name!r}, 0),")
    forward, backward = f"{n}_forward", f"{n}_backward" if tr.rev.backward is not None else None
    if target == "cuda":
        forward = f"rt.launcher({n}_forward, {tr.dims})"
        if backward is not None:
            backward = f"rt.launcher({n}_backward, {tr.dims}, status=True" + \
                ("" if check_status else ", check=False") + ")"
            if tr.plans[1].mode == "serial":
                backward = f"rt.refused({tr.plans[1].reason!r})"
    lines = [f"{n} = adjoint.runtime.KernelSpec(",
             f"    name={n!r},",
             "    params=(", *params, "    ),",
             f"    dims={tr.dims},",
             f"    reads={tuple(sorted(tr.reads))!r},",
             f"    writes={tuple(sorted(tr.writes))!r},",
             f"    forward={forward},",
             f"    backward={backward},",
             f"    origin={relname + ':' + str(tr.pf.node.lineno)!r},"]
    if target != "cpu":
        lines.append(f"    target={target!r},")
    lines.append(")")
    return lines


def _target_line(target):
    """The header line naming a non-CPU target; CPU modules have none (and so keep the
    header they had before there were targets)."""
    return [] if target == "cpu" else [f"# adjoint-target: {target}"]


def _header(target, float32):
    if target == "cuda":
        return cuda.header(float32)
    return ["import math", "", "import adjoint.runtime", "",
            "rt = adjoint.runtime.backend()  # numba.njit, or plain Python under ADJOINT_JIT=0"]


def module_source(items, relname, source_text, target="cpu"):
    """Text of a module for ``items``: [(role, Transformed, custom_grad_pf or None)],
    for ``target`` "cpu" (``rt.jit``) or "cuda" (``cuda.jit``).

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
    ] + _target_line(_known_target(target)) + _header(
        target, any(role == "kernel" and float32_kernel(tr) for role, tr, _ in items))
    specs = []
    custom = {tr.pf.name for role, tr, grad in items if grad is not None}
    built = [(role, tr, kernel_functions(tr, target, custom) if role == "kernel" else
              func_functions(tr, grad, target, custom)) for role, tr, grad in items]
    f32_funcs = _float32_funcs(built)
    for role, tr, fns in built:
        if role == "kernel" and float32_kernel(tr):
            fns = _call_float32(fns, f32_funcs)
        elif role == "func" and tr.pf.name in f32_funcs:
            fns = fns + _float32_variant(fns, tr, f32_funcs, tr.pf.name in custom)
        for fname, params, body, decorator, *src in fns:
            p.lines += ["", ""]
            p.source = src[0] if src else tr.pf.source
            p.last_line = None
            p.function(fname, params, body, decorator=decorator)
        specs += _spec_lines(role, tr, relname, target, _writes_status(fns, tr.pf.name))
    p.lines += [""]
    for line in specs:
        p.lines += [""] if line.startswith(tuple(f"{tr.pf.name} =" for _, tr, _ in items)) else []
        p.emit(0, line)
    return p.text()
