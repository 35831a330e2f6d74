"""Pass reverse's loops (derive/reverse.py): recorded, stored and reversed.

Expects: mixed into ``Reverser``, which provides ``plain``, ``aug``, ``rev_block``,
``is_phi`` and the state these methods share (names, stacks, saved arrays).
Guarantees: a loop's replay records each carried value at the start of every
iteration in a per-thread stack (preallocated from the trip count, grown when a
``while`` needs it); its reverse walks the iterations backwards, restoring the
carried values of iteration ``k`` and recomputing its body before reversing it, so
values a later iteration overwrote are exact. A loop whose iterations' adjoints do
not depend on each other (derive/order.py) is reversed in forward order instead. A
stored loop (optimize/store.py) is not replayed: the forward saves what it leaves
and the backward reads that back.
"""
import copy

import gast

from ..rules.types import FLOAT
from .ir import (StackNew, StackPush, StackRead, assign, at, comment, const, name, rt_attr,
                 target_names, walk_stmts)
from .order import forward_order


class Loops:
    """The loop methods of ``Reverser``."""

    @staticmethod
    def loop_node(s, body):
        if isinstance(s, gast.For):
            node = gast.For(target=copy.deepcopy(s.target), iter=copy.deepcopy(s.iter), body=body,
                            orelse=[], type_comment=None)
        else:
            node = gast.While(test=copy.deepcopy(s.test), body=body, orelse=[])
        return at(node, s.lineno)

    def loop_names(self, s):
        info = s.loop
        if info.uid not in self.names:
            tag = f"loop{info.uid}"
            self.names[info.uid] = {
                "count": self.namer.fresh(f"{tag}_count"), "it": self.namer.fresh(f"{tag}_iter"),
                "stacks": {v: self.namer.fresh(f"{tag}_{v}") for v in info.carried}}
        return self.names[info.uid]

    def recorded_loop(self, s):
        names = self.loop_names(s)
        line = s.lineno
        if isinstance(s, gast.For):
            start, stop, step = s.iter.args
            cap = gast.Call(func=rt_attr("trip_count"), args=[copy.deepcopy(a) for a in (start, stop, step)],
                            keywords=[])
        else:
            cap = const(8)
        pre = [comment(f"count the iterations of the loop on line {line} and record its carried values", line),
               assign(names["count"], const(0), line)]
        push = []
        for v, stack in names["stacks"].items():
            kind = self.ssa.kinds.get(v, FLOAT)
            pre.append(assign(stack, StackNew(kind, copy.deepcopy(cap), name(v)), line))
            push.append(assign(stack, StackPush(name(stack), name(names["count"]), name(v)), line))
        push.append(at(gast.AugAssign(target=name(names["count"], store=True), op=gast.Add(),
                                      value=const(1)), line))
        body = push + self.plain(s.body) + self.plain(s.loop.latch)
        return pre + [self.loop_node(s, body)]

    # -- stored loops (optimize/store.py) -------------------------------------
    def saved_slot(self, s, v, store=False):
        """This thread's entry of the array saving ``v`` after loop ``s``:
        ``saved_v[tid0, ...]`` (one array per loop and value)."""
        key = (s.loop.uid, v)
        if key not in self.saved:
            self.saved[key] = self.namer.fresh(f"saved_{v}")
        idx = name(self.tids[0]) if len(self.tids) == 1 else \
            gast.Tuple(elts=[name(t) for t in self.tids], ctx=gast.Load())
        return gast.Subscript(value=name(self.saved[key]), slice=idx,
                              ctx=gast.Store() if store else gast.Load())

    def counted(self, s):
        """Whether a stored loop's trip count must be saved (it can stop early)."""
        return isinstance(s, gast.While) or s.loop.break_flag is not None

    def saved_reads(self, s):
        """The backward's stand-in for a stored loop: the values it left, as saved."""
        line = s.lineno
        out = [comment(f"the loop on line {line} is not replayed: its values are read back "
                       "from what the forward saved", line)]
        if self.needs_reverse(s):
            count = self.loop_names(s)["count"]
            if self.counted(s):
                value = self.saved_slot(s, count)
            else:
                value = gast.Call(func=rt_attr("trip_count"),
                                  args=[copy.deepcopy(a) for a in s.iter.args], keywords=[])
            out.append(assign(count, value, line))
        values = sorted({t for x in walk_stmts([s]) for t in target_names(x)})
        self.saved_by_loop[s.loop.uid] = values
        out += [assign(v, self.saved_slot(s, v), line) for v in values]
        return out

    def saving_loop(self, s):
        """The forward of a stored loop: the loop, then the values the backward reads
        saved (and its trip count, counted, where the loop can stop early)."""
        line = s.lineno
        count = self.loop_names(s)["count"] if s.loop.uid in self.names else None
        uid = s.loop.uid
        counted = count is not None and self.saved.get((uid, count)) in self.written
        self.plain_depth += 1
        body = self.plain(s.body, True) + self.plain(s.loop.latch, True)
        self.plain_depth -= 1
        pre, post = [], []
        if counted:
            pre.append(assign(count, const(0), line))
            body.insert(0, at(gast.AugAssign(target=name(count, store=True), op=gast.Add(),
                                             value=const(1)), line))
            post.append(assign(self.saved_slot(s, count, store=True), name(count), line))
        post += [assign(self.saved_slot(s, v, store=True), name(v), line)
                 for v in self.saved_by_loop.get(uid, ())
                 if self.saved.get((uid, v)) in self.written]
        if post:
            post.insert(0, comment(f"saved for the backward: the values the loop on line {line} "
                                   "leaves (it is not replayed there)", line))
        return pre + [self.loop_node(s, body)] + post

    # -- reverse ---------------------------------------------------------------
    def needs_reverse(self, s):
        if s.loop.uid not in self.reversed:
            self.loop_depth += 1
            self.reversed[s.loop.uid] = (
                self.rev_block(s.body),
                self.rev_block([x for x in s.loop.latch if self.is_phi(x)]))
            self.loop_depth -= 1
        rev, rev_latch = self.reversed[s.loop.uid]
        return bool(rev or rev_latch)

    def rev_loop(self, s):
        if not self.needs_reverse(s):
            return []
        names = self.loop_names(s)
        line = s.lineno
        it = names["it"]
        forward = self.walk_forward and forward_order(
            s, self.active, {p.name for p in self.pf.params if p.is_array})
        if forward:
            self.walked_forward.append(line)
        body = [comment(f"iteration {it} of the loop on line {line}, in reverse" if not forward
                        else f"iteration {it} of the loop on line {line}, in forward order: "
                        "no iteration's adjoints depend on another's (derive/order.py)", line)]
        for v, stack in names["stacks"].items():
            body.append(assign(v, StackRead(name(stack), name(it)), line))
        if isinstance(s, gast.For):
            start, _, step = s.iter.args
            k = gast.BinOp(left=copy.deepcopy(start), op=gast.Add(),
                           right=gast.BinOp(left=name(it), op=gast.Mult(), right=copy.deepcopy(step)))
            body.append(assign(s.target.id, k, line))
        self.loop_depth += 1
        body += self.aug(s.body)
        self.loop_depth -= 1
        rev, rev_latch = self.reversed[s.loop.uid]
        body += copy.deepcopy(rev_latch) + copy.deepcopy(rev)
        bounds = [const(0), name(names["count"]), const(1)] if forward else \
            [gast.BinOp(left=name(names["count"]), op=gast.Sub(), right=const(1)), const(-1),
             const(-1)]
        rng = gast.Call(func=name("range"), args=bounds, keywords=[])
        node = gast.For(target=name(it, store=True), iter=rng, body=body, orelse=[], type_comment=None)
        return [at(node, line)]
