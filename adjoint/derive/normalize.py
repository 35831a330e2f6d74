"""Pass normalize: desugar and flatten into A-normal form.

Expects: a fenced ``ParsedFunction``.
Guarantees, for the returned ``Normalized`` body:
- no ``break``/``continue``; no ``return`` except one final one in funcs (a func
  returning nothing, ``n_returns == 0``, ends with ``return 0``, a value no call reads).
  Exits become flags: ``skip`` (rest of the iteration is skipped), a loop's
  ``break_flag`` (tested at the end of each iteration) and ``returned``;
  statements after a possible exit are guarded by ``if not <flag>:``;
- one operation per statement: ``x = op(atoms)`` where an atom is a name or a
  constant; chained comparisons, ``and``/``or`` and ternaries become ``if``
  statements (short-circuit order is kept); ``s += v`` becomes ``s = s + v``;
- an operator that the function's dialect gives another meaning (runtime/dialect.py:
  Warp's ``x % y`` is C's) is a call of that meaning's rule (``rt.trunc_mod(x, y)``),
  whose ``Callee`` says so; ``x / y`` stays an operator where an operand is a float
  literal (a float quotient: the operator's meaning in every dialect);
- stores ``arr[i, j] = atom``, accumulations ``arr[i] += atom`` /
  ``arr[i] -= atom`` (``ad.atomic_add``/``atomic_sub`` become these), and
  ``AtomicMinMax`` statements (``ad.atomic_min``/``atomic_max``) and ``AtomicBits``
  (``ad.atomic_and``/``atomic_or``/``atomic_xor``); an atomic whose value is taken
  (``old = ad.atomic_add(a, i, v)``, or inside an expression: Warp's old value) is
  ``old = AtomicFetch(a[i], op, v)`` wherever it stands;
- ``for k in range(start, stop, step)`` with all three atoms, ``while c:``
  with ``c`` a name recomputed by ``node.loop.cond``; every loop is an IR
  ``For``/``While`` whose declared field ``loop`` is its ``LoopInfo``. Every
  statement carries the user's ``lineno``;
- the loop stacks of a generated backward printed as user code
  (``s = ad.stack_float(n, v)``, ``ad.stack_push``, ``ad.stack_read``) are the
  IR's stack nodes (``StackNew``, ``StackPush``, ``StackRead``) on atoms.
"""
import copy
import dataclasses
from dataclasses import dataclass

import gast

from ..frontend.parse import Callee
from ..rules import lookup
from ..rules.types import of
from .ir import BlockRewriter
from .ir import (AtomicBits, AtomicFetch, AtomicMinMax, ComponentCheck, LoopInfo, MaxOp, MinOp, Namer, Print, StackNew,
                 StackPush, StackRead, assign, at, const, if_, is_atom, loop_like, name)

BIT_ATOMICS = {"atomic_and": gast.BitAnd, "atomic_or": gast.BitOr, "atomic_xor": gast.BitXor}
# the operator of each atomic, in the statement form and in ``AtomicFetch`` (its old value)
ATOMIC_OPS = {"atomic_add": gast.Add, "atomic_sub": gast.Sub, "atomic_min": MinOp,
              "atomic_max": MaxOp, **BIT_ATOMICS}


@dataclass
class Normalized:
    pf: object          # the ParsedFunction
    body: list          # normalized statements
    namer: Namer
    n_returns: int      # funcs: number of returned values (0: none, its return gives 0); kernels: 0


@dataclass
class _LoopCtx:
    skip: str
    brk: str
    used: bool = False


def normalize(pf):
    taken = {n.id for n in gast.walk(pf.node) if isinstance(n, gast.Name)}
    taken |= {p.name for p in pf.params}
    namer = Namer(taken)
    n_returns = _count_returns(pf)
    # (the lowering and ANF rewrite nodes in place: they work on a copy of the parsed tree)
    lowered = _ExitLowering(pf, namer, n_returns).run(copy.deepcopy(pf.node.body))
    body = _Unshare().block(_Anf(pf, namer).block(lowered))
    return Normalized(pf, body, namer, n_returns)


class _Unshare(gast.NodeTransformer):
    """Give every node one parent: atoms reused by ANF become copies, so that a
    later pass renaming one use never renames another."""

    def __init__(self):
        self.seen = set()

    def block(self, stmts):
        return [self.visit(s) for s in stmts]

    def visit(self, node):
        if id(node) in self.seen:
            node = copy.deepcopy(node)
        self.seen.add(id(node))
        node = super().visit(node)
        info = getattr(node, "loop", None)
        if info is not None:
            node.loop = dataclasses.replace(info, cond=self.block(info.cond))
        return node


def _count_returns(pf):
    counts = set()
    for node in gast.walk(pf.node):
        if isinstance(node, gast.Return):
            if node.value is None:
                counts.add(0)
            elif isinstance(node.value, gast.Tuple):
                counts.add(len(node.value.elts))
            else:
                counts.add(1)
    if pf.role == "kernel":
        return 0
    if not counts:
        return 0                    # a func that only writes arrays: called as a statement
    if len(counts) > 1:
        raise pf.error("every return of a func must return the same number of values",
                       pf.node, stage="normalize")
    return counts.pop()


class _ExitLowering:
    """break/continue/return -> flags and guards (still on surface syntax)."""

    def __init__(self, pf, namer, n_returns):
        self.pf, self.namer, self.n_returns = pf, namer, n_returns
        self.ret_flag = None
        self.retvals = None
        self.loop_uid = 0

    def run(self, body):
        returns = [n for s in body for n in gast.walk(s) if isinstance(n, gast.Return)]
        if not returns or (len(returns) == 1 and body[-1] is returns[0]):
            tail = body[-1] if returns else None
            out, _ = self.block(body[:-1] if returns else body, None)
            if self.pf.role == "func":
                out.append(tail if tail is not None and tail.value is not None else
                           self.no_value(tail))
            return out
        self.ret_flag = self.namer.fresh("returned")
        if self.n_returns == 1:
            self.retvals = [self.namer.fresh("retval")]
        elif self.n_returns > 1:
            self.retvals = [self.namer.fresh(f"retval{k}") for k in range(self.n_returns)]
        line = self.pf.node.lineno
        out, _ = self.block(body, None)
        out = [assign(self.ret_flag, const(False), line)] + out
        if self.retvals:
            value = name(self.retvals[0]) if len(self.retvals) == 1 else \
                gast.Tuple(elts=[name(r) for r in self.retvals], ctx=gast.Load())
            out.append(at(gast.Return(value=value), self.pf.node.body[-1].lineno))
        elif self.pf.role == "func":
            out.append(self.no_value(None))
        return out

    def no_value(self, tail):
        """The final return of a func that returns nothing (``n_returns == 0``): it returns
        the int 0, which no caller reads (fence refuses a use of the call's value) and
        which carries no adjoint."""
        line = tail.lineno if tail is not None else self.pf.node.body[-1].lineno
        return at(gast.Return(value=const(0)), line)

    def block(self, stmts, loop):
        out = []
        for i, s in enumerate(stmts):
            new, exits = self.stmt(s, loop)
            out.extend(new)
            if exits == "always":
                return out, True
            if exits:
                rest, _ = self.block(stmts[i + 1:], loop)
                if rest:
                    flag = loop.skip if loop is not None else self.ret_flag
                    test = gast.UnaryOp(op=gast.Not(), operand=name(flag))
                    out.append(if_(test, rest, [], stmts[i + 1].lineno))
                return out, True
        return out, False

    def stmt(self, s, loop):
        line = s.lineno
        if isinstance(s, gast.Break):
            loop.used = True
            return [assign(loop.brk, const(True), line), assign(loop.skip, const(True), line)], "always"
        if isinstance(s, gast.Continue):
            loop.used = True
            return [assign(loop.skip, const(True), line)], "always"
        if isinstance(s, gast.Return):
            out = []
            if s.value is not None:
                vals = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
                out += [assign(r, v, line) for r, v in zip(self.retvals, vals)]
            out.append(assign(self.ret_flag, const(True), line))
            if loop is not None:
                loop.used = True
                out += [assign(loop.brk, const(True), line), assign(loop.skip, const(True), line)]
            return out, "always"
        if isinstance(s, gast.If):
            body, e1 = self.block(s.body, loop)
            orelse, e2 = self.block(s.orelse, loop)
            s.body, s.orelse = body or [at(gast.Pass(), line)], orelse
            return [s], e1 or e2
        if isinstance(s, (gast.For, gast.While)):
            return self.loop(s, loop)
        return [s], False

    def loop(self, s, outer):
        line = s.lineno
        uid = self.loop_uid
        self.loop_uid += 1
        ctx = _LoopCtx(self.namer.fresh("skip"), self.namer.fresh("brk"))
        body, _ = self.block(s.body, ctx)
        pre = []
        if ctx.used:
            pre = [assign(ctx.brk, const(False), line), assign(ctx.skip, const(False), line)]
            body = [assign(ctx.skip, const(False), line)] + body
        s = loop_like(s, LoopInfo(uid=uid, break_flag=ctx.brk if ctx.used else None),
                      body=body or [at(gast.Pass(), line)])
        out = [s]
        may_return = self.ret_flag is not None and any(
            isinstance(n, gast.Assign) and isinstance(n.targets[0], gast.Name)
            and n.targets[0].id == self.ret_flag for n in gast.walk(s))
        if not may_return:
            return pre + out, False
        if outer is not None:
            outer.used = True
            out.append(if_(name(self.ret_flag), [assign(outer.brk, const(True), line),
                                                 assign(outer.skip, const(True), line)], [], line))
        return pre + out, True


class _Anf(BlockRewriter):
    """Flatten expressions: one operation per statement."""

    def __init__(self, pf, namer):
        self.pf, self.namer = pf, namer

    def err(self, reason, node):
        return self.pf.error(reason, node, stage="normalize")

    def stmt(self, s):
        line = s.lineno
        if isinstance(s, gast.Assign):
            t = s.targets[0]
            if isinstance(t, gast.Name):
                return self.into(t.id, s.value, line)
            if isinstance(t, gast.Subscript):
                pre, idx = self.indices(t, line)
                pre2, v = self.atom(s.value, line)
                return pre + pre2 + [assign(self.subscript(t.value.id, idx, store=True), v, line)]
            # tuple target
            if isinstance(s.value, gast.Call):
                pre, args = self.atoms(s.value.args, line)
                call = self.call(s.value, args)
                n = len(t.elts)
                callee = s.value.callee
                if callee.kind == "func" and callee.target.n_returns != n:
                    raise self.err(f"'{callee.name}' returns {callee.target.n_returns} value(s), "
                                   f"not {n}", s)
                if callee.kind not in ("func", "tid"):
                    raise self.err(f"{callee.name}() returns one value, not {n}", s)
                tgt = gast.Tuple(elts=[name(e.id, store=True) for e in t.elts], ctx=gast.Store())
                return pre + [assign(tgt, call, line)]
            if isinstance(s.value, gast.Tuple):
                if len(s.value.elts) != len(t.elts):
                    raise self.err("tuple assignment with mismatched lengths", s)
                pre, temps = [], []
                for v in s.value.elts:
                    tmp = self.namer.temp()
                    pre += self.into(tmp, v, line)
                    temps.append(tmp)
                return pre + [assign(e.id, name(tmp), line) for e, tmp in zip(t.elts, temps)]
            raise self.err("a tuple target needs a tuple or a call on the right", s)
        if isinstance(s, gast.AugAssign):
            if isinstance(s.target, gast.Name):
                value = gast.BinOp(left=name(s.target.id), op=s.op, right=s.value)
                return self.into(s.target.id, value, line)
            pre, idx = self.indices(s.target, line)
            pre2, v = self.atom(s.value, line)
            tgt = self.subscript(s.target.value.id, idx, store=True)
            return pre + pre2 + [at(gast.AugAssign(target=tgt, op=s.op, value=v), line)]
        if isinstance(s, gast.Expr):
            v = s.value
            if isinstance(v, gast.Call) and v.callee.kind == "atomic":
                pre, args = self.atoms(v.args[1:], line)
                tgt = self.subscript(v.args[0].id, args[:-1], store=True)
                if v.callee.name in ("atomic_min", "atomic_max"):
                    op = MinOp() if v.callee.name == "atomic_min" else MaxOp()
                    return pre + [at(AtomicMinMax(target=tgt, op=op, value=args[-1]), line)]
                if v.callee.name in BIT_ATOMICS:
                    op = BIT_ATOMICS[v.callee.name]()
                    return pre + [at(AtomicBits(target=tgt, op=op, value=args[-1]), line)]
                op = gast.Add() if v.callee.name == "atomic_add" else gast.Sub()
                return pre + [at(gast.AugAssign(target=tgt, op=op, value=args[-1]), line)]
            if isinstance(v, gast.Call) and v.callee.kind == "print":
                pre, args = [], []
                for a in v.args:
                    if isinstance(a, gast.Constant) and isinstance(a.value, str):
                        args.append(a)
                    else:
                        p, x = self.atom(a, line)
                        pre, args = pre + p, args + [x]
                return pre + [at(Print(args), line)]
            if isinstance(v, gast.Call):
                pre, _ = self.atom(v, line)
                return pre
            return []
        if isinstance(s, gast.If):
            pre, test = self.atom(s.test, line)
            body = self.block(s.body) or [at(gast.Pass(), line)]
            return pre + [if_(test, body, self.block(s.orelse), line)]
        if isinstance(s, gast.For):
            args = list(s.iter.args)
            if len(args) == 1:
                args = [const(0), args[0], const(1)]
            elif len(args) == 2:
                args = args + [const(1)]
            pre, atoms = self.atoms(args, line)
            it = gast.Call(func=name("range"), args=atoms, keywords=[])
            return pre + [loop_like(s, s.loop, target=name(s.target.id, store=True), iter=it,
                                    body=self.block(s.body))]
        if isinstance(s, gast.While):
            cond_var = self.namer.fresh("cond")
            pre = self.into(cond_var, s.test, line)
            info = dataclasses.replace(s.loop, cond=self.into(cond_var, s.test, line))
            return pre + [loop_like(s, info, test=name(cond_var), body=self.block(s.body))]
        if isinstance(s, gast.Return):
            vals = s.value.elts if isinstance(s.value, gast.Tuple) else [s.value]
            pre, atoms = self.atoms(vals, line)
            value = atoms[0] if len(atoms) == 1 else gast.Tuple(elts=atoms, ctx=gast.Load())
            return pre + [at(gast.Return(value=value), line)]
        if isinstance(s, gast.Pass):
            return []
        if isinstance(s, ComponentCheck):       # (pass bounds makes it a check)
            node = copy.copy(s)
            pre, node.index = self.atom(s.index, line)
            return pre + [at(node, line)]
        raise self.err(f"unexpected statement {type(s).__name__}", s)

    # -- expressions ---------------------------------------------------------
    def atom(self, e, line):
        if is_atom(e):
            return [], e
        if isinstance(e, gast.UnaryOp) and isinstance(e.op, gast.USub) and \
                isinstance(e.operand, gast.Constant):
            return [], const(-e.operand.value)
        tmp = self.namer.temp()
        return self.into(tmp, e, line), name(tmp)

    def atoms(self, exprs, line):
        pre, out = [], []
        for e in exprs:
            p, a = self.atom(e, line)
            pre += p
            out.append(a)
        return pre, out

    def indices(self, sub, line):
        idx = sub.slice.elts if isinstance(sub.slice, gast.Tuple) else [sub.slice]
        return self.atoms(idx, line)

    @staticmethod
    def subscript(arr, idx, store=False):
        sl = idx[0] if len(idx) == 1 else gast.Tuple(elts=list(idx), ctx=gast.Load())
        return gast.Subscript(value=name(arr), slice=sl,
                              ctx=gast.Store() if store else gast.Load())

    @staticmethod
    def call(node, args):
        new = gast.Call(func=node.func, args=args, keywords=[])
        new.callee = node.callee
        return new

    def stack(self, e, args):
        """The stack node of an ``ad.stack_*`` call on atoms ``args``."""
        want = {"stack_push": 3, "stack_read": 2}.get(e.callee.name, 2)
        if len(args) != want:
            raise self.err(f"ad.{e.callee.name}() takes {want} arguments", e)
        if e.callee.name == "stack_push":
            return StackPush(*args)
        if e.callee.name == "stack_read":
            return StackRead(*args)
        return StackNew(of(e.callee.name[len("stack_"):]), *args)

    def into(self, target, e, line):
        """Statements computing ``e`` whose last one assigns ``target``."""
        if is_atom(e):
            return [assign(target, e, line)]
        if isinstance(e, gast.BinOp):
            pre, (a, b) = self.atoms([e.left, e.right], line)
            key = self.pf.dialect.operator_rule(type(e.op).__name__)
            if key is not None and not (isinstance(e.op, gast.Div) and
                                        any(_float_literal(x) for x in (a, b))):
                call = gast.Call(func=lookup(key).callee_expr(), args=[a, b], keywords=[])
                call.callee = Callee("op", key)
                return pre + [assign(target, call, line)]
            return pre + [assign(target, gast.BinOp(left=a, op=e.op, right=b), line)]
        if isinstance(e, gast.UnaryOp):
            if isinstance(e.op, gast.UAdd):
                return self.into(target, e.operand, line)
            pre, a = self.atom(e.operand, line)
            if isinstance(e.op, gast.USub) and isinstance(a, gast.Constant):
                return pre + [assign(target, const(-a.value), line)]
            return pre + [assign(target, gast.UnaryOp(op=e.op, operand=a), line)]
        if isinstance(e, gast.Compare):
            if len(e.ops) == 1:
                pre, (a, b) = self.atoms([e.left, e.comparators[0]], line)
                return pre + [assign(target, gast.Compare(left=a, ops=e.ops, comparators=[b]), line)]
            # a < b < c  ->  a < b and b < c, evaluating b once
            pre, (a, b) = self.atoms([e.left, e.comparators[0]], line)
            first = gast.Compare(left=a, ops=[e.ops[0]], comparators=[b])
            rest = gast.Compare(left=b, ops=e.ops[1:], comparators=e.comparators[1:])
            return pre + self.into(target, gast.BoolOp(op=gast.And(), values=[first, rest]), line)
        if isinstance(e, gast.BoolOp):
            out = self.into(target, e.values[0], line)
            rest = e.values[1:]
            if not rest:
                return out
            tail = rest[0] if len(rest) == 1 else gast.BoolOp(op=e.op, values=rest)
            inner = self.into(target, tail, line)
            if isinstance(e.op, gast.And):
                return out + [if_(name(target), inner, [], line)]
            neg = self.namer.temp()
            return out + [assign(neg, gast.UnaryOp(op=gast.Not(), operand=name(target)), line),
                          if_(name(neg), inner, [], line)]
        if isinstance(e, gast.IfExp):
            pre, c = self.atom(e.test, line)
            return pre + [if_(c, self.into(target, e.body, line),
                              self.into(target, e.orelse, line), line)]
        if isinstance(e, gast.Call) and e.callee.kind == "atomic":
            pre, args = self.atoms(e.args[1:], line)     # old = ad.atomic_add(a, i, v)
            fetch = AtomicFetch(target=self.subscript(e.args[0].id, args[:-1]),
                                op=ATOMIC_OPS[e.callee.name](), value=args[-1])
            return pre + [assign(target, fetch, line)]
        if isinstance(e, gast.Call):
            pre, args = self.atoms(e.args, line)
            if e.callee.kind == "stack":
                return pre + [assign(target, self.stack(e, args), line)]
            return pre + [assign(target, self.call(e, args), line)]
        if isinstance(e, gast.Subscript):
            if isinstance(e.value, gast.Attribute):   # arr.shape[k]
                return [assign(target, e, line)]
            pre, idx = self.indices(e, line)
            return pre + [assign(target, self.subscript(e.value.id, idx), line)]
        raise self.err(f"unsupported expression {type(e).__name__}", e)


def _float_literal(atom):
    return isinstance(atom, gast.Constant) and type(atom.value) is float
