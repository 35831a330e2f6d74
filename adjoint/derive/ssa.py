"""Pass ssa: every name assigned once per execution of its block.

Expects: a ``Normalized`` function and its kinds (pass types).
Guarantees:
- a plain assignment ``b = a`` stays an explicit copy with its own name;
- a name reassigned in straight-line code gets a new version (``x``, ``x_1``);
- after an ``if`` whose branches leave different versions of a name that is
  read later, both branches end with a copy into one merge name (a phi;
  ``SSA.phis`` lists the merge names and loop headers);
- each loop's ``LoopInfo`` lists its carried names (header versions read at
  the start of an iteration), entered by copies placed before the loop and
  updated by the loop's ``latch`` (back-edge copies, the break test and the
  recomputed ``while`` condition). A loop body never reassigns a carried name,
  so restoring the carried names restores the state at an iteration's start.
- ``SSA.origin`` maps each version to the user's name, ``SSA.kinds`` gives
  every version its kind.
"""
import copy
import dataclasses
from collections import Counter
from dataclasses import dataclass

import gast

from ..rules.types import of
from .ir import (ComponentCheck, Print, StackNew, assign, at, const, if_, load_names, name, target_names,
                 value_names, walk_stmts)

@dataclass
class SSA:
    norm: object
    body: list
    origin: dict      # version -> user's name
    kinds: dict       # version -> kind
    params: list      # parameter names
    namer: object = None    # the normalize namer with every version taken (a copy)
    phis: frozenset = frozenset()   # merge names: assigned by the copies ending both branches
                                    # of an ``if``, or before a loop and by its latch


def ssa(norm, kinds):
    pf = norm.pf
    params = [p.name for p in pf.params]
    b = _Builder(norm, kinds, params)
    env = {p: p for p in params}
    body = b.block(copy.deepcopy(norm.body), env, loop_reads=frozenset())   # (renamed in place)
    return SSA(norm, body, b.origin, {v: kinds[o] for v, o in b.origin.items()
                                       if o in kinds}, params, b.namer, frozenset(b.phis))


def _reads(stmts):
    c = Counter()
    for s in walk_stmts(stmts):
        c.update(load_names(s))
        info = getattr(s, "loop", None)
        if info is not None and info.break_flag:
            c[info.break_flag] += 1
    return c


def _assigned(stmts):
    out = []
    for s in walk_stmts(stmts):
        for t in target_names(s):
            if t not in out:
                out.append(t)
    return out


def _exposed(stmts, defined):
    """Names read in ``stmts`` before being assigned on every path (in order)."""
    out = []
    for s in stmts:
        if isinstance(s, gast.If):
            out += [n for n in load_names(s) if n not in defined]
            d1, d2 = set(defined), set(defined)
            out += _exposed(s.body, d1) + _exposed(s.orelse, d2)
            defined |= d1 & d2
        elif isinstance(s, (gast.For, gast.While)):
            out += [n for n in load_names(s) if n not in defined]
            inner = set(defined) | set(target_names(s))
            out += _exposed(s.body, inner)
        else:
            out += [n for n in load_names(s) if n not in defined]
            defined |= set(target_names(s))
    return out


class _Builder:
    def __init__(self, norm, kinds, params):
        self.norm, self.kinds, self.namer = norm, kinds, copy.deepcopy(norm.namer)
        self.origin = {p: p for p in params}
        self.total_reads = _reads(norm.body)
        self.used_versions = set(params)
        self.phis = set()           # (SSA.phis)

    def version(self, orig):
        if orig not in self.used_versions:
            self.used_versions.add(orig)
            v = orig
        else:
            v = self.namer.fresh(orig)
            self.used_versions.add(v)
        self.origin[v] = orig
        return v

    def default(self, orig):
        kind = of(self.kinds[orig])
        if kind.element is not None:        # a loop stack: a new, empty one
            return StackNew(kind.element, const(1), const(kind.element.zero))
        return const(kind.zero)

    def rename(self, node, env):
        for n in value_names(node):
            if n.id not in env:
                raise self.norm.pf.error(f"'{n.id}' may be used before it is assigned",
                                         node, stage="ssa")
            n.id = env[n.id]
        return node

    def needed_after(self, stmt_reads, orig, loop_reads):
        return self.total_reads[orig] - stmt_reads[orig] > 0 or orig in loop_reads

    def block(self, stmts, env, loop_reads):
        out = []
        for s in stmts:
            out.extend(self.stmt(s, env, loop_reads))
        return out

    def stmt(self, s, env, loop_reads):
        if isinstance(s, gast.Assign):
            self.rename(s.value, env)
            t = s.targets[0]
            if isinstance(t, gast.Subscript):
                self.rename(t.slice, env)
                return [s]
            elts = t.elts if isinstance(t, gast.Tuple) else [t]
            for e in elts:
                orig = e.id
                e.id = self.version(orig)
                env[orig] = e.id
            return [s]
        if isinstance(s, gast.AugAssign):
            self.rename(s.target.slice, env)
            self.rename(s.value, env)
            return [s]
        if isinstance(s, gast.Return):
            self.rename(s.value, env)
            return [s]
        if isinstance(s, gast.If):
            return self.if_(s, env, loop_reads)
        if isinstance(s, (gast.For, gast.While)):
            return self.loop(s, env, loop_reads)
        if isinstance(s, Print):
            for a in s.args:
                self.rename(a, env)
            return [s]
        if isinstance(s, ComponentCheck):
            self.rename(s.index, env)
            return [s]
        if isinstance(s, gast.Pass):
            return [s]
        raise self.norm.pf.error(f"unexpected statement {type(s).__name__}", s, stage="ssa")

    def if_(self, s, env, loop_reads):
        inside = _reads([s])
        self.rename(s.test, env)
        assigned = _assigned(s.body + s.orelse)
        env_t, env_e = dict(env), dict(env)
        s.body = self.block(s.body, env_t, loop_reads)
        s.orelse = self.block(s.orelse, env_e, loop_reads)
        for orig in assigned:
            if not self.needed_after(inside, orig, loop_reads):
                continue
            a, b = env_t.get(orig), env_e.get(orig)
            if a == b and a is not None:
                env[orig] = a
                continue
            merged = self.version(orig)
            s.body.append(assign(merged, name(a) if a else self.default(orig), s.lineno))
            s.orelse.append(assign(merged, name(b) if b else self.default(orig), s.lineno))
            self.phis.add(merged)
            env[orig] = merged
        return [s]

    def loop(self, s, env, loop_reads):
        info = s.loop
        line = s.lineno
        pre = []
        inside = _reads([s])
        if isinstance(s, gast.For):
            self.rename(s.iter, env)
        cond_assigned = _assigned(info.cond)
        body_assigned = _assigned(s.body)
        if isinstance(s, gast.For):
            body_assigned = [s.target.id] + [v for v in body_assigned if v != s.target.id]
        first = set(target_names(s))
        exposed = set(_exposed(s.body, set(first)))
        if isinstance(s, gast.While):
            exposed.add(s.test.id)
        inner_reads = loop_reads | frozenset(inside)
        carried = []
        for orig in body_assigned + [v for v in cond_assigned if v not in body_assigned]:
            if orig in exposed or self.needed_after(inside, orig, loop_reads):
                carried.append(orig)
        header = {}
        for orig in carried:
            h = self.version(orig)
            src = name(env[orig]) if orig in env else self.default(orig)
            pre.append(assign(h, src, line))
            self.phis.add(h)
            header[orig] = h
            env[orig] = h
        if isinstance(s, gast.While):
            s.test.id = env[s.test.id]
        body_env = dict(env)
        if isinstance(s, gast.For):
            orig = s.target.id
            s.target.id = self.version(orig)
            body_env[orig] = s.target.id
        s.body = self.block(s.body, body_env, inner_reads)
        latch = []
        for orig in carried:
            if orig in cond_assigned and orig not in body_assigned:
                continue
            if body_env[orig] != header[orig]:
                latch.append(assign(header[orig], name(body_env[orig]), line))
        if info.break_flag:
            test = name(body_env[info.break_flag])
            latch.append(if_(test, [at(gast.Break(), line)], [], line))
        latch_env = dict(body_env)
        latch_env.update(header)
        cond = self.block(info.cond, latch_env, inner_reads)
        latch += cond
        for orig in carried:
            if orig in cond_assigned and orig not in body_assigned and latch_env[orig] != header[orig]:
                latch.append(assign(header[orig], name(latch_env[orig]), line))
        s.loop = dataclasses.replace(info, latch=latch, cond=[],
                                     carried=[header[o] for o in carried])   # (its own copy)
        for orig, h in header.items():
            env[orig] = h
        return pre + [s]
