"""Vector mode: ``k`` tangents in one JVP launch (or ``k`` seeds in one backward launch),
the primal computed once.

``jvp_launch(kernel, dim, inputs, outputs, tangents)`` runs a kernel's JVP along ``k``
directions at once (Tapenade's and Enzyme's vector mode): every tangent array has a
leading axis of ``k``, one direction per row. It launches a kernel of its own
(``vector_jvp_kernel``): the kernel's JVP printed as user code (printed.py's
``jvp_kernel``), each statement that computes a tangent written out ``k`` times
(``dot_v_0 = ...``, ``dot_v_1 = ...``), a tangent array indexed with the direction
first (``dot_x[1, i]``). Three columns of the Jacobian of DESIGN.md's ``energy``:

from adjoint.vector_mode import jvp_launch

T = np.zeros((3, 8)); T[0, 0] = T[1, 1] = T[2, 2] = 1.0      # k = 3 one-hot directions
dots = jvp_launch(energy, 8, inputs=[x], outputs=[out], tangents={"x": T})
dots["out"].numpy()[j]   # the JVP along T[j]: column j of d out / d x

Guarantees: the primal statements stay single, so each thread computes the primal
once and its ``k`` tangents from it, with the same operations as ``k`` separate JVP
launches: the results are theirs bit for bit. The kernel goes through the pipeline as
any printed kernel does (every backend, parallel where the JVP is). A func called from
the kernel keeps its own JVP, called once per direction. ``k`` is part of the printed
kernel (at most ``MAX_DIRECTIONS``); ``ad.autograd.jacobian`` takes columns ``CHUNK``
at a time.

``vjp_launch(kernel, dim, inputs, outputs, seeds)`` does the same for the backward
(``vector_vjp_kernel``, as ``printed.vjp_kernel``): each adjoint statement once per
seed, adjoint arrays indexed with the seed first; the replay of the primal (and its
loop stacks) stays single.
"""
import copy

import gast
import numpy as np

from ..api import Kernel
from ..derive.ir import BlockRewriter
from ..errors import LaunchError
from ..runtime.array import Array, zeros
from ..runtime.launch import launch

__all__ = ["jvp_launch", "vjp_launch", "vector_jvp_kernel", "vector_vjp_kernel", "MAX_DIRECTIONS"]

MAX_DIRECTIONS = 64
"""The most directions one vector launch takes (the printed kernel holds ``k`` copies of
each tangent statement)."""


class _Direction(gast.NodeTransformer):
    """Direction ``j``'s copy of a tangent statement: a tangent local ``dot_v`` becomes
    ``dot_v_<j>``, a tangent array ``dot_x`` is indexed ``dot_x[j, ...]``."""

    def __init__(self, j, renamed, arrays):
        self.j, self.renamed, self.arrays = j, renamed, arrays

    def visit_Name(self, node):
        if node.id in self.arrays:      # (a subscript or an atomic handles it first)
            raise ValueError(f"tangent array '{node.id}' is used other than indexed")
        if node.id in self.renamed:
            node.id = self.renamed[node.id][self.j]
        return node

    def _first(self, index):
        j = gast.Constant(value=self.j, kind=None)
        elts = index.elts if isinstance(index, gast.Tuple) else [index]
        return gast.Tuple(elts=[j] + [self.visit(e) for e in elts], ctx=gast.Load())

    def visit_Subscript(self, node):
        if isinstance(node.value, gast.Name) and node.value.id in self.arrays:
            node.slice = self._first(node.slice)
            return node
        self.generic_visit(node)
        return node

    def visit_Call(self, node):
        f, args = node.func, node.args
        if isinstance(f, gast.Attribute) and f.attr.startswith("atomic_") and args and \
                isinstance(args[0], gast.Name) and args[0].id in self.arrays:
            # ad.atomic_add(dot_x, i, v) -> ad.atomic_add(dot_x, j, i, v)
            node.args = [args[0], gast.Constant(value=self.j, kind=None)] + \
                [self.visit(a) for a in args[1:]]
            return node
        self.generic_visit(node)
        return node


def _names(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}


def _header(s):
    """The parts of a compound statement that are not its blocks."""
    if isinstance(s, gast.If) or isinstance(s, gast.While):
        return [s.test]
    if isinstance(s, gast.For):
        return [s.target, s.iter]
    return None


def copies(body, k, tangents, arrays, taken):
    """``body`` (user-level statements) with every statement that reads or writes a
    tangent written out once per direction ``j < k``; control flow stays single (it
    depends on primal values only). ``tangents``: the tangent locals; ``arrays``: the
    tangent array parameters; ``taken``: names in use (the copies' names avoid them)."""
    taken = set(taken)
    renamed = {}
    for t in sorted(tangents):
        renamed[t] = []
        for j in range(k):
            name = f"{t}_{j}"
            while name in taken:
                name += "_"
            taken.add(name)
            renamed[t].append(name)
    marked = set(tangents) | set(arrays)

    class Copies(BlockRewriter):
        copy = True

        def stmt(self, s):
            header = _header(s)
            if header is not None:
                if any(_names(h) & marked for h in header):
                    raise ValueError("a branch or loop header reads a tangent")
                return self.nested(s)
            if _names(s) & marked:
                return [_Direction(j, renamed, arrays).visit(copy.deepcopy(s))
                        for j in range(k)]
            return [s]
    return Copies().block(body)


def _annotation(p, extra):
    return f"ad.array(dtype=ad.{p.type.dtype.name}, ndim={p.type.ndim + extra})"


def vector_jvp_kernel(kernel, k):
    """The JVP of ``kernel`` along ``k`` directions as a kernel of its own: its parameters,
    then a tangent array per float array parameter with a leading axis of ``k``
    (``dot_<name>[j, ...]``: direction ``j``). Made once per ``k``."""
    kernel.refresh()        # (made from what the kernel's names give now)
    key = ("vector_jvp_kernel", k)
    cached = kernel.built.get(key)
    if cached is not None:
        return cached
    from ..emit.spec import jvp_refusal
    from ..emit.user import annotation, function_text
    from .printed import _callees, compile_printed
    tr = kernel.transformed
    why = jvp_refusal(tr)
    if why is not None:
        raise LaunchError(f"kernel {kernel.name!r} has no JVP: {why}")
    tangent = tr.tangent
    arrays = set(tangent.dot_params)
    params = [(p.name, annotation(p)) for p in tr.pf.params] + \
        [(d, _annotation(p, 1)) for d, p in zip(tangent.dot_params, tr.pf.differentiable())]
    locals_ = set(tangent.names.values()) - arrays
    taken = {n for s in tangent.body for n in _names(s)} | {n for n, _ in params}
    name = f"{kernel.name}_jvp{k}"
    if kernel.zero_tangents:        # (a name of its own: linecache holds each one's text)
        name += "_const_" + "_".join(sorted(kernel.zero_tangents))

    def rewrite(body):
        return copies(body, k, locals_, arrays, taken | {n for s in body for n in _names(s)})
    text = function_text(tr, name, params, tangent.body, rewrite=rewrite)
    # (forward only: it is never differentiated, and may read what it clears, as a
    # printed backward does)
    pyfunc = compile_printed(text, name, _callees(tr, text), forward_only=True)
    kernel.built[key] = Kernel(pyfunc, enable_backward=False, loop_capacity=kernel.loop_capacity,
                               bounds_check=kernel.bounds_check)
    return kernel.built[key]


def _rows(kernel, dim, inputs, outputs, given, device, what, noun):
    """``(args, k, {parameter name: (k, *shape) array}, names left out)`` from ``given``
    (see ``jvp_launch``), a zeroed one for each float array parameter left out; a
    ``LaunchError`` naming the parameter for a bad key, ``k``, shape or dtype."""
    args = list(inputs) + list(outputs)
    if not isinstance(kernel, Kernel):
        raise LaunchError(f"{what} expects an @ad.kernel, got {type(kernel).__name__}")
    spec = kernel.spec
    if len(args) != len(spec.params):
        launch(kernel, dim, inputs=inputs, outputs=outputs, device=device,
               record_tape=False)       # (raises the launch's own error)
    where = f"{what} of kernel '{spec.name}' ({spec.origin})"
    if not hasattr(given, "items") or not given:
        raise LaunchError(f"{where}: {noun}s must be a non-empty dict from arguments or "
                          f"parameter names to (k, ...) arrays, not {given!r}")
    floats = list(spec.adjoint_params)
    by_param = {}
    for key, value in given.items():
        found = [m for m, p in enumerate(spec.params) if p.name == key] if type(key) is str \
            else [m for m, a in enumerate(args) if a is key]
        if not found:
            raise LaunchError(f"{where}: a {noun} is given for {key!r}, which is not one of "
                              "its parameters' names or arguments")
        for m in found:
            if m not in floats:
                raise LaunchError(f"{where}: parameter '{spec.params[m].name}' is not a float "
                                  f"array: it has no {noun}")
            by_param[m] = value
    ks = {spec.params[m].name: tuple(v.shape)[0] if getattr(v, "ndim", 0) else None
          for m, v in by_param.items()}
    k = next(iter(ks.values()))
    if any(n != k for n in ks.values()) or not isinstance(k, int) or k < 1:
        told = ", ".join(f"'{n}': {c}" for n, c in ks.items())
        raise LaunchError(f"{where}: every {noun} array needs the same number k >= 1 of "
                          f"directions along its first axis; got {told}")
    if k > MAX_DIRECTIONS:
        raise LaunchError(f"{where}: {k} directions; one launch takes at most "
                          f"{MAX_DIRECTIONS} (split them)")
    dev = device or next((a.device for a in args if isinstance(a, Array)), None) or "cpu"
    out, left_out = {}, []
    for m in floats:
        p, arg = spec.params[m], args[m]
        shape, dtype = tuple(arg.shape), np.dtype(arg.dtype)
        value = by_param.get(m)
        if value is None:
            left_out.append(p.name)
            value = zeros((k,) + shape, dtype=dtype, device=dev)
        elif tuple(value.shape) != (k,) + shape or value.dtype != dtype:
            raise LaunchError(f"{where}: the {noun}s of '{p.name}' must have shape "
                              f"{(k,) + shape} ({k} directions of its shape {shape}) and dtype "
                              f"{dtype}, got shape {tuple(value.shape)} and dtype "
                              f"{value.dtype}")
        out[p.name] = value
    return args, k, out, frozenset(left_out)


def jvp_launch(kernel, dim, inputs=(), outputs=(), tangents=None, device=None):
    """Run ``kernel``'s JVP along ``k`` directions in one launch, the primal computed once.

    ``tangents`` maps a float array argument (an ``ad.Array``) or its parameter name to
    its tangents: an array of shape ``(k, *argument's shape)`` and the argument's dtype,
    row ``j`` the direction ``j`` (an ``ad.Array`` on the launch's device, or a NumPy
    array on the CPU); every one has the same ``k``, and a parameter left out gets zeros.
    Writes the outputs as the forward does and returns ``{parameter name: tangents}``,
    ``(k, *shape)`` each, for every float array parameter: row ``j`` is what
    ``ad.launch(kernel, ..., tangents=<rows j>)`` gives, bit for bit (both drop the terms
    of an array the kernel only reads and no tangent is given for). Not recorded on a
    tape."""
    args, k, given, left_out = _rows(kernel, dim, inputs, outputs, tangents, device,
                                     "jvp_launch", "tangent")
    # (the arrays given no tangent that the kernel only reads are held constant, as
    # ad.launch holds them: api.Kernel.with_zero_tangents)
    launch(vector_jvp_kernel(kernel.with_zero_tangents(left_out), k), dim, inputs=args, outputs=list(given.values()),
           device=device, record_tape=False)
    return given


def vector_vjp_kernel(kernel, k):
    """The backward of ``kernel`` with ``k`` seeds as a kernel of its own: its parameters,
    then an adjoint array per float array parameter with a leading axis of ``k``
    (``adj_<name>[j, ...]``: seed ``j``). Made once per ``k``."""
    kernel.refresh()
    key = ("vector_vjp_kernel", k)
    cached = kernel.built.get(key)
    if cached is not None:
        return cached
    from ..emit.user import annotation, function_text
    from .printed import _callee_scope, compile_printed
    tr = kernel.transformed
    if tr.rev.backward is None:
        raise LaunchError(f"kernel '{kernel.name}' has no backward to run with k seeds")
    arrays = set(tr.rev.adj_params)
    by_name = {f"adj_{p.name}": p for p in tr.pf.params}
    params = [(p.name, annotation(p)) for p in tr.pf.params] + \
        [(a, _annotation(by_name[a], 1)) for a in tr.rev.adj_params]
    locals_ = set(tr.rev.kinds) - arrays
    taken = {n for s in tr.rev.backward for n in _names(s)} | {n for n, _ in params}
    name = f"{kernel.name}_vjp{k}"

    def rewrite(body):
        return copies(body, k, locals_, arrays, taken | {n for s in body for n in _names(s)})
    text = function_text(tr, name, params, tr.rev.backward, rewrite=rewrite)
    pyfunc = compile_printed(text, name, _callee_scope(tr, text), forward_only=True)
    kernel.built[key] = Kernel(pyfunc, enable_backward=False, loop_capacity=kernel.loop_capacity,
                               bounds_check=kernel.bounds_check)
    return kernel.built[key]


def vjp_launch(kernel, dim, inputs=(), outputs=(), seeds=None, device=None):
    """Run ``kernel``'s backward with ``k`` seeds in one launch, the primal replayed once.

    ``seeds`` maps a float array argument or its parameter name to ``k`` output adjoints,
    ``(k, *shape)`` as ``jvp_launch``'s tangents. Returns ``{parameter name: (k, *shape)
    adjoints}`` for every float array parameter: row ``j`` is what the kernel's backward
    printed as a kernel (``adjoint.printed.vjp_kernel``) accumulates with seed ``j``, bit
    for bit (to rounding, what ``ad.launch(..., adjoint=True)`` gives: that runs the
    optimized backward). A seed array given is read and, where the kernel stores, cleared,
    as a backward launch clears its output adjoints. Not recorded on a tape."""
    args, k, adjs, _ = _rows(kernel, dim, inputs, outputs, seeds, device, "vjp_launch", "seed")
    launch(vector_vjp_kernel(kernel, k), dim, inputs=args, outputs=list(adjs.values()),
           device=device, record_tape=False)
    return adjs
