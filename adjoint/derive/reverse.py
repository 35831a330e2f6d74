"""Pass reverse: the forward and the backward (adjoint) bodies.

Expects: an ``SSA`` function and its active set (pass activity).
Guarantees: ``Reversed.forward`` is the primal body (stores kept);
``Reversed.backward`` is a replay of the primal without stores or atomics,
followed by the adjoint of every statement in reverse order:

- ``z = op(a, b)``: the op's rule template from the registry, then
  ``adj_z = 0.0`` where ``z`` is assigned more than once (loops, merges);
- ``b = a`` (a copy): ``adj_a += adj_b`` -- accumulated, never overwritten;
- ``arr[i] = v``: ``adj_v += adj_arr[i]`` then ``adj_arr[i] = 0.0``;
  ``arr[i] += v`` and atomics: ``adj_v += adj_arr[i]`` (no clearing);
  ``ad.atomic_min/max(arr, i, v)``: where ``v == arr[i]`` after the launch (the
  value that survived), ``adj_v += adj_arr[i]`` then ``adj_arr[i] = 0.0``;
- ``if``: the same test selects the reversed branch;
- loops: the replay records each carried value at the start of every
  iteration in a per-thread stack (preallocated from the trip count, grown
  when a ``while`` needs it). The reverse walks the iterations backwards:
  restore the carried values of iteration ``k``, recompute its body (which
  records any inner loop), then reverse it. Values a later iteration
  overwrote are therefore exact, never the loop's final or initial ones.
  A loop whose iterations' adjoints do not depend on each other (a sum, no
  stores: derive/order.py) is reversed iteration by iteration in forward
  order instead, which walks memory forward (derive/loops.py).
"""
import copy
import dataclasses
from dataclasses import dataclass

import gast

from ..rules import lookup
from ..rules.types import FLOAT
from ..errors import TransformError
from .ir import (AtomicFetch, AtomicMinMax, AtomicResult, CheckStmt, Print, StackNew, StackPush,
                 StackRead, assign, at, atomic_update, comment, const, copy_tree, if_, name,
                 names_in, operation)
from .loops import Loops
from .old_values import atomic_name, backward_only, from_old_values, old_values_unneeded
from .prune import prune

ADJ_ZERO = 0.0
# an adjoint local starts (and restarts) at -0.0, the additive identity of IEEE arithmetic:
# -0.0 + x is x for every x (also x = +0.0 and -0.0), so the compiler may fold the first
# accumulation into an assignment; 0.0 + x is not x for x = -0.0 and must be kept. A
# gradient array element is cleared to +0.0 (ADJ_ZERO): that is a value the user sees.
ADJ_LOCAL_ZERO = -0.0


@dataclass
class Reversed:
    forward: list
    backward: list          # replay + adjoint (kernels); replay + adjoint + return (funcs);
                            # None for a function holding loop stacks (see holds_stacks)
    adj_params: list        # adjoint parameter names (kernel: float arrays; func: adj_ret...)
    active: set
    stacks: dict            # {loop stack name: kind of the value it records}
    counters: list          # loop iteration counters and reverse iteration variables (ints)
    kinds: dict             # {adjoint name: its type (float)} for every adjoint local and parameter
    loop_stacks: dict = None    # {loop uid: its stack names}
    fused: list = None      # kernels with no loop to reverse: the forward, stores kept, then
                            # the reverse pass (optimize/eager.py); else None
    walked_forward: tuple = ()  # the lines of the loops reversed in forward order (pass order)
    refused: tuple = None   # a kernel's backward refused at its launch: (line, why), see reverse


def adj(v):
    return "adj_" + v


class Reverser(Loops):
    """Builds the forward and backward bodies. Every loop is *recomputed* by default:
    the backward replays it (recording what its reverse needs). A loop in ``stored``
    (a top-level loop of a kernel, see optimize/store.py) is not replayed: the forward
    saves its values per thread and the backward reads them back."""

    def __init__(self, ssa, active_set, stored=(), tids=(), walk_forward=True, pruned=True):
        self.ssa = ssa
        self.walk_forward = walk_forward    # optimization pass order: may walk a loop forward
        self.pruned = pruned                # optimization pass prune: dead replay removed
        self.walked_forward = []            # the lines of the loops reversed in forward order
        self.pf = ssa.norm.pf
        self.namer = copy.deepcopy(ssa.namer)     # fresh names; the input is not edited
        self.active = active_set
        self.adj_arrays = {p.name for p in self.pf.differentiable() if p.is_array}
        self.loop_depth = 0
        self.names = {}         # loop uid -> its counter, iteration and stack names
        self.reversed = {}      # loop uid -> (reversed body, reversed latch)
        self.stored = set(stored)   # uids of the loops whose values the forward saves
        self.tids = list(tids)      # the thread's index names (the saved arrays' index)
        self.saved = {}             # {(loop uid, value name): its saved array parameter}
        self.saved_by_loop = {}     # {loop uid: [value names]}
        self.written = set()        # saved parameters the forward writes (store.py sets it)
        self.plain_depth = 0
        self.reverse_part = None    # the backward's reverse pass alone (assemble sets it)
        self.from_old = from_old_values(ssa.body)   # names computed from atomics' old values

    def adj_of(self, a):
        if isinstance(a, str):
            return adj(a)
        if isinstance(a, gast.Name) and a.id in self.active:
            return adj(a.id)
        return None

    # -- replay ----------------------------------------------------------------
    def plain(self, stmts, keep_stores=False):
        out = []
        for s in stmts:
            if isinstance(s, gast.AugAssign) or (
                    isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Subscript)):
                if keep_stores:
                    out.append(copy_tree(s))
                continue
            if isinstance(s, (gast.Return, Print)):      # (a replay prints nothing)
                if keep_stores:
                    out.append(copy_tree(s))
                continue
            if isinstance(s, CheckStmt) and not keep_stores and \
                    names_in(s) & self.from_old:
                continue        # (the forward checked this index; the replay lacks its value)
            if isinstance(s, gast.If):
                node = if_(s.test, self.plain(s.body, keep_stores) or [at(gast.Pass(), s.lineno)],
                           self.plain(s.orelse, keep_stores), s.lineno)
                out.append(node)
            elif isinstance(s, (gast.For, gast.While)):
                if keep_stores and self.plain_depth == 0 and s.loop.uid in self.stored:
                    out.extend(self.saving_loop(s))
                    continue
                self.plain_depth += 1
                body = self.plain(s.body, keep_stores) + self.plain(s.loop.latch, keep_stores)
                self.plain_depth -= 1
                out.append(self.loop_node(s, body))
            elif isinstance(s, gast.Assign) and isinstance(s.value, AtomicFetch) and \
                    not keep_stores:        # (its old value: refused where needed, below)
                is_float = self.ssa.kinds.get(s.targets[0].id) is FLOAT
                out.append(assign(s.targets[0].id, AtomicResult(s.lineno, is_float), s.lineno))
            else:
                out.append(copy_tree(s))
        return out

    def aug(self, stmts):
        """Replay that records every loop needing a reverse (outermost level only)."""
        out = []
        for s in stmts:
            if isinstance(s, gast.If):
                out.append(if_(s.test, self.aug(s.body) or [at(gast.Pass(), s.lineno)],
                               self.aug(s.orelse), s.lineno))
            elif isinstance(s, (gast.For, gast.While)) and self.loop_depth == 0 and \
                    s.loop.uid in self.stored:
                out.extend(self.saved_reads(s))
            elif isinstance(s, (gast.For, gast.While)) and self.needs_reverse(s):
                out.extend(self.recorded_loop(s))
            else:
                out.extend(self.plain([s]))
        return out

    def rev_block(self, stmts):
        out = []
        for s in reversed(stmts):
            out.extend(self.rev_stmt(s))
        return out

    def is_phi(self, s):
        """Whether ``s`` is a merge copy (pass ssa: ``SSA.phis``)."""
        return isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name) and \
            s.targets[0].id in self.ssa.phis

    def reset(self, z, s):
        if self.loop_depth > 0 or self.is_phi(s):
            return [assign(adj(z), const(ADJ_LOCAL_ZERO), s.lineno)]
        return []

    def rev_stmt(self, s):
        line = s.lineno
        out = []
        update = atomic_update(s)
        if update is not None:              # old = ad.atomic_add(a, i, v)
            if s.targets[0].id in self.active:
                raise backward_only(self.pf.error(
                    f"the old value {atomic_name(s.value)}() returns is used in a value whose "
                    "gradient is taken, and it has no derivative adjoint can compute (it is "
                    "the element as the threads before this one left it, in an order no "
                    "backward knows): use it for ints, indices or flags, or read the element "
                    "in a separate launch", s, stage="reverse"))
            return self.rev_stmt(update)
        if isinstance(s, gast.Assign):
            t, v = s.targets[0], s.value
            if isinstance(t, gast.Subscript):
                arr = t.value.id
                if arr not in self.adj_arrays:
                    return []
                slot = gast.Subscript(value=name(adj(arr)), slice=copy.deepcopy(t.slice), ctx=gast.Load())
                if self.adj_of(v):
                    out.append(at(gast.AugAssign(target=name(adj(v.id), store=True), op=gast.Add(),
                                                 value=slot), line))
                store_slot = copy.deepcopy(slot)
                store_slot.ctx = gast.Store()
                out.append(assign(store_slot, const(ADJ_ZERO), line))
                return out
            if isinstance(t, gast.Tuple):
                if isinstance(v, gast.Call) and v.callee.kind == "func" and \
                        any(e.id in self.active for e in t.elts):
                    seeds = [name(adj(e.id)) if e.id in self.active else const(0.0) for e in t.elts]
                    out = self.call_adjoint(v, seeds, line)
                    for e in t.elts:
                        if e.id in self.active:
                            out += self.reset(e.id, s)
                return out
            z = t.id
            if z not in self.active:
                return []
            if isinstance(v, gast.Name):
                if v.id in self.active:
                    out.append(at(gast.AugAssign(target=name(adj(v.id), store=True), op=gast.Add(),
                                                 value=name(adj(z))), line))
            elif isinstance(v, gast.Subscript):
                arr = v.value.id if isinstance(v.value, gast.Name) else None
                if arr in self.adj_arrays:
                    slot = gast.Subscript(value=name(adj(arr)), slice=copy.deepcopy(v.slice),
                                          ctx=gast.Store())
                    out.append(at(gast.AugAssign(target=slot, op=gast.Add(), value=name(adj(z))), line))
            elif isinstance(v, gast.Call) and v.callee.kind == "func":
                out += self.call_adjoint(v, [name(adj(z))], line)
            elif isinstance(v, (gast.BinOp, gast.UnaryOp, gast.Call)):
                key, args = operation(v)
                rule = lookup(key)
                if rule is None:
                    raise self.pf.error(f"no adjoint rule for '{key}'", s, stage="reverse")
                out += [at_all(x, line) for x in rule.reverse(z, args, self.adj_of)]
            return out + self.reset(z, s)
        if isinstance(s, AtomicMinMax):
            return self.rev_minmax(s)
        if isinstance(s, gast.AugAssign):
            arr = s.target.value.id
            if arr not in self.adj_arrays or not self.adj_of(s.value):
                return []
            slot = gast.Subscript(value=name(adj(arr)), slice=copy.deepcopy(s.target.slice),
                                  ctx=gast.Load())
            op = gast.Add() if isinstance(s.op, gast.Add) else gast.Sub()
            return [at(gast.AugAssign(target=name(adj(s.value.id), store=True), op=op, value=slot), line)]
        if isinstance(s, gast.If):
            body, orelse = self.rev_block(s.body), self.rev_block(s.orelse)
            if not body and not orelse:
                return []
            if not body:
                test = gast.UnaryOp(op=gast.Not(), operand=copy.deepcopy(s.test))
                return [if_(test, orelse, [], line)]
            return [if_(copy.deepcopy(s.test), body, orelse, line)]
        if isinstance(s, (gast.For, gast.While)):
            return self.rev_loop(s)
        if isinstance(s, gast.Return):
            vals = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
            for k, a in enumerate(vals):
                if self.adj_of(a):
                    seed = "adj_ret" if len(vals) == 1 else f"adj_ret{k}"
                    out.append(at(gast.AugAssign(target=name(adj(a.id), store=True), op=gast.Add(),
                                                 value=name(seed)), line))
            return out
        return []

    def rev_minmax(self, s):
        """``ad.atomic_min(arr, i, v)`` (or max): ``if v == arr[i]: adj_v += adj_arr[i];
        adj_arr[i] = 0.0``, reading the element as the launch left it. The value that
        survived gets the element's gradient (Warp's test), and then the element's
        earlier value no longer does, as after a store (Warp leaves it there too). On a
        tie which of the tied values gets it is not specified (docs/from-warp.md)."""
        arr = s.target.value.id
        if arr not in self.adj_arrays:
            return []
        element = gast.Subscript(value=name(arr), slice=copy.deepcopy(s.target.slice),
                                 ctx=gast.Load())
        test = gast.Compare(left=copy.deepcopy(s.value), ops=[gast.Eq()], comparators=[element])
        slot = gast.Subscript(value=name(adj(arr)), slice=copy.deepcopy(s.target.slice),
                              ctx=gast.Load())
        out = []
        if self.adj_of(s.value):
            out.append(at(gast.AugAssign(target=name(adj(s.value.id), store=True), op=gast.Add(),
                                         value=slot), s.lineno))
        clear = copy.deepcopy(slot)
        clear.ctx = gast.Store()
        out.append(assign(clear, const(ADJ_ZERO), s.lineno))
        return [if_(test, out, [], s.lineno)]

    def call_adjoint(self, call, seeds, line):
        func = call.callee.target
        # a func's float array parameters: the caller's adjoint arrays, accumulated into
        # (only a func with a custom gradient keeps its call with arrays: pass inline)
        adj_arrays = [name(adj(a.id)) for a, p in zip(call.args, func.transformed.pf.params)
                      if p.is_array and p.kind.differentiable]
        fn = gast.Call(func=name(f"{func.name}_adjoint"),
                       args=[copy.deepcopy(a) for a in call.args] + adj_arrays + seeds,
                       keywords=[])
        fn.callee = dataclasses.replace(call.callee, part="adjoint")   # not its forward
        wanted = [(k, a) for k, a in enumerate(call.args) if self.adj_of(a)]
        if not wanted and adj_arrays:
            return [at(gast.Expr(value=fn), line)]
        if not wanted:
            return []
        if len(call.args) == 1:
            return [at(gast.AugAssign(target=name(adj(call.args[0].id), store=True), op=gast.Add(),
                                      value=fn), line)]
        tmp = self.namer.fresh(f"d_{func.name}")
        out = [assign(tmp, fn, line)]
        for k, a in wanted:
            item = gast.Subscript(value=name(tmp), slice=const(k), ctx=gast.Load())
            out.append(at(gast.AugAssign(target=name(adj(a.id), store=True), op=gast.Add(),
                                         value=item), line))
        return out


def at_all(stmt, line):
    for n in gast.walk(stmt):
        if isinstance(n, gast.stmt):
            n.lineno = line
    return stmt


def holds_stacks(stmts):
    """Whether ``stmts`` hold loop-stack nodes: a generated backward printed as user code
    (emit/user.py) and transformed again. Its reverse mode is not built (the reverse of a
    stack is not defined): forward over reverse uses its JVP."""
    return any(isinstance(n, (StackNew, StackPush, StackRead))
               for s in stmts for n in gast.walk(s))


def reverse(ssa, active_set, forward_only=False, walk_forward=True, pruned=True):
    """The ``Reversed`` of an SSA function; with ``forward_only`` (or loop stacks in it,
    see ``holds_stacks``) its forward only, ``backward`` None. ``walk_forward`` (the
    optimization pass order): a loop whose iterations' adjoints do not depend on each
    other is reversed in forward order; ``pruned`` (the optimization pass prune): replay
    code whose values the backward never reads is left out."""
    r = Reverser(ssa, active_set, walk_forward=walk_forward, pruned=pruned)
    if forward_only or holds_stacks(ssa.body):
        return Reversed(r.plain(ssa.body, keep_stores=True), None, [], active_set, {}, [], {},
                        {})
    try:
        forward, backward, adj_params, adj_vars = assemble(r)
        old_values_unneeded(ssa.norm.pf, backward)
    except TransformError as exc:
        # a kernel whose backward cannot be built still runs forward (as Warp's does): the
        # refusal is raised where its backward is launched (emit/spec.py), naming the line
        if ssa.norm.pf.role != "kernel" or not getattr(exc, "backward_only", False):
            raise
        r = Reverser(ssa, active_set, walk_forward=walk_forward, pruned=pruned)
        return Reversed(r.plain(ssa.body, keep_stores=True), None, [], active_set, {}, [], {},
                        {}, refused=(exc.lineno, exc.reason))
    stacks = {stack: ssa.kinds.get(v, FLOAT) for names in r.names.values()
              for v, stack in names["stacks"].items()}
    counters = [n for names in r.names.values() for n in (names["count"], names["it"])]
    kinds = {adj(v): FLOAT.adjoint for v in adj_vars}
    kinds.update({a: FLOAT.adjoint for a in adj_params})
    loop_stacks = {uid: list(names["stacks"].values()) for uid, names in r.names.items()}
    fused = None
    if ssa.norm.pf.role == "kernel" and not r.names:
        # no loop is recorded or reversed: the replay is the forward without its stores
        fused = _pruned(r, [copy_tree(s) for s in forward] + r.reverse_part)
    return Reversed(forward, backward, adj_params, active_set, stacks, counters, kinds,
                    loop_stacks, fused, tuple(r.walked_forward))


def _pruned(r, body):
    return prune(body) if r.pruned else body


def assemble(r):
    """(forward, backward, adjoint parameters, adjoint locals) built by the reverser ``r``."""
    ssa, active_set = r.ssa, r.active
    pf = ssa.norm.pf
    replay = r.aug(ssa.body)
    rev = r.rev_block(ssa.body)
    adj_vars = sorted(active_set - set(ssa.params))
    if pf.role == "func":
        float_params = [p.name for p in pf.differentiable() if not p.is_array]
        adj_vars = sorted(set(adj_vars) | set(float_params))
    line = pf.node.lineno
    init = [assign(adj(v), const(ADJ_LOCAL_ZERO), None) for v in adj_vars]
    reverse_part = [comment("reverse pass: every adjoint starts at zero, statements in reverse "
                            "order")] + init + rev
    r.reverse_part = [copy_tree(s) for s in reverse_part]     # (pass eager builds on it)
    backward = ([comment("forward replay (stores and atomics are not repeated)")] + replay +
                reverse_part)
    if pf.role == "func":
        rets = [name(adj(p.name)) if p.kind.differentiable and not p.is_array else const(0.0)
                for p in pf.params]
        value = rets[0] if len(rets) == 1 else gast.Tuple(elts=rets, ctx=gast.Load())
        backward.append(at(gast.Return(value=value), line))
        backward = _pruned(r, backward)
        n = ssa.norm.n_returns
        # (a func's array adjoints, accumulated into: its calls are inlined, pass inline)
        adj_params = [adj(p.name) for p in pf.differentiable() if p.is_array]
        adj_params += ["adj_ret"] if n == 1 else [f"adj_ret{k}" for k in range(n)]
    else:
        backward = _pruned(r, backward)
        adj_params = [adj(p.name) for p in pf.differentiable()]
    r.written = {n.id for x in backward for n in gast.walk(x) if isinstance(n, gast.Name)} & \
        set(r.saved.values())
    forward = r.plain(ssa.body, keep_stores=True)
    return forward, backward, adj_params, adj_vars
