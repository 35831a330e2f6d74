"""Pass bounds: every array index is checked before it is used.

Expects: an ``SSA`` kernel (pass ssa; hazards and activity done) and the number
of its grid dimensions.
Guarantees: ``bound`` returns a ``Bounded``: a new ``SSA`` whose body carries a
*check statement* (a ``CheckStmt``, derive/ir.py, holding its ``Check``) before
every access whose index is not already proven, and the ``Site`` of every
check, in order (a check names its site by number, from 1). Per index component
(axis) of an access, the cheapest sound place is chosen (in full, with examples:
docs/semantics.md, "How pass bounds places the checks"):

- **once per launch** (kind ``thread``/``const``): a thread index or an integer
  constant, in an access every thread makes; then proven everywhere in the kernel;
- **once before a loop** (kind ``range``): the variable of a ``for ... in range``
  with no ``break``/``return``, in an access every iteration makes;
- **not at all** where the enclosing ``if`` tests prove it (derive/facts.py);
- **where it is used** (kind ``index``, or ``component`` for a pass-scalarize
  ``ComponentCheck``): everything else, once per value in a block.

Why it is safe: a failed check stops its thread before the access (emit/bounds.py)
and the launch raises; a negative index is out of bounds (pass parallel's ``color``
plan relies on it). A check is a statement of its own, so the backward replays it
even where it drops the store it guards, and an adjoint access uses the same index
on an array of the same shape. ``bound(..., enabled=False)`` returns the SSA
unchanged with no sites (``@ad.kernel(bounds_check=False)``).
"""
import copy
import dataclasses
from collections import Counter
from dataclasses import dataclass

import gast

from .facts import Facts
from .ir import CheckStmt, ComponentCheck, at, const, name, rt_call, target_names, walk_stmts


@dataclass(frozen=True)
class Site:
    """One checked index component: ``array``'s ``axis`` at the user's ``line``.

    ``kind``: ``thread`` (per launch; ``value`` = the grid dimension), ``const``
    (per launch; ``value`` = the index), ``range`` (before a loop: the loop's
    range) or ``index`` (where used, or before a loop for a loop-invariant index).
    ``inside``: for an access inlined from a func, which func and line (``_inside``)."""
    array: str
    axis: int
    line: int
    kind: str
    value: int = 0
    inside: str = ""


@dataclass(frozen=True)
class Check:
    """What a check statement tests (its operands are the call's arguments)."""
    site: int        # 1-based number in Bounded.sites
    kind: str        # index, range (a loop variable), loop_index (invariant in a loop)


@dataclass
class Bounded:
    ssa: object
    sites: tuple     # Site records; a check statement names one by number (from 1)



@dataclass
class _Loop:
    """A loop whose range is checked before it runs."""
    var: str
    args: list       # start, stop, step atoms
    inside: set      # names assigned in the loop (body, latch)


def bound(ssa, dims, owner, enabled=True):
    """A ``Bounded`` for SSA kernel ``ssa`` with ``dims`` grid dimensions and thread
    indices ``owner`` (``parallel.thread_indices``)."""
    if not enabled:
        return Bounded(dataclasses.replace(ssa, body=_unchecked(ssa.body)), ())
    b = _Bounder(ssa, dims, owner)
    body = b.block(ssa.body, None, set())
    return Bounded(dataclasses.replace(ssa, body=body), tuple(b.sites))


class _Bounder:
    def __init__(self, ssa, dims, owner):
        self.ssa = ssa
        self.arrays = {p.name for p in ssa.norm.pf.params if p.is_array}
        self.owner = owner
        self.copies = _single_copies(ssa.body)
        self.facts = Facts(ssa)
        self.sites = []
        self.site_no = {}
        self.proven = self.launch_bounds(ssa.body)

    # -- once per launch ---------------------------------------------------------
    def launch_component(self, c):
        """("thread", d) or ("const", c) for a component fixed per thread, else None."""
        if _int_const(c) is not None:
            return ("const", _int_const(c))
        if isinstance(c, gast.Name) and c.id in self.owner:
            return ("thread", self.owner[c.id])
        return None

    def launch_bounds(self, body):
        """Sites of the accesses every thread makes: {(array, axis, kind, value)}."""
        proven = set()
        for key, line in self.certain(body).items():
            proven.add(key)
            self.site(Site(key[0], key[1], line, key[2], key[3]))
        return proven

    def certain(self, stmts):
        """{(array, axis, kind, value): line} of the per-thread index components that
        ``stmts`` always uses when it runs: up to the first statement that may leave
        the block, and in both branches of an ``if`` (not in loops, which may not run)."""
        out = {}
        for s in stmts:
            if _exits(s):
                break
            if isinstance(s, gast.If):
                body, orelse = self.certain(s.body), self.certain(s.orelse)
                for key in body:
                    if key in orelse:
                        out.setdefault(key, min(body[key], orelse[key]))
                continue
            for arr, idx in _accesses(s, self.arrays):
                for axis, c in enumerate(idx):
                    key = self.launch_component(c)
                    if key is not None:
                        out.setdefault((arr, axis) + key, s.lineno)
        return out

    def site(self, site):
        if site not in self.site_no:
            self.sites.append(site)
            self.site_no[site] = len(self.sites)
        return self.site_no[site]

    # -- loops -------------------------------------------------------------------
    def is_loop_var(self, c, loop):
        """Whether ``c`` is ``loop``'s variable, or a copy of it assigned once."""
        seen = set()
        while isinstance(c, gast.Name) and c.id not in seen:
            if c.id == loop.var:
                return True
            seen.add(c.id)
            c = self.copies.get(c.id)
        return False

    @staticmethod
    def checked_loop(s):
        """A ``_Loop`` when the range of ``s`` can be checked before it runs, else None."""
        if not isinstance(s, gast.For) or s.loop.break_flag is not None or \
                not isinstance(s.target, gast.Name) or any(_exits(x) for x in s.body):
            return None
        it = s.iter
        if not (isinstance(it, gast.Call) and len(it.args) == 3):
            return None
        return _Loop(s.target.id, list(it.args), _assigned_in(s))

    # -- checks ------------------------------------------------------------------
    def check(self, kind, site, args, line):
        call = rt_call(f"check_{kind}", *args, const(self.site(site)))
        return at(CheckStmt(call, Check(self.site(site), kind)), line)

    def block(self, stmts, loop, done, hoisted=None, facts=frozenset()):
        """``stmts`` with checks. ``loop``: the checked loop whose body ``stmts`` is
        (checks that can run before it go to ``hoisted``); ``done``: the
        {(array, axis, index)} already checked on every path to here; ``facts``: the
        comparisons the enclosing ``if`` tests guarantee (derive/facts.py)."""
        out = []
        done = set(done)
        for s in stmts:
            if isinstance(s, ComponentCheck):    # a local vector's index: where it is used
                local = s.local or f"({s.type_name} value)"
                site = Site(local, s.axis, s.lineno, "component", s.size, inside=_inside(s))
                out.append(self.check("index", site, [copy.deepcopy(s.index), const(s.size)],
                                      s.lineno))
                continue
            if _exits(s):
                loop = None
            out += self.checks(s, loop, done, hoisted, facts)
            out += self.nested(s, done, facts)
        return out

    def checks(self, s, loop, done, hoisted, facts):
        out = []
        for arr, idx in _accesses(s, self.arrays):
            for axis, c in enumerate(idx):
                key = self.launch_component(c)
                if key is not None and (arr, axis) + key in self.proven:
                    continue
                seen = (arr, axis, c.id if isinstance(c, gast.Name) else key)
                if seen in done or self.guarded(c, arr, axis, facts):
                    continue
                done.add(seen)
                size = _shape(arr, axis)
                bounds = [copy.deepcopy(a) for a in loop.args] if loop is not None else []
                if loop is not None and self.is_loop_var(c, loop):
                    hoisted.append(self.check("range", Site(arr, axis, s.lineno, "range", inside=_inside(s)),
                                              bounds + [size], s.lineno))
                elif loop is not None and (key is not None or isinstance(c, gast.Name) and
                                           c.id not in loop.inside):
                    hoisted.append(self.check("loop_index", Site(arr, axis, s.lineno, "index",
                                                                    inside=_inside(s)),
                                              [copy.deepcopy(c)] + bounds + [size], s.lineno))
                else:
                    out.append(self.check("index", Site(arr, axis, s.lineno, "index",
                                               inside=_inside(s)),
                                          [copy.deepcopy(c), size], s.lineno))
        return out

    def guarded(self, c, arr, axis, facts):
        """Whether ``c`` is in bounds by the enclosing tests (``i - 1`` under ``i > 0``)."""
        below = {n for n, d in self.owner.items() if (arr, axis, "thread", d) in self.proven}
        return self.facts.within(c, arr, axis, facts, nonnegative=set(self.owner),
                                 below_shape=below)

    def nested(self, s, done, facts):
        """[``s``] with checks inside its blocks, preceded by those run before its loop."""
        if isinstance(s, gast.If):
            new = copy.copy(s)
            new.body = self.block(s.body, None, done, facts=facts | self.facts.implied(s.test))
            new.orelse = self.block(s.orelse, None, done,
                                    facts=facts | self.facts.implied(s.test, negated=True))
            return [new]
        if isinstance(s, (gast.For, gast.While)):
            inside = _assigned_in(s)
            entry = {k for k in done if not (isinstance(k[2], str) and k[2] in inside)}
            hoisted = []
            new = copy.copy(s)
            new.body = self.block(s.body, self.checked_loop(s), entry, hoisted, facts)
            latch = self.block(s.loop.latch, None, set(), facts=facts)
            if any(isinstance(x, CheckStmt) for x in walk_stmts(latch)):
                new.loop = dataclasses.replace(s.loop, latch=latch)
            return hoisted + [new]
        return [s]


def _unchecked(stmts):
    """``stmts`` without their ``ComponentCheck`` statements (nothing is checked)."""
    out = []
    for s in stmts:
        if isinstance(s, ComponentCheck):
            continue
        if isinstance(s, (gast.If, gast.For, gast.While)):
            s = copy.copy(s)
            s.body, s.orelse = _unchecked(s.body), _unchecked(s.orelse)
            if getattr(s, "loop", None) is not None:
                s.loop = dataclasses.replace(s.loop, latch=_unchecked(s.loop.latch),
                                             cond=_unchecked(s.loop.cond))
        out.append(s)
    return out


def _exits(stmt):
    """Whether ``stmt`` may leave its block early (a return or break anywhere in it)."""
    return any(isinstance(n, (gast.Return, gast.Break)) for n in gast.walk(stmt))


def _accesses(stmt, arrays):
    """(array, [index components]) of each array element ``stmt`` reads or writes."""
    if isinstance(stmt, gast.Assign):
        subs = [stmt.targets[0], getattr(stmt.value, "fetched", stmt.value)]
    elif isinstance(stmt, gast.AugAssign):
        subs = [stmt.target]
    else:
        return []
    out = []
    for s in subs:
        if isinstance(s, gast.Subscript) and isinstance(s.value, gast.Name) and \
                s.value.id in arrays:
            idx = s.slice.elts if isinstance(s.slice, gast.Tuple) else [s.slice]
            out.append((s.value.id, idx))
    return out


def _assigned_in(loop):
    """Names assigned anywhere in ``loop`` (its variable, body and latch)."""
    return {t for x in walk_stmts([loop]) for t in target_names(x)}


def _single_copies(body):
    """{name: the name it copies} for names whose only assignment is a plain copy."""
    counts = Counter(t for s in walk_stmts(body) for t in target_names(s))
    out = {}
    for s in walk_stmts(body):
        if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name) and \
                isinstance(s.value, gast.Name) and counts[s.targets[0].id] == 1:
            out[s.targets[0].id] = s.value
    return out


def _shape(arr, axis):
    """``arr.shape[axis]``."""
    attr = gast.Attribute(value=name(arr), attr="shape", ctx=gast.Load())
    return gast.Subscript(value=attr, slice=const(axis), ctx=gast.Load())


def _int_const(node):
    if isinstance(node, gast.Constant) and type(node.value) is int:
        return node.value
    return None


def _inside(s):
    """Where statement ``s`` came from when pass inline put it there from a func:
    ``func 'f' (file.py:6)`` (the file's name only: generated text is the same on every
    machine), else ""."""
    origin = getattr(s, "inlined_from", None)
    if origin is None:
        return ""
    func, source, line = origin
    return f"func '{func}' ({source.display_name()}:{line})"
