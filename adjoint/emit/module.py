"""Assemble a generated module: forward/backward functions and launch specs (the specs'
lines come from emit/spec.py).

Generated modules import only ``adjoint.runtime`` (bound to ``rt``; and
``numba.cuda`` for CUDA), so they run where the transformer, gast and astor
are absent. Math functions and ``/ // % **`` are spelled as ``rt`` calls
(``rt.sin``, ``rt.div``: IEEE arithmetic on every backend, see emit/ieee.py).
The same input always gives byte-identical text: names come from the
deterministic namer, functions are emitted in a fixed order, and no path, time
or random value is written (only the source's relative name and its content
hash).
"""
import hashlib

import gast

from .. import __version__
from ..build import passes
from . import bounds, cuda, firsts, ieee, jam, precision, stacks, sums as sums_
from .grid import DECORATOR, choose, gathered, grid, small
from .declare import declare
from .precision import float32_kernel
from .spec import gather_clean, has, jvp_refusal, spec_lines
from .printer import Printer
from .targets import code as code_of
from ..optimize import once, zeroed
from ..derive.ir import Comment, copy_tree, name, number_constant, rt_call

INLINE = "@rt.jit_inline"    # thread functions: inlined into the grid loop
# CPython passes the arguments of a call with more than 30 of them as one tuple
# (CALL_FUNCTION_EX), and numba's inlining of ``inline="always"`` refuses such a call
# ("Calling a closure with *args"): a thread function with more parameters is called
MAX_INLINED_PARAMS = 30


class _Lower(gast.NodeTransformer):
    """Spell kernel-only pieces for a target: tid() -> tid0, f(...) -> f_forward(...)
    (or f_adjoint, f_jvp: its Callee's ``part``),
    a bounds check -> its test and fault report (emit/bounds.py)."""

    def visit_CheckStmt(self, node):
        return bounds.lower(node)

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
            node.func = name(f"{callee.name}_{callee.part}")
        return node


def _lower(stmts, tr):
    """``stmts`` spelled for a target; where ``tr`` (the Transformed of the kernel or func
    the transformer generated them for; None for a user's hand-written rule) enables the
    optimization pass firsts, with each adjoint's first add as its assignment
    (emit/firsts.py)."""
    out = [_Lower().visit(copy_tree(s)) for s in stmts]
    return firsts.fold(out) if tr is not None and "firsts" in tr.optimizations else out


def kernel_functions(tr, target="cpu", custom_grads=()):
    """[(name, params, body, decorator)] of the thread and grid functions of a kernel:
    forward, backward (unless disabled) and JVP (unless ``jvp_refusal`` says why not).
    A variant holding arrays constant (``tr.zero_tangents``: api.Kernel.with_zero_tangents)
    has its JVP alone: its launches run nothing else (a tape records its kernel's)."""
    out = [] if tr.zero_tangents else _kernel_functions(tr, target, custom_grads)
    if jvp_refusal(tr) is None:
        out += _jvp_functions(tr, target, custom_grads)
    return precision.float32_functions(out, precision.names_kinds(tr)) if float32_kernel(tr) \
        else out


def _jvp_functions(tr, target, custom_grads):
    """The JVP's thread and grid functions: the primal and tangent arrays in, both out."""
    params = [p.name for p in tr.pf.params] + tr.tangent.dot_params
    body = _lower(tr.tangent.body, tr)
    jparams = params + ([cuda.STATUS] if bounds.reports(body) else [])
    return _pair(tr, target, custom_grads, "jvp", body, jparams, tr.plans[2], backward=False)


def _kernel_functions(tr, target, custom_grads):
    params = [p.name for p in tr.pf.params]
    adj_params = tr.rev.adj_params
    code = code_of(target)
    # (a backward's loop may overflow a fixed-capacity stack: it always takes the status)
    stack_status = [cuda.STATUS] if code.fixed_stacks else []

    def status(body):
        return [cuda.STATUS] if bounds.reports(body) else []
    forward = _lower(tr.rev.forward, tr)
    out = _pair(tr, target, custom_grads, "forward", forward, params + status(forward),
                tr.plans[0], backward=False)
    if tr.rev.backward is None:
        return out
    # the clears of the handed adjoints run only if rt_clear (optimize/zeroed.py): on the
    # host, where the runtime may owe their zeros instead (runtime/steps.py)
    handed = tr.handed if code.host else ()
    adj_params = adj_params + ([zeroed.CLEAR_FLAG] if handed else [])

    def lower(body):
        return _lower(zeroed.optional_clears(body, handed), tr)
    backward = lower(tr.rev.backward)
    bparams = params + adj_params + (stack_status or status(backward))
    if tr.gather is not None and code.host:
        out += _gathered(tr, backward, bparams)
    else:
        out += _pair(tr, target, custom_grads, "backward", backward, bparams, tr.plans[1],
                     backward=True)
    if tr.saved is not None:
        saved = [p for p, _, _ in tr.saved.params]
        forward, backward = _lower(tr.saved.forward, tr), lower(tr.saved.backward)
        out += _pair(tr, target, custom_grads, "forward_save", forward,
                     params + saved + status(forward), tr.plans[0], backward=False)
        out += _pair(tr, target, custom_grads, "backward_saved", backward,
                     params + saved + adj_params + (stack_status or status(backward)),
                     tr.plans[1], backward=True)
    if tr.eager is not None and code.host:   # pass eager: forward and VJP in one launch
        fused = _lower(tr.eager.body, tr)
        out += _pair(tr, target, custom_grads, "forward_vjp", fused,
                     params + tr.rev.adj_params + status(fused), tr.eager.plan, backward=False)
    if tr.once is not None:         # pass once: the same backwards, storing into clean buffers
        backward = lower(tr.once.backward)
        out += _pair(tr, target, custom_grads, "backward_clean", backward,
                     params + adj_params + (stack_status or status(backward)), tr.plans[1],
                     backward=True)
        if tr.saved is not None:
            backward = lower(tr.once.backward_saved)
            out += _pair(tr, target, custom_grads, "backward_saved_clean", backward,
                         params + saved + adj_params + (stack_status or status(backward)),
                         tr.plans[1], backward=True)
    return out


def _pair(tr, target, custom_grads, part, body, params, plan, backward):
    """The thread function ``<kernel>_<part>_thread`` running ``body`` for one thread,
    and the grid function ``<kernel>_<part>`` running it for every thread by ``plan``."""
    k = tr.pf.name
    tids = [f"tid{d}" for d in range(tr.dims)]
    dims = [f"dim{d}" for d in range(tr.dims)]
    thread = f"{k}_{part}_thread"
    code = code_of(target)
    if not code.host:               # one device thread per grid point (emit/cuda.py)
        lowered = cuda.lower_body(_declared(body, tids + params, tr, target), tr,
                                  tr.loop_capacity, custom_grads, tids)
        if bounds.reports(lowered) and cuda.STATUS not in params:
            params = params + [cuda.STATUS]     # (a printed backward's stacks may overflow)
        return [(thread, tids + params, lowered, code.func_decorator),
                (f"{k}_{part}", dims + params, cuda.grid(thread, tids, dims, params),
                 code.kernel_decorator)]
    sums = []
    lanes = False
    if plan.mode == "privatize" and "sums" in tr.optimizations:   # kept in locals
        scalars = [p.name for p in tr.pf.params if not p.is_array]
        sums = sums_.find(body, plan.private, scalars, tids + dims + params)
        if sums:
            lanes = sums_.straight(body)
            body = sums_.replace(body, sums)
    tparams = tids + params + [s.local for s in sums]
    fns = [(thread, tparams, *_thread_body(body, tparams, tr))]
    pair = None if lanes else _jam_pair(tr, fns[0], plan, sums)
    if pair is not None:
        fns.append(pair)
    if plan.mode != "serial":
        fns.append((f"{k}_{part}_small", dims + params, small(thread, tids, dims, params, sums),
                    "@rt.jit_small"))
    return fns + [(f"{k}_{part}", dims + params,
                   *grid(thread, tids, dims, params, plan, backward=backward, sums=sums,
                         pair=pair and pair[0], lanes=lanes))]


def _jam_pair(tr, thread, plan, sums):
    """The function running two threads of a parallel or privatize plan's 1-D grid
    together (``<kernel>_<part>_pair``, emit/jam.py), or None where that does not apply.
    It is made from the thread function as printed (a float32 kernel's numbers spelled:
    the renamed names have no kinds of their own)."""
    fname, params, body, decorator = thread
    if plan.mode not in ("parallel", "privatize") or tr.dims != 1 or \
            "jam" not in tr.optimizations:
        return None
    if float32_kernel(tr):
        body = precision.float32_functions([(fname, params, copy_tree(body))],
                                           precision.names_kinds(tr))[0][2]
    scalars = [p.name for p in tr.pf.params if not p.is_array]
    made = jam.paired(body, params[0], params, scalars, plan.private, [s.local for s in sums])
    if made is None:
        return None
    return (fname[:-len("_thread")] + "_pair", made[0], made[1], DECORATOR)


def _gathered(tr, body, params):
    """A backward that pass gather rewrote (optimize/gather.py): the thread function and
    the serial loop of small launches, as ``_pair`` makes them; a receiver thread function
    per gathered array (``<kernel>_backward_gather_<array>_thread``), the rest
    (``<kernel>_backward_rest_thread``), the grid function running them
    (``<kernel>_backward_gathered``), the plan's (``<kernel>_backward_planned``), and
    ``<kernel>_backward``, plain Python, choosing one by the launch's shape."""
    k = tr.pf.name
    tids = [f"tid{d}" for d in range(tr.dims)]
    dims = [f"dim{d}" for d in range(tr.dims)]
    fns = _pair(tr, "cpu", (), "backward", body, params, tr.plans[1], backward=True)
    planned = fns[-1]
    fns = fns[:-1]
    adding, storing = [], []
    for r in tr.gather.receivers:
        fname = f"{k}_backward_gather_{r.array[len('adj_'):]}_thread"
        rparams = r.elements + dims + params
        fns.append((fname, rparams, *_thread_body(_lower(r.body, tr), rparams, tr)))
        adding.append((fname, r.array, r.elements, [dims[d] for d in r.dims],
                       _lower(r.requires, tr)))
        if gather_clean(tr):        # the receiver storing its sum into a clean gradient
            sname = f"{k}_backward_gather_{r.array[len('adj_'):]}_clean_thread"
            fns.append((sname, rparams,
                        *_thread_body(_lower(once.storing(r.body, [r.array]), tr), rparams, tr)))
            storing.append((sname, *adding[-1][1:]))
    rest = None
    if any(not isinstance(s, Comment) for s in tr.gather.rest):
        rest = f"{k}_backward_rest_thread"
        fns.append((rest, tids + params, *_thread_body(_lower(tr.gather.rest, tr), tids + params,
                                                      tr)))
    planned_fn = f"{k}_backward_planned"
    fns.append((planned_fn, dims + params, planned[2], planned[3]))
    # each variant: its gathered grid, and the plain Python choosing it or the plan's grid
    for part, receivers, with_rest in (("backward", adding, True),
                                       ("backward_clean", storing, True),
                                       ("backward_norest", adding, False),
                                       ("backward_norest_clean", storing, False)):
        if not receivers or not with_rest and not tr.rest_clears:
            continue
        fn = f"{k}_{part}_gathered" if part != "backward" else f"{k}_backward_gathered"
        fns += [(fn, dims + params,
                 gathered(receivers, rest if with_rest else None, tids, dims, params),
                 "@rt.jit_grid"),
                (f"{k}_{part}", dims + params,
                 choose(receivers, fn, planned_fn, dims, params,
                        zero_first=receivers is storing), None)]
        if part != "backward" and has(fns, f"{k}_backward_small"):
            # a small launch runs the backward's serial loop, which adds: into the
            # receivers' gradients, which may owe their zeros, after writing them
            zeros = [gast.Expr(value=rt_call("zero_fill", name(r[1])))
                     for r in receivers if receivers is storing]
            fns.append((f"{k}_{part}_small", dims + params, zeros + [gast.Expr(
                value=gast.Call(func=name(f"{k}_backward_small"),
                                args=[name(a) for a in dims + params], keywords=[]))],
                        None))
    return fns


def _declared(body, names, tr, target):
    """``body`` with its maybe-unassigned locals declared first (emit/declare.py), where
    their kinds are known: numba must see a value on every path, also when it prunes a
    branch whose test it can fold (``if 1 > 0``)."""
    decls, ok = declare(body, names, tr, with_stacks=not code_of(target).fixed_stacks)
    return decls + body if ok else body


def _thread_body(body, params, tr):
    """(body, decorator) of a CPU thread function: inlined into the grid loop when every
    local can be made definitely assigned (see emit/declare.py) and it has at most
    ``MAX_INLINED_PARAMS`` parameters, else called."""
    decls, ok = declare(body, params, tr)
    if not ok:
        return body, DECORATOR
    return decls + body, INLINE if len(params) <= MAX_INLINED_PARAMS else DECORATOR


def with_defaults(pf, params):
    """``params`` as a func's forward lists them for the CPU: ``b=2.0`` where the user's
    parameter defaults to a number (frontend/fence.py), so that the func a generated
    module exports is called from Python as the user's is (calls in generated code
    pass every argument)."""
    node = pf.node.args
    given = {a.id: number_constant(d) for a, d in
             zip(node.args[len(node.args) - len(node.defaults):], node.defaults)}
    return [f"{p}={given[p]!r}" if given.get(p) is not None else p for p in params]


def func_functions(tr, custom_grad=None, target="cpu", custom_grads=(), custom_jvp=None):
    """A func's ``_forward``, ``_adjoint`` and ``_jvp`` functions: the user's where given
    (``@ad.func_grad``, ``@ad.func_jvp``); no JVP for a custom gradient without a custom
    JVP, or where ``jvp_refusal`` says why not."""
    f = tr.pf.name
    params = [p.name for p in tr.pf.params]
    code = code_of(target)
    deco = code.func_decorator

    def lower(body, names):
        body = _declared(_lower(body, tr), names, tr, target)
        return body if code.host else cuda.lower_body(body, tr, 256, custom_grads)

    def pushing(names):
        """A CUDA func that holds loop stacks (a printed backward) reports an overflow."""
        return [cuda.STATUS] if code.fixed_stacks and cuda.holds_pushes(tr) else []
    shown = with_defaults(tr.pf, params) if code.host else params
    out = [(f"{f}_forward", shown + pushing(params), lower(tr.rev.forward, params), deco)]
    if custom_grad is not None:
        gpf = custom_grad
        gparams = [a.id for a in gpf.node.args.args]
        gbody = _lower(gpf.node.body, None)
        if not code.host:           # its adj_arr[i] += v: atomic, as every colliding one
            gbody = cuda.lower_body(gbody, tr, 256, custom_grads)
        out.append((f"{f}_adjoint", gparams, gbody, deco, gpf.source))
    elif tr.rev.backward is not None:       # (none for a printed backward: holds_stacks)
        status = [cuda.STATUS] if code.fixed_stacks else []
        out.append((f"{f}_adjoint", params + tr.rev.adj_params + status,
                    lower(tr.rev.backward, params + tr.rev.adj_params), deco))
    if custom_jvp is not None:
        jparams = [a.id for a in custom_jvp.node.args.args]
        out.append((f"{f}_jvp", jparams, _lower(custom_jvp.node.body, None), deco,
                    custom_jvp.source))
    elif custom_grad is None and jvp_refusal(tr) is None:
        jparams = params + tr.tangent.dot_params
        out.append((f"{f}_jvp", jparams + pushing(jparams), lower(tr.tangent.body, jparams),
                    deco))
    return out


def _known_target(target):
    """``target`` if it is one adjoint can emit, else a ValueError naming the choices."""
    return code_of(target).name


def function_sources(tr, stage, target="cpu", threads_only=False):
    """The forward, backward or jvp functions of one kernel/func as source, spelled for
    ``target`` (decorators are left out, as in ``ad.source``); ``threads_only``: a
    kernel's thread function alone (one thread's code, without the grid running it)."""
    custom = {f.name for f in tr.pf.funcs if f.custom_grad is not None}
    n = tr.pf.name
    if tr.pf.role == "kernel":
        fns = kernel_functions(tr, _known_target(target), custom)
        picked = [f for f in fns if f[0] in (f"{n}_{stage}", f"{n}_{stage}_small",
                                              f"{n}_{stage}_thread", f"{n}_{stage}_pair",
                                              f"{n}_{stage}_rest_thread",
                                              f"{n}_{stage}_planned")
                  or f[0].startswith(f"{n}_{stage}_gather")]
        if threads_only:
            picked = [f for f in picked if f[0] == f"{n}_{stage}_thread"] or picked
    else:
        fns = func_functions(tr, None, _known_target(target), custom)
        part = {"forward": "forward", "backward": "adjoint", "jvp": "jvp"}.get(stage)
        if part is None:
            raise ValueError(f"'{n}' is a func: it has forward, backward and jvp functions, "
                             f"no {stage} functions (those are a kernel's)")
        picked = [f for f in fns if f[0] == f"{n}_{part}"]
    if stage == "jvp" and not picked:
        raise ValueError(f"'{n}' has no JVP: {jvp_refusal(tr)}")
    if not picked and tr.rev.backward is None:
        raise ValueError(f"'{n}' has no backward: it is transformed forward-only (a backward "
                         "printed as user code is differentiated in forward mode only)")
    if not picked and stage == "forward_vjp":
        raise ValueError(f"'{n}' has no forward_vjp functions: only a kernel adding into one "
                         "output only, reading no array it writes, with no loop to reverse, "
                         "has them (see docs/semantics.md, a one-element loss)")
    if not picked:
        raise ValueError(f"'{n}' has no {stage} functions: only a kernel with a loop the "
                         "backward would replay for the values it leaves (and no stack) "
                         "has them (see docs/semantics.md, store or recompute)")
    p = Printer(tr.pf.source)
    for i, (fname, params, body, _deco, *src) in enumerate(picked):
        if i:
            p.emit(0, "")
        p.source = src[0] if src else tr.pf.source
        p.last_line = None
        p.function(fname, params, ieee.spell(stacks.spell(body, target)))
    return p.text()


def _target_line(target):
    """The header line naming a non-CPU target; CPU modules have none (and so keep the
    header they had before there were targets)."""
    return [f"# adjoint-target: {target}"] if code_of(target).named else []


def _optimize_line():
    """The header line naming the optimization setting a module was generated under
    (``ADJOINT_OPTIMIZE``, ``passes.optimizing``), where that is not all of them: ``adjoint
    check`` regenerates under it. A module generated with all has none (its header is
    the one it had before the setting existed)."""
    enabled = passes.current()
    return [] if enabled == passes.ALL else [f"# adjoint-optimize: {passes.setting_text(enabled)}"]


def _header(target, float32):
    return code_of(target).header(float32) + [ieee.NOTE]


def module_source(items, relname, source_text, target="cpu"):
    """Text of a module for ``items``: [(role, Transformed, custom grad, custom JVP)],
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
    ] + _target_line(_known_target(target)) + _optimize_line() + _header(
        target, any(role == "kernel" and float32_kernel(tr) for role, tr, *_ in items))
    specs = []
    custom = {tr.pf.name for role, tr, grad, _ in items if grad is not None}
    built = [(role, tr, kernel_functions(tr, target, custom) if role == "kernel" else
              func_functions(tr, grad, target, custom, jvp)) for role, tr, grad, jvp in items]
    f32_funcs = precision.float32_funcs(built)
    for role, tr, fns in built:
        if role == "kernel" and float32_kernel(tr):
            fns = precision.call_float32(fns, f32_funcs)
        elif role == "func" and tr.pf.name in f32_funcs:
            fns = fns + precision.float32_variant(fns, tr, f32_funcs)
        for fname, params, body, decorator, *src in fns:
            p.lines += ["", ""]
            p.source = src[0] if src else tr.pf.source
            p.last_line = None
            p.function(fname, params, ieee.spell(stacks.spell(body, target)),
                       decorator=decorator)
        specs += spec_lines(role, tr, relname, target, fns)
    p.lines += [""]
    for line in specs:
        p.lines += [""] if line.startswith(tuple(f"{tr.pf.name} =" for _, tr, *_ in items)) else []
        p.emit(0, line)
    return p.text()
