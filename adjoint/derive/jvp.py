"""Pass jvp (forward mode): the primal body with the tangent of every active value.

Expects: an ``SSA`` function (after bounds) and its active set (pass activity).
Guarantees: ``Tangent.body`` runs the primal statement by statement, each
active value ``z`` followed by its tangent ``dot_z`` (the directional
derivative along the tangents given for the inputs), from the same rule table
as the reverse pass (``Rule.forward``):

- ``z = op(a, b)``: the sum of the op's partials times ``dot_a``, ``dot_b``;
- ``z = a`` and ``z = arr[i]``: ``dot_z = dot_a`` / ``dot_arr[i]``;
- ``arr[i] = v``: ``dot_arr[i] = dot_v``; ``arr[i] += v`` and atomics:
  ``dot_arr[i] += dot_v`` (an atomic stays one); ``ad.atomic_min(arr, i, v)``:
  ``dot_arr[i] = dot_v`` where ``v`` replaces the element;
- a func call: its ``<func>_jvp`` returns the values and then their tangents;
- ``if``, loops, ``break``: the primal's own control flow. Forward mode needs
  no stacks of its own: every tangent is computed when its value is;
- loop stacks (a generated backward printed as user code, differentiated
  again: forward over reverse): a stack of floats has a stack of their
  tangents, ``dot_s = StackPush(dot_s, k, dot_v)``, ``dot_x = StackRead(dot_s, k)``.

Kernels take one tangent array per float array parameter (``dot_<name>``), funcs
one tangent per float parameter, and a func's JVP returns its values followed
by one tangent per value. The input tree is not changed.
"""
import copy
import dataclasses
from dataclasses import dataclass

import gast

from ..rules import lookup
from ..rules.types import FLOAT
from .ir import BlockRewriter
from .ir import (AtomicMinMax, atomic_update, StackNew, StackPush, StackRead, assign, at, const, if_, name,
                 operation)
from ..errors import TransformError
from .old_values import backward_only
from .reverse import at_all

PREFIX = "dot_"


@dataclass
class Tangent:
    body: list          # primal and tangent statements (the <kernel>_jvp thread body)
    dot_params: list    # tangent parameters, after the primal ones
    kinds: dict         # the kind of every tangent name (float)
    names: dict         # {value name: its tangent's name}
    refused: tuple = None   # a kernel's JVP refused at its launch: (line, why); body empty


class _Jvp(BlockRewriter):
    def __init__(self, ssa, active_set):
        self.ssa = ssa
        self.pf = ssa.norm.pf
        self.active = active_set
        self.float_arrays = {p.name for p in self.pf.differentiable() if p.is_array}
        self.kinds = {}
        self.names = {}
        self.taken = set(ssa.namer.taken) | {p.name for p in self.pf.params} | {
            n.id for s in ssa.body for n in gast.walk(s) if isinstance(n, gast.Name)}

    def dot_of(self, atom):
        """The tangent name of an operand, or None when it has none (constant, int, inactive)."""
        if isinstance(atom, gast.Name) and atom.id in self.active:
            return self.named(atom.id)
        return None

    def named(self, v):
        """The tangent name of ``v``: ``dot_v``, or with more ``dot_`` while that is taken
        (the JVP of a JVP has parameters ``x``, ``dot_x`` and their tangents)."""
        d = self.names.get(v)
        if d is None:
            d = PREFIX + v
            while d in self.taken:
                d = PREFIX + d
            self.taken.add(d)
            self.names[v] = d
            kind = self.ssa.kinds.get(v)
            self.kinds[d] = FLOAT if kind is None else kind.adjoint
        return d

    def dot_value(self, atom):
        d = self.dot_of(atom)
        return name(d) if d else const(0.0)

    def stmt(self, s):
        line = getattr(s, "lineno", None)
        if isinstance(s, gast.If):
            return [if_(copy.deepcopy(s.test), self.block(s.body) or [at(gast.Pass(), line)],
                        self.block(s.orelse), line)]
        if isinstance(s, (gast.For, gast.While)):
            return [at(_plain_loop(s, self.block(s.body) + self.block(s.loop.latch)), line)]
        if isinstance(s, gast.Return):
            return [self.ret(s)]
        primal = copy.deepcopy(s)
        update = atomic_update(s)
        if update is not None:              # old = ad.atomic_add(a, i, v)
            if s.targets[0].id in self.active:
                raise backward_only(self.pf.error(
                    "the old value an atomic returns has no tangent adjoint can compute (it "
                    "depends on the order threads ran): use it for ints, indices or flags", s,
                    stage="jvp"))
            if isinstance(update, AtomicMinMax):
                return self.minmax(update) + [primal]
            return [primal] + self.accumulate(update)
        if isinstance(s, AtomicMinMax):
            return self.minmax(s) + [primal]
        if isinstance(s, gast.AugAssign):
            return [primal] + self.accumulate(s)
        if not isinstance(s, gast.Assign):
            return [primal]
        t, v = s.targets[0], s.value
        if isinstance(t, gast.Subscript):
            arr = t.value.id
            if arr not in self.float_arrays:
                return [primal]
            slot = gast.Subscript(value=name(self.named(arr)), slice=copy.deepcopy(t.slice),
                                  ctx=gast.Store())
            return [primal, assign(slot, self.dot_value(v), line)]
        if isinstance(v, gast.Call) and getattr(v, "callee", None) is not None and \
                v.callee.kind == "func":
            return self.call(s, t, v, line)
        if isinstance(t, gast.Tuple) or t.id not in self.active:
            return [primal]
        z = t.id
        dz = self.named(z)
        if isinstance(v, gast.Name):
            return [primal, assign(dz, self.dot_value(v), line)]
        if isinstance(v, StackNew):
            return [primal, assign(dz, StackNew(v.kind, copy.deepcopy(v.capacity),
                                                self.dot_value(v.first)), line)]
        if isinstance(v, StackPush):
            stack = self.dot_of(v.stack)
            if stack is None:
                raise self.pf.error("a stack of floats with no tangent", s, stage="jvp")
            return [primal, assign(dz, StackPush(name(stack), copy.deepcopy(v.index),
                                                 self.dot_value(v.value)), line)]
        if isinstance(v, StackRead):
            stack = self.dot_of(v.stack)
            if stack is None:
                raise self.pf.error("a stack of floats with no tangent", s, stage="jvp")
            return [primal, assign(dz, StackRead(name(stack), copy.deepcopy(v.index)), line)]
        if isinstance(v, gast.Subscript):
            arr = v.value.id if isinstance(v.value, gast.Name) else None
            if arr in self.float_arrays:
                slot = gast.Subscript(value=name(self.named(arr)), slice=copy.deepcopy(v.slice),
                                      ctx=gast.Load())
                return [primal, assign(dz, slot, line)]
            return [primal, assign(dz, const(0.0), line)]
        if isinstance(v, (gast.BinOp, gast.UnaryOp, gast.Call)):
            key, args = operation(v)
            rule = lookup(key)
            if rule is None:
                raise self.pf.error(f"no derivative rule for '{key}'", s, stage="jvp")
            return [primal] + [at_all(x, line) for x in rule.forward(z, args, self.dot_of, dz)]
        return [primal, assign(dz, const(0.0), line)]

    def accumulate(self, s):
        arr = s.target.value.id
        d = self.dot_of(s.value)
        if arr not in self.float_arrays or d is None:
            return []
        node = copy.deepcopy(s)
        node.target.value = name(self.named(arr))
        node.value = name(d)
        return [node]

    def minmax(self, s):
        """Before ``ad.atomic_min(arr, i, v)``: ``if v < arr[i]: dot_arr[i] = dot_v`` (``>``
        for max): the tangent of the value that replaces the element. Exact where threads
        do not collide or run one after another (pass parallel makes colliding ones
        serial; the CUDA JVP refuses them); on a tie the element keeps its tangent."""
        arr = s.target.value.id
        if arr not in self.float_arrays:
            return []
        element = gast.Subscript(value=name(arr), slice=copy.deepcopy(s.target.slice),
                                 ctx=gast.Load())
        op = gast.Lt() if s.is_min else gast.Gt()
        test = gast.Compare(left=copy.deepcopy(s.value), ops=[op], comparators=[element])
        slot = gast.Subscript(value=name(self.named(arr)), slice=copy.deepcopy(s.target.slice),
                              ctx=gast.Store())
        return [if_(test, [assign(slot, self.dot_value(s.value), s.lineno)], [], s.lineno)]

    def call(self, s, t, v, line):
        """``z = f(a, b)`` -> ``z, dot_z = f_jvp(a, b, dot_a, dot_b)`` (values, then tangents)."""
        targets = t.elts if isinstance(t, gast.Tuple) else [t]
        if not any(e.id in self.active for e in targets):
            return [copy.deepcopy(s)]
        callee = v.callee.target
        float_params = [p.kind.differentiable for p in callee.transformed.pf.params]
        # (a float array argument: its tangent array; only a func with a custom JVP keeps
        # its call with arrays, pass inline)
        dots = [name(self.named(a.id)) if isinstance(a, gast.Name) and a.id in self.float_arrays
                else self.dot_value(a) for a, f in zip(v.args, float_params) if f]
        node = copy.deepcopy(v)
        node.args = node.args + dots
        node.callee = dataclasses.replace(v.callee, part="jvp")     # spelled <func>_jvp
        elts = [name(e.id, store=True) for e in targets] + \
            [name(self.named(e.id), store=True) for e in targets]
        return [assign(gast.Tuple(elts=elts, ctx=gast.Store()), node, line)]

    def ret(self, s):
        vals = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
        elts = [copy.deepcopy(a) for a in vals] + [self.dot_value(a) for a in vals]
        return at(gast.Return(value=gast.Tuple(elts=elts, ctx=gast.Load())), s.lineno)


def _plain_loop(s, body):
    if isinstance(s, gast.For):
        return gast.For(target=copy.deepcopy(s.target), iter=copy.deepcopy(s.iter), body=body,
                        orelse=[], type_comment=None)
    return gast.While(test=copy.deepcopy(s.test), body=body, orelse=[])


def jvp(ssa, active_set):
    """The ``Tangent`` of an SSA function (see the module docstring)."""
    j = _Jvp(ssa, active_set)
    pf = ssa.norm.pf
    dot_params = [j.named(p.name) for p in pf.differentiable()]    # named first: stable
    try:
        body = j.block(ssa.body)
    except TransformError as exc:
        # (a kernel still runs forward: its JVP's launch raises this, emit/spec.py)
        if pf.role != "kernel" or not getattr(exc, "backward_only", False):
            raise
        return Tangent([], dot_params, {}, {}, refused=(exc.lineno, exc.reason))
    return Tangent(body, dot_params, dict(j.kinds), dict(j.names))
