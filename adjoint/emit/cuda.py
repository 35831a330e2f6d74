"""The CUDA target: the same forward/backward bodies spelled for ``numba.cuda``.

Differences from the CPU target, all made here on the emitted trees:
- thread functions and funcs become ``@cuda.jit(device=True)``; each grid
  function is a ``@cuda.jit`` kernel that reads ``cuda.grid(n)`` and guards
  against threads past the launch size;
- an accumulation ``arr[idx] += v`` whose index is not the thread's own
  (gathers, scatters, shared accumulators, adjoints of gathered loads)
  becomes ``cuda.atomic.add``, and so does every other accumulation into an array
  that has such a one (a plain ``adj_u[i] += v`` would race with another thread's
  atomic add into ``adj_u[i]``: found on an H200, where the simulator runs one
  thread at a time); an accumulation into an array every thread adds into only at
  its own index stays a plain update;
  ``ad.atomic_min``/``atomic_max`` become ``cuda.atomic.min``/``max`` (``atomic_and``/
  ``or``/``xor``: ``cuda.atomic.and_``/``or_``/``xor``);
- per-thread loop stacks live in ``cuda.local.array(capacity)``, whose size
  must be known when compiling: ``@ad.kernel(loop_capacity=N)`` (default 256).
  A thread whose loop runs past it writes the loop's line into a status array
  and the launcher raises an error naming the kernel and the line;
- a kernel whose plain stores may collide has no CUDA backward: which
  thread's value survived is unknown, so the launcher refuses it;
- ``min(a, b)``/``max(a, b)`` become conditionals with Python's tie rule
  (numba's built-in CUDA target mistypes the two-argument builtins).

Everything emitted here is compiled to PTX by ``adjoint.ptx`` in CI: the
simulator runs it as Python and would not notice code numba.cuda rejects.
"""
import copy

import gast

from . import warp
from .stacks import dotted
from .targets import code
from ..derive.ir import AtomicBits, AtomicFetch, AtomicMinMax, MaxOp, MinOp, StackNew, StackPush, comment, const, if_, name
from ..derive.parallel import is_exclusive
from ..derive.reverse import holds_stacks

CUDA = code("cuda")      # its spellings (runtime/targets.py)
DEVICE, KERNEL = CUDA.func_decorator, CUDA.kernel_decorator
STATUS = "rt_status"


def _attr(path, *attrs):
    """``a.b.c`` from "a.b" and "c"."""
    return dotted(".".join((path,) + attrs))


def _call(func, *args):
    return gast.Call(func=func, args=list(args), keywords=[])


class LowerCuda(gast.NodeTransformer):
    """Rewrite a lowered CPU body for CUDA (see the module docstring)."""

    def __init__(self, owner, dims, capacity, custom_grads, shared=frozenset(), uniform=None):
        self.owner, self.dims = owner, dims
        self.capacity, self.custom_grads = capacity, custom_grads
        self.shared = shared        # arrays some thread adds into at another's element
        self.uniform = uniform      # pass warp_sums: whether an index is the warp's own

    def exclusive(self, sl):
        return is_exclusive(self.owner, self.dims, sl)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        t = node.target
        if isinstance(t, gast.Subscript) and (not self.exclusive(t.slice) or
                                              _root(t) in self.shared):
            fn = "add" if isinstance(node.op, gast.Add) else "sub"
            if self.uniform is not None and self.uniform(t.slice):
                summed = warp.add(copy.deepcopy(t), node.value, subtract=fn == "sub")
                if summed is not None:      # (pass warp_sums: one atomic a warp)
                    return summed
            idx = copy.deepcopy(t.slice)
            return gast.Expr(value=_call(_attr(CUDA.atomic, fn), name(t.value.id), idx,
                                         node.value))
        return node

    def visit_AtomicMinMax(self, node):
        """``ad.atomic_min(arr, i, v)`` -> ``cuda.atomic.min(arr, i, v)`` (max alike)."""
        self.generic_visit(node)
        t = node.target
        fn = "min" if node.is_min else "max"
        return gast.Expr(value=_call(_attr(CUDA.atomic, fn), name(t.value.id),
                                     copy.deepcopy(t.slice), node.value))

    def visit_AtomicBits(self, node):
        """``ad.atomic_or(arr, i, v)`` -> ``cuda.atomic.or_(arr, i, v)`` (and_, xor)."""
        self.generic_visit(node)
        t = node.target
        fn = {gast.BitAnd: "and_", gast.BitOr: "or_", gast.BitXor: "xor"}[type(node.op)]
        return gast.Expr(value=_call(_attr(CUDA.atomic, fn), name(t.value.id),
                                     copy.deepcopy(t.slice), node.value))

    def visit_Assign(self, node):
        v = node.value
        if isinstance(v, AtomicFetch):          # old = cuda.atomic.add(arr, i, v)
            fn = {gast.Add: "add", gast.Sub: "sub", MinOp: "min", MaxOp: "max",
                  gast.BitAnd: "and_", gast.BitOr: "or_", gast.BitXor: "xor"}[type(v.op)]
            node.value = _call(_attr(CUDA.atomic, fn), name(v.target.value.id),
                               copy.deepcopy(v.target.slice), v.value)
            return node
        if isinstance(v, StackNew):
            v.capacity = const(self.capacity)    # numba.cuda sizes local arrays when compiling
            return node
        if isinstance(v, StackPush):
            store = gast.Assign(targets=[gast.Subscript(value=v.stack, slice=v.index,
                                                        ctx=gast.Store())],
                                value=v.value, type_comment=None)
            flag = gast.Assign(targets=[gast.Subscript(value=name(STATUS), slice=const(0),
                                                       ctx=gast.Store())],
                               value=const(node.lineno or -1), type_comment=None)
            test = gast.Compare(left=copy.deepcopy(v.index), ops=[gast.Lt()],
                                comparators=[const(self.capacity)])
            pushed = if_(test, [store], [flag], node.lineno)
            t = node.targets[0]
            if isinstance(v.stack, gast.Name) and t.id != v.stack.id:
                # (``s_2 = push(s_1, ...)`` in a printed backward transformed again: the
                # local array pushed onto is the stack both names hold)
                return [pushed, gast.Assign(targets=[t], value=copy.deepcopy(v.stack),
                                            type_comment=None)]
            return pushed
        self.generic_visit(node)
        return node

    def visit_StackRead(self, node):
        """After an overflow (already reported through the status array) stay in bounds."""
        self.generic_visit(node)
        # (a conditional, not min(): numba.cuda types min(int, int) wrongly)
        last = const(self.capacity - 1)
        index = gast.IfExp(test=gast.Compare(left=node.index, ops=[gast.Lt()],
                                             comparators=[copy.deepcopy(last)]),
                           body=copy.deepcopy(node.index), orelse=last)
        return gast.Subscript(value=node.stack, slice=index, ctx=gast.Load())

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, gast.Name) and f.id in ("min", "max") and len(node.args) == 2 and \
                not node.keywords:
            # Python's choice (the first unless the second is strictly smaller/larger),
            # spelled as a conditional: numba's built-in CUDA target mistypes min/max(a, b)
            a, b = node.args
            op = gast.Lt() if f.id == "min" else gast.Gt()
            return gast.IfExp(test=gast.Compare(left=copy.deepcopy(b), ops=[op],
                                                comparators=[copy.deepcopy(a)]),
                              body=copy.deepcopy(b), orelse=copy.deepcopy(a))
        callee = getattr(node, "callee", None)
        if callee is not None and callee.part == "adjoint" and \
                callee.name not in self.custom_grads:
            node.args.append(name(STATUS))
        elif callee is not None and callee.kind == "func" and callee.part != "adjoint" and \
                holds_pushes(callee.target.transformed):
            node.args.append(name(STATUS))      # a printed backward's forward or JVP
        return node


def holds_pushes(tr):
    """Whether a func's forward and JVP push onto loop stacks (a backward printed as user
    code and transformed again): on CUDA they take the status array, as adjoints do."""
    return tr.pf.role == "func" and holds_stacks(tr.ssa.body)


def _root(target):
    while isinstance(target, (gast.Subscript, gast.Attribute)):
        target = target.value
    return target.id if isinstance(target, gast.Name) else None


def shared_arrays(body, owner, dims):
    """The arrays ``body`` adds into (or takes an atomic min/max of) at an index that is not
    the thread's own: every accumulation into them must be atomic."""
    out = set()
    for s in body:
        for n in gast.walk(s):
            if isinstance(n, (AtomicMinMax, AtomicBits, AtomicFetch)) or \
                    isinstance(n, gast.AugAssign) and \
                    isinstance(n.target, gast.Subscript) and \
                    not is_exclusive(owner, dims, n.target.slice):
                out.add(_root(n.target))
    return frozenset(out)


def lower_body(body, tr, capacity, custom_grads, tids=()):
    """``body`` spelled for CUDA; ``tids``: a kernel thread function's thread index
    parameters (pass warp_sums reads which values they reach)."""
    owner = tr.threads if tr.pf.role == "kernel" else {}
    uniform = None
    if tr.pf.role == "kernel" and "warp_sums" in tr.optimizations:
        uniform = warp.uniform_test(body, set(owner) | set(tids))
    lw = LowerCuda(owner, tr.dims, capacity, custom_grads, shared_arrays(body, owner, tr.dims),
                   uniform)
    return [lw.visit(copy.deepcopy(s)) for s in body]


def grid(thread_fn, tids, dims, args):
    """Body of a ``@cuda.jit`` kernel running ``thread_fn`` for each thread in range."""
    target = name(tids[0], store=True) if len(tids) == 1 else gast.Tuple(
        elts=[name(t, store=True) for t in tids], ctx=gast.Store())
    read = gast.Assign(targets=[target], value=_call(_attr(CUDA.thread_index), const(len(tids))),
                       type_comment=None)
    tests = [gast.Compare(left=name(t), ops=[gast.Lt()], comparators=[name(d)])
             for t, d in zip(tids, dims)]
    test = tests[0] if len(tests) == 1 else gast.BoolOp(op=gast.And(), values=tests)
    call = gast.Expr(value=_call(name(thread_fn), *[name(a) for a in tids + args]))
    return [comment("one GPU thread per grid point; threads past the launch size do nothing"),
            read, gast.If(test=test, body=[call], orelse=[])]

