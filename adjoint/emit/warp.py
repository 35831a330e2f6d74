"""Pass warp_sums (CUDA only): an atomic add into an element the threads of a warp all add
into at once is summed across the warp first, and added once.

Expects: a kernel's thread body lowered for CUDA (emit/cuda.py), whose accumulations into
an element other threads may add into become ``cuda.atomic.add``, and the names holding
the thread's indices.
Guarantees: ``uniform_test(body, seeds)`` tells whether an expression has one value in
every thread that evaluates it at one point of the body: it reads no thread index, no
array element, no name assigned from such a value or under control that depends on one
(an ``if``, a loop's range or test), and no name assigned in a loop holding a ``break``
or ``continue`` (threads leave it at different trips; a ``return`` leaves the others as
they were). Calls count only as ``rt.<builtin>`` of such values, and an array's
``.shape``. ``add`` spells ``arr[idx] += v`` with such an index as ``rt.warp_add1(arr, i,
v)`` or ``rt.warp_add2(arr, i, j, v)`` (``-=`` adds ``-v``): a loss's ``loss[0]``, a
dense layer's backward into ``adj_x[k]``, an n-body's into the other body's ``adj_pos``.
The device function (runtime/backend_cuda.py) checks at run time that all 32 lanes are
there with one index, sums their values by shuffles and has lane 0 add the sum, else
each lane adds its own: a wrong guess here costs time, never a term. The static test
keeps that check away from scatters whose indices differ by thread, where it only slows
the atomics down (docs/backends.md has the measurements).
Not exact on a GPU: the warp's terms are added as a tree, not one at a time in the order
the lanes arrive (which was not fixed either). Numba's simulator has no warp intrinsics:
there the function is each thread's own ``cuda.atomic.add``, so the CPU backends and the
simulator give the same bits with the pass on and off.

Why: the atomics of 32 lanes on one address serialize in the memory system.
"""
import gast

from ..derive.ir import name, rt_call, walk_stmts

_PURE_CALLS = {"min", "max", "abs", "int", "float", "range"}


def varying(body, seeds):
    """The names of ``body`` whose value may differ between the threads of a warp at one
    point (see the module doc); ``seeds``: the thread indices' names."""
    out = set(seeds)
    assigns = []
    _collect(body, (), False, assigns)
    changed = True
    while changed:
        changed = False
        for targets, values, escapes in assigns:
            if targets <= out:
                continue
            if escapes or not all(_uniform(v, out) for v in values):
                out |= targets
                changed = True
    return out


def _collect(body, control, escapes, out):
    """``(names assigned, the expressions they depend on, whether in an escaping loop)``
    for each assignment in ``body`` (``control``: the enclosing tests and ranges)."""
    for s in body:
        if isinstance(s, gast.Assign):       # (a store into an element assigns no name)
            names = {n.id for t in s.targets for n in _target_names(t)}
            out.append((names, (s.value, *control), escapes))
        elif isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Name):
            out.append(({s.target.id}, (s.value, s.target, *control), escapes))
        elif isinstance(s, gast.For):
            inner = escapes or _escapes(s.body)
            names = {n.id for n in _target_names(s.target)}
            out.append((names, (s.iter, *control), inner))
            _collect(s.body, (*control, s.iter), inner, out)
            _collect(s.orelse, (*control, s.iter), escapes, out)
        elif isinstance(s, gast.While):
            inner = escapes or _escapes(s.body)
            _collect(s.body, (*control, s.test), inner, out)
            _collect(s.orelse, (*control, s.test), escapes, out)
        elif isinstance(s, gast.If):
            _collect(s.body, (*control, s.test), escapes, out)
            _collect(s.orelse, (*control, s.test), escapes, out)
        elif isinstance(s, (gast.With, gast.Try)):
            return _unknown(body, out)
        else:
            # any other statement that assigns (an IR node, a nested function) is not
            # understood here: what it assigns varies
            for n in gast.walk(s):
                if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                    out.append(({n.id}, (), True))


def _target_names(t):
    if isinstance(t, gast.Name):
        return [t]
    if isinstance(t, (gast.Tuple, gast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []


def _unknown(body, out):
    for s in body:
        for n in gast.walk(s):
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                out.append(({n.id}, (), True))


def _escapes(body):
    """Whether a loop with this body may be left or skipped ahead by some threads alone:
    a ``break`` or ``continue`` of its own (not of a loop inside it)."""
    for s in body:
        if isinstance(s, (gast.Break, gast.Continue)):
            return True
        if isinstance(s, gast.If) and (_escapes(s.body) or _escapes(s.orelse)):
            return True
        if isinstance(s, (gast.For, gast.While)) and _escapes(s.orelse):
            return True
    return False


def _uniform(expr, vary):
    """Whether ``expr`` has one value across a warp, given the varying names ``vary``."""
    for n in gast.walk(expr):
        if isinstance(n, gast.Name):
            if n.id in vary:
                return False
        elif isinstance(n, gast.Subscript):
            v = n.value
            if not (isinstance(v, gast.Attribute) and v.attr == "shape" and
                    isinstance(v.value, gast.Name)):
                return False            # an array element: it may differ by thread
        elif isinstance(n, gast.Call):
            f = n.func
            if not (isinstance(f, gast.Attribute) and isinstance(f.value, gast.Name) and
                    f.value.id == "rt" or isinstance(f, gast.Name) and f.id in _PURE_CALLS):
                return False
        elif not isinstance(n, (gast.expr_context, gast.Constant, gast.BinOp, gast.UnaryOp,
                                gast.BoolOp, gast.Compare, gast.IfExp, gast.Tuple,
                                gast.Attribute, gast.operator, gast.unaryop, gast.boolop,
                                gast.cmpop)):
            return False                # anything else: not known to be uniform
    return True


def uniform_test(body, seeds):
    """``test(expr)``: whether ``expr`` has one value across a warp, at any point of
    ``body`` (``seeds``: the names holding the thread's indices)."""
    vary = varying(body, seeds)
    return lambda expr: _uniform(expr, vary)


def add(target, value, subtract=False):
    """``rt.warp_add1(arr, i, v)`` (``warp_add2`` for ``arr[i, j]``) for ``target += value``
    (``-= value`` adds ``-value``), or None for an index of another length."""
    idx = target.slice.elts if isinstance(target.slice, gast.Tuple) else [target.slice]
    if len(idx) not in (1, 2):
        return None
    if subtract:
        value = gast.UnaryOp(op=gast.USub(), operand=value)
    return gast.Expr(value=rt_call(f"warp_add{len(idx)}", name(target.value.id), *idx, value))


def candidates(body, seeds):
    """Whether ``body`` adds into an array element at an index uniform across a warp
    (what this pass would spell with ``rt.warp_add``)."""
    test = uniform_test(body, seeds)
    for s in walk_stmts(body):
        if isinstance(s, gast.AugAssign) and isinstance(s.target, gast.Subscript) \
                and isinstance(s.op, (gast.Add, gast.Sub)) and test(s.target.slice):
            return True
    return False
