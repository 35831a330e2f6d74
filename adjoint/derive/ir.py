"""Small helpers shared by the passes: node builders, loop records, the namer.

The intermediate form is a gast tree. Statements made by a pass carry the
user's line in ``lineno``; from pass normalize on, loops are the IR's ``For`` and
``While``, whose declared field ``loop`` is their ``LoopInfo`` record (a pass
that changes it builds a new record: ``dataclasses.replace``).
Loop stacks and bounds checks are nodes of their own (``StackNew``, ``StackPush``, ``StackRead``),
not runtime calls: each target prints them its own way (emit/stacks.py), and
nothing downstream has to recognise a stack by its name.
"""
import copy
from dataclasses import dataclass, field, replace

import gast


_ATOMS = frozenset((str, int, float, bool, type(None), bytes, complex))


def copy_tree(node):
    """``copy.deepcopy(node)`` of a gast tree (a node or a list of them), a few times faster:
    nodes and lists are copied here (a node's every attribute: fields, positions, declared
    facts), anything else (a ``LoopInfo``, ...) by ``copy.deepcopy``, all with one memo, so
    an object reached twice is copied once, as deepcopy does. A node with no attributes at
    all (a context such as ``Load``, an operator such as ``Add``) is shared, not copied:
    nothing can tell the two apart but ``is``. The emitter copies each
    function's tree once per printing pass; deepcopy's generic protocol was a third of
    the transformer's time (a cold start's first gradient)."""
    return _copy(node, {})


def _copy(x, memo):
    cls = type(x)
    if cls in _ATOMS:
        return x
    done = memo.get(id(x))
    if done is not None:
        return done
    if cls is list:
        out = memo[id(x)] = []
        out.extend([_copy(e, memo) for e in x])
        return out
    if isinstance(x, gast.AST):
        if not x.__dict__:      # a context or operator (Load, Add, ...): nothing to copy
            return x
        out = memo[id(x)] = cls.__new__(cls)
        out.__dict__.update({k: _copy(v, memo) for k, v in x.__dict__.items()})
        return out
    return copy.deepcopy(x, memo)


@dataclass
class LoopInfo:
    """What normalize and ssa know about one loop.

    ``break_flag``: name tested at the end of each iteration (``if flag: break``).
    ``cond``: for ``while`` loops, the statements recomputing the test variable.
    ``carried``: loop-header names (set by ssa) whose values change per iteration.
    ``latch``: statements run at the end of each iteration (set by ssa): the
    back-edge copies, the break test, the recomputed ``while`` condition. They
    are not part of the body that the backward pass recomputes.
    ``uid``: a number unique in the function, used for stack and counter names.
    """
    uid: int
    break_flag: str = None
    cond: list = field(default_factory=list)
    carried: list = field(default_factory=list)
    latch: list = field(default_factory=list)


class For(gast.For):
    """``for`` with its ``LoopInfo`` (declared field ``loop``); visited as ``For``."""
    _fields = gast.For._fields + ("loop",)


class While(gast.While):
    """``while`` with its ``LoopInfo`` (declared field ``loop``); visited as ``While``."""
    _fields = gast.While._fields + ("loop",)


def loop_like(s, info, **fields):
    """An IR loop like ``s`` (a ``for`` or ``while``) with ``info`` and ``fields`` changed."""
    if isinstance(s, gast.For):
        node = For(target=s.target, iter=s.iter, body=s.body, orelse=[], type_comment=None,
                   loop=info)
    else:
        node = While(test=s.test, body=s.body, orelse=[], loop=info)
    for k, v in fields.items():
        setattr(node, k, v)
    node.lineno, node.col_offset = s.lineno, getattr(s, "col_offset", 0)
    return node


class Comment(gast.stmt):
    """``# text``: commentary in generated code (what a replay or a plan does), with no
    effect. Only the printer reads ``text``; every pass keeps the node where it stands."""
    _fields = ("text",)


def comment(text, lineno=None):
    node = Comment(text)
    node.lineno = lineno
    return node


class CheckStmt(gast.Expr):
    """A bounds check (pass bounds): ``value`` is its ``rt.check_<kind>(...)`` call, as
    ``adjoint show`` prints it, and ``check`` its ``bounds.Check`` (site and kind), from
    which emit/bounds.py spells the test and the fault report."""
    _fields = ("value", "check")

    def __init__(self, value=None, check=None):
        super().__init__(value=value)        # (gast's Expr takes only its own fields)
        self.check = check


class Print(gast.stmt):
    """``print(*args)`` in a kernel or func: for debugging, the forward (and the JVP)
    print; a backward's replay does not print again. ``args`` are atoms and strings."""
    _fields = ("args",)


class ComponentCheck(gast.stmt):
    """The ``else`` of a select chain over a local vector's components (pass scalarize,
    frontend/components.py): ``index`` (an atom) is outside ``0..size-1`` of axis ``axis``
    of local ``local`` (its user's name; ``type_name``: ``vec3``, ...). Pass bounds makes it
    a fault, as an array index's (``CheckStmt`` of kind ``component``); where nothing is
    checked (``bounds_check=False``, a func's own code) it is dropped and the chain's nan
    stays."""
    _fields = ("index",)

    def __init__(self, index=None, local="", axis=0, size=0, type_name=""):
        super().__init__(index=index)
        self.local, self.axis, self.size, self.type_name = local, axis, size, type_name


class MinOp(gast.operator):
    """The operator of ``ad.atomic_min`` (no Python spelling: see ``AtomicMinMax``)."""


class MaxOp(gast.operator):
    """The operator of ``ad.atomic_max``."""


class AtomicMinMax(gast.AugAssign):
    """``ad.atomic_min(arr, i, v)`` / ``ad.atomic_max``: ``arr[i] = min(arr[i], v)`` in
    one atomic step. An ``AugAssign`` (``target``, ``op``, ``value``) to every pass that
    asks where arrays are written, read or bounds-checked; ``op`` is ``MinOp`` or
    ``MaxOp``, which no unparser knows, so a pass that took it for ``+=`` would fail
    loudly. Its own rules: pass reverse (the gradient goes to ``v`` where ``v`` equals
    the element after the launch, as in Warp), pass jvp, pass parallel (colliding ones
    run serially on the CPU), emit (printer.py, cuda.py)."""

    @property
    def is_min(self):
        return isinstance(self.op, MinOp)


class AtomicBits(gast.AugAssign):
    """``ad.atomic_and(arr, i, v)`` / ``atomic_or`` / ``atomic_xor`` of an int array as a
    statement: ``arr[i] &= v`` (``|=``, ``^=``: ``op`` is gast's ``BitAnd``, ``BitOr``,
    ``BitXor``) in one atomic step. No gradient (ints); pass parallel runs colliding ones
    serially on the CPU (privatized copies are summed, not or-ed), emit/cuda.py writes
    ``cuda.atomic.and_``/``or_``/``xor``."""


class AtomicFetch(gast.expr):
    """``old = ad.atomic_add(arr, i, v)`` (and every other atomic, as Warp's return the
    element's old value): the value of the statement ``old = AtomicFetch(arr[i], op, v)``,
    which updates the element as the statement form does (``update()``: an ``AugAssign``
    for add/sub, an ``AtomicMinMax``, an ``AtomicBits``) and gives its old value. Passes
    that differentiate, plan or print the update ask ``update()``. A backward cannot
    recompute the old value: its replay holds ``AtomicResult`` instead, which pass
    reverse refuses where the backward needs it, and the old value has no adjoint (it
    depends on the order in which threads ran): pass reverse refuses one that would."""
    _fields = ("target", "op", "value")

    @property
    def fetched(self):
        """The element it updates (what pass bounds checks)."""
        return self.target

    def update(self):
        """The statement form of the same atomic (a fresh node, its target a store)."""
        target = gast.Subscript(value=copy.deepcopy(self.target.value),
                                slice=copy.deepcopy(self.target.slice), ctx=gast.Store())
        op, value = copy.deepcopy(self.op), copy.deepcopy(self.value)
        if isinstance(op, (MinOp, MaxOp)):
            return AtomicMinMax(target=target, op=op, value=value)
        if isinstance(op, (gast.BitAnd, gast.BitOr, gast.BitXor)):
            return AtomicBits(target=target, op=op, value=value)
        return gast.AugAssign(target=target, op=op, value=value)


def atomic_update(s):
    """The update of ``old = AtomicFetch(...)`` (see ``AtomicFetch.update``), else None."""
    if isinstance(s, gast.Assign) and isinstance(s.value, AtomicFetch):
        u = s.value.update()
        if hasattr(s, "lineno"):
            at(u, s.lineno)
        return u
    return None


class AtomicResult(gast.expr):
    """In a backward's replay, the value an ``AtomicFetch`` gave (``line``: its line); only
    where nothing the backward keeps reads it (pass reverse checks), printed as 0 (0.0 of
    a float array: ``is_float``)."""
    _fields = ()

    def __init__(self, line=None, is_float=False):
        super().__init__()
        self.line, self.is_float = line, is_float


class Float32(gast.expr):
    """``value`` as a float32 number: a float32 kernel's literal, or an int meeting a float
    there (emit/precision.py). A printing decision: emit/ieee.py prints it as
    ``rt.float32(value)``, and nothing reads the printed name back."""
    _fields = ("value",)


class StackNew(gast.expr):
    """A new per-thread loop stack of ``kind`` values ("float", "int", "bool"; a float32
    kernel's are "float32"), with room for ``capacity`` (an expression) entries and
    ``first`` as its first entry (which fixes its type). Printed by emit/stacks.py: on
    the CPU a growable array, on CUDA a fixed local array."""
    _fields = ("kind", "capacity", "first")


class StackPush(gast.expr):
    """``stack`` with entry ``index`` set to ``value``; the value of the statement
    ``s = StackPush(s, k, v)`` (the CPU's stack may be reallocated to grow)."""
    _fields = ("stack", "index", "value")


class StackRead(gast.expr):
    """Entry ``index`` of ``stack`` (both names)."""
    _fields = ("stack", "index")


def name(id_, store=False):
    return gast.Name(id=id_, ctx=gast.Store() if store else gast.Load(), annotation=None,
                     type_comment=None)


def rt_attr(attr):
    """``rt.<attr>``: a name in the runtime backend that generated modules bind to ``rt``."""
    return gast.Attribute(value=name("rt"), attr=attr, ctx=gast.Load())


def rt_call(fn, *args):
    """``rt.<fn>(*args)``."""
    return gast.Call(func=rt_attr(fn), args=list(args), keywords=[])


def const(value):
    return gast.Constant(value=value, kind=None)


def at(node, lineno):
    """Give ``node`` (a statement) the user's line number."""
    node.lineno = lineno
    node.col_offset = 0
    return node


def assign(target, value, lineno):
    if isinstance(target, str):
        target = name(target, store=True)
    return at(gast.Assign(targets=[target], value=value, type_comment=None), lineno)


def if_(test, body, orelse, lineno):
    return at(gast.If(test=test, body=body, orelse=orelse), lineno)


def is_atom(e):
    return isinstance(e, (gast.Name, gast.Constant))


def target_names(stmt):
    """Names a normalized statement assigns (not counting nested blocks)."""
    if isinstance(stmt, gast.Assign):
        t = stmt.targets[0]
        if isinstance(t, gast.Name):
            return [t.id]
        if isinstance(t, gast.Tuple):
            return [e.id for e in t.elts]
    if isinstance(stmt, gast.For):
        return [stmt.target.id]
    return []


def changed_names(stmt):
    """Names whose value a simple statement may change: the names it binds, the arrays it
    stores into (``a[i] = v``, ``a[i] += v``) and every name it passes to a call (a
    call may write an array it is given: ``rt.atomic_add(adj_a, i, v)``)."""
    out = set()
    targets = (stmt.targets if isinstance(stmt, gast.Assign) else
               [stmt.target] if isinstance(stmt, (gast.AugAssign, gast.For)) else [])
    for t in targets:
        out |= names_in_target(t)
        while isinstance(t, (gast.Subscript, gast.Attribute)):
            t = t.value
        if isinstance(t, gast.Name):
            out.add(t.id)
    for node in gast.walk(stmt):
        if isinstance(node, gast.Call):
            out |= {n.id for a in node.args for n in value_names(a)}
            out |= {n.id for k in node.keywords for n in value_names(k.value)}
    return out


def load_names(node):
    """Names read by an expression or a simple statement (not nested blocks)."""
    out = []
    roots = [node]
    if isinstance(node, gast.Assign):
        roots = [node.value] + ([node.targets[0]] if isinstance(node.targets[0], gast.Subscript) else [])
    elif isinstance(node, gast.AugAssign):
        roots = [node.target, node.value]
    elif isinstance(node, gast.If):
        roots = [node.test]
    elif isinstance(node, gast.For):
        roots = [node.iter]
    elif isinstance(node, gast.While):
        roots = [node.test]
    for r in roots:
        out += [n.id for n in value_names(r)]
    return out


def names_in_target(t):
    """Names an assignment target binds (a name or a tuple of names; none for a subscript)."""
    if isinstance(t, gast.Name):
        return {t.id}
    if isinstance(t, gast.Tuple):
        return {e.id for e in t.elts}
    return set()


def names_read(node):
    """The set of names an expression reads as values."""
    return {n.id for n in value_names(node)}


def value_names(node):
    """Name nodes read as values in an expression (not the callee of a call)."""
    out = []
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, gast.Name):
            if isinstance(n.ctx, gast.Load):
                out.append(n)
            continue
        for fld, child in gast.iter_fields(n):
            if isinstance(n, gast.Call) and fld == "func":
                continue
            if isinstance(child, list):
                todo.extend(c for c in reversed(child) if isinstance(c, gast.AST))
            elif isinstance(child, gast.AST):
                todo.append(child)
    return out


def walk_stmts(stmts):
    """Every statement in ``stmts``, nested blocks included, in order."""
    for s in stmts:
        yield s
        if isinstance(s, gast.If):
            yield from walk_stmts(s.body)
            yield from walk_stmts(s.orelse)
        elif isinstance(s, (gast.For, gast.While)):
            yield from walk_stmts(s.body)
            info = getattr(s, "loop", None)
            if info is not None:
                yield from walk_stmts(info.cond)
                yield from walk_stmts(info.latch)


class BlockRewriter:
    """Rewrites statement blocks: ``block(stmts)`` joins the lists ``stmt(s)`` gives for
    each statement (``[]`` deletes it, several splice). The default ``stmt(s)`` is
    ``nested(s)``: an ``if``'s body and orelse, a loop's body and orelse and, of an IR
    loop (``.loop``), its ``cond`` and ``latch`` blocks, each rewritten by ``block``. A
    subclass overrides ``stmt`` and calls ``nested`` for compound statements it leaves.
    ``copy = True``: ``nested`` rewrites a shallow copy of the statement (and a replaced
    ``LoopInfo``), leaving the input tree as it was; else it rewrites in place.
    For pure rewrites only: analyses carrying facts through a block (liveness, zeros,
    bounds, ssa, reverse) walk it themselves; ``walk_stmts`` is the flat walk."""
    copy = False

    def block(self, stmts):
        out = []
        for s in stmts:
            out.extend(self.stmt(s))
        return out

    def stmt(self, s):
        return self.nested(s)

    def nested(self, s):
        if not isinstance(s, (gast.If, gast.For, gast.While)):
            return [s]
        if self.copy:
            s = copy.copy(s)
        s.body, s.orelse = self.block(s.body), self.block(s.orelse)
        info = getattr(s, "loop", None)
        if info is not None:
            if self.copy:
                s.loop = info = replace(info)
            info.cond, info.latch = self.block(info.cond), self.block(info.latch)
        return [s]


def names_in(node):
    """Every name ``node`` (a node or a list of them) reads or writes; IR statements hold
    fields that are not nodes (a loop's ``LoopInfo``: its blocks are not entered)."""
    out, todo = set(), [node]
    while todo:
        n = todo.pop()
        if isinstance(n, list):
            todo += n
        elif isinstance(n, gast.Name):
            out.add(n.id)
        elif isinstance(n, gast.AST):
            todo += [getattr(n, f, None) for f in n._fields]
    return out


def unique(taken, base):
    """``base``, or ``base`` with underscores before it, not in ``taken`` (then added)."""
    while base in taken:
        base = "_" + base
    taken.add(base)
    return base


class Namer:
    """Deterministic fresh names that never clash with the user's names."""

    def __init__(self, taken=()):
        self.taken = set(taken)
        self.counters = {}

    def reserve(self, n):
        self.taken.add(n)

    def fresh(self, base):
        if base not in self.taken:
            self.taken.add(base)
            return base
        k = self.counters.get(base, 1)
        while f"{base}_{k}" in self.taken:
            k += 1
        self.counters[base] = k + 1
        out = f"{base}_{k}"
        self.taken.add(out)
        return out

    def temp(self):
        k = self.counters.get("#t", 0)
        while f"t{k}" in self.taken:
            k += 1
        self.counters["#t"] = k + 1
        self.taken.add(f"t{k}")
        return f"t{k}"


def operation(v):
    """(rule key, operand atoms) of an operation: a ``BinOp``, ``UnaryOp`` or op call
    (``rt.sin(x)``, whose key is its callee's name)."""
    if isinstance(v, gast.BinOp):
        return type(v.op).__name__, [v.left, v.right]
    if isinstance(v, gast.UnaryOp):
        return type(v.op).__name__, [v.operand]
    return v.callee.name, v.args


def number_constant(node):
    """The number ``node`` writes out (``2``, ``-0.5``, ``True``), or None."""
    sign = 1
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, (gast.USub, gast.UAdd)):
        sign = -1 if isinstance(node.op, gast.USub) else 1
        node = node.operand
    if isinstance(node, gast.Constant) and type(node.value) in (int, float, bool):
        return node.value if sign == 1 else -node.value
    return None
