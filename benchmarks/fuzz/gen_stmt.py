"""Random statements: one small function per construct, and ``body`` that strings them.

Every construct writes through a ``Ctx`` (see gen_expr) and keeps its invariant:
a name enters the scope only once it is assigned on every path to the current
line. So after ``if``/``else`` only names both branches assign are kept, names
first assigned inside a loop body are dropped after the loop (it may run zero
times), and nothing is read that the scope does not hold.

Kernel-only constructs (array loads, gathers, stores, atomics) live in
gen_kernel; they register themselves in ``KERNEL_CONSTRUCTS``. Vector statements
(vec3, mat33 and quat locals) live in gen_vec and register in
``VECTOR_CONSTRUCTS``; they run only in bodies of vector programs (``ctx.vectors``).
"""
from .gen_expr import VECTOR_ARG, bounded, call_source, comparison, int_condition, var

MAX_DEPTH = 3


def _locals(ctx):
    return ctx.scope.floats


# --------------------------------------------------------------------------- straight-line

def s_assign(ctx):
    t = ctx.fresh()
    ctx.emit(f"{t} = {bounded(ctx)}")
    ctx.define(t)


def s_rebind(ctx):
    """Rebind a name assigned earlier (inside a loop: a loop-carried value)."""
    ctx.emit(f"{ctx.pick(_locals(ctx))} = {bounded(ctx)}")


def s_alias(ctx):
    """``b = a``: a copy with its own adjoint; often ``a`` is rebound afterwards."""
    t = ctx.fresh("b")
    src = ctx.pick(_locals(ctx))
    ctx.emit(f"{t} = {src}")
    ctx.define(t)
    if ctx.chance(0.5):
        ctx.emit(f"{src} = {bounded(ctx)}")


def s_swap(ctx):
    a, b = ctx.rng.sample(_locals(ctx), 2)
    ctx.emit(f"{a}, {b} = {b}, {a}")


def s_augassign(ctx):
    """``+=``/``-=``/``*=``/``/=`` on a local, in forms that keep it bounded in loops."""
    v = ctx.pick(_locals(ctx))
    form = ctx.pick(["{v} += 0.5 * ({b} - {v})", "{v} -= 0.5 * ({v} - {b})",
                     "{v} *= {c}", "{v} /= 2.0 + math.cos({b})", "{v} += 0.2 * {b}"])
    if form == "{v} += 0.2 * {b}" and ctx.in_loop():
        form = "{v} *= {c}"
    ctx.emit(form.format(v=v, b=bounded(ctx), c=ctx.const(0.3, 0.95)))


def s_ternary(ctx):
    t = ctx.fresh()
    ctx.emit(f"{t} = {bounded(ctx)} if {comparison(ctx)} else {bounded(ctx)}")
    ctx.define(t)


def s_call(ctx):
    """``t = f(...)`` or ``a, b = g(...)`` (sometimes rebinding existing names); a vec3
    result goes to a vec3 local."""
    f = ctx.pick(g for g in ctx.funcs if ctx.callable(g))
    kinds = ["v" if k in f.vec_returns else "f" for k in range(f.n_returns)]
    targets = []
    for kind in kinds:
        names = ctx.scope.of_kind(kind)
        if names and ctx.chance(0.3):
            targets.append(ctx.pick(names))
        else:
            targets.append(ctx.fresh("r" if kind == "f" else "u"))
    if len(set(targets)) < len(targets):
        targets = [ctx.fresh("r" if kind == "f" else "u") for kind in kinds]
    ctx.emit(f"{', '.join(targets)} = {call_source(ctx, f)}")
    for t, kind in zip(targets, kinds):
        ctx.define(t, kind)


# --------------------------------------------------------------------------- branches

def _branch_body(ctx, target, value=None, kind="f"):
    """A few statements, then ``target = value()`` (a bounded float by default)."""
    body(ctx, ctx.rng.randint(0, 2))
    ctx.emit(f"{target} = {value() if value else bounded(ctx)}")
    ctx.define(target, kind)


def _keep_common(ctx, scopes):
    """After a branch: keep the names (of every kind) every branch assigned."""
    for kind in "fvmq":
        for name in scopes[0].of_kind(kind):
            if all(name in s.of_kind(kind) for s in scopes[1:]):
                ctx.define(name, kind)


def s_if_else(ctx):
    """``if``/[``elif``]/``else`` on data; a new name assigned in every branch."""
    t = ctx.fresh("y")
    scopes = []
    ctx.emit(f"if {comparison(ctx)}:")
    with ctx.block() as s:
        _branch_body(ctx, t)
        scopes.append(s)
    if ctx.chance(0.3):
        ctx.emit(f"elif {comparison(ctx)}:")
        with ctx.block() as s:
            _branch_body(ctx, t)
            scopes.append(s)
    ctx.emit("else:")
    with ctx.block() as s:
        _branch_body(ctx, t)
        scopes.append(s)
    _keep_common(ctx, scopes)


def s_if_only(ctx):
    """``if`` without ``else`` that rebinds names assigned before it."""
    cond = int_condition(ctx) if ctx.scope.ints and ctx.chance(0.2) else comparison(ctx)
    ctx.emit(f"if {cond}:")
    with ctx.block():
        body(ctx, ctx.rng.randint(0, 1))
        s_rebind(ctx)


def s_const_if(ctx):
    """A branch whose condition is constant: the dead arm still has to transform."""
    t = ctx.fresh("y")
    ctx.emit(f"if {ctx.pick(['True', '1 > 0', '2.0 >= 1.0'])}:")
    with ctx.block() as a:
        _branch_body(ctx, t)
    ctx.emit("else:")
    with ctx.block() as b:
        ctx.emit(f"{t} = {bounded(ctx)} if {comparison(ctx)} else {bounded(ctx)}")
        ctx.define(t)
    _keep_common(ctx, [a, b])


# --------------------------------------------------------------------------- loops

def loop_bound(ctx):
    """A small int known at run time: an int parameter, an outer counter, a constant."""
    options = [str(ctx.rng.randint(0, 3))]
    options += ctx.scope.ints * 2
    if ctx.scope.indices and ctx.chance(0.3):
        options.append(f"{ctx.scope.indices[0]} % 3")
    return ctx.pick(options)


def _range(ctx):
    n = loop_bound(ctx)
    return ctx.pick([f"range({n})", f"range({n})", f"range(1, {n})", f"range({n}, 0, -1)",
                     f"range(0, {n}, 2)", f"range({n} - 1, -1, -1)", f"range(-1, {n})"])


def _carry(ctx):
    """First statement of a loop body: update a value from before the loop (in a vector
    program, often a vector: a loop-carried vec3)."""
    if ctx.vectors and ctx.scope.vecs and ctx.chance(0.5):
        VECTOR_CARRY[0](ctx)
    elif _locals(ctx):
        ctx.pick([s_rebind, s_augassign])(ctx)


def s_for(ctx):
    k = ctx.fresh("k")
    ctx.emit(f"for {k} in {_range(ctx)}:")
    with ctx.block() as s:
        s.ints.append(k)
        s.loops.append("for")
        _carry(ctx)
        body(ctx, ctx.rng.randint(1, 3))


def s_while(ctx):
    """``while`` with a data-dependent exit, bounded by a counter (which goes up first,
    so ``continue`` cannot skip it)."""
    w = ctx.fresh("w")
    limit = ctx.pick([str(ctx.rng.randint(1, 5))] + ctx.scope.ints)
    ctx.emit(f"{w} = 0")
    form = ctx.rng.randint(0, 2)
    if form == 0:
        ctx.emit(f"while {w} < {limit} and {comparison(ctx)}:")
    elif form == 1:
        ctx.emit(f"while {comparison(ctx)} and {w} < {limit}:")
    else:
        ctx.emit("while True:")
    with ctx.block() as s:
        ctx.emit(f"{w} += 1")
        if form == 2:
            ctx.emit(f"if {w} > {limit}:")
            with ctx.block():
                ctx.emit("break")
        s.ints.append(w)
        s.loops.append("while")
        _carry(ctx)
        body(ctx, ctx.rng.randint(0, 2))
        if form == 2:
            ctx.emit(f"if {comparison(ctx)}:")
            with ctx.block():
                ctx.emit("break")
    ctx.scope.ints.append(w)


def _jump(ctx, word):
    cond = int_condition(ctx) if ctx.chance(0.3) else comparison(ctx)
    ctx.emit(f"if {cond}:")
    with ctx.block():
        if _locals(ctx) and ctx.chance(0.5):
            s_rebind(ctx)
        ctx.emit(word)


def s_break(ctx):
    _jump(ctx, "break")


def s_continue(ctx):
    _jump(ctx, "continue")


# --------------------------------------------------------------------------- returns

def return_value(ctx):
    values = []
    for k in range(ctx.n_returns):
        if k in ctx.vec_returns:
            values.append(VECTOR_ARG[0](ctx))
        else:
            values.append(bounded(ctx) if ctx.chance(0.5) else var(ctx))
    return ", ".join(values)


def s_return(ctx):
    """Early ``return``: a value from a func, bare from a kernel (the thread stops)."""
    ctx.emit(f"if {comparison(ctx)}:")
    with ctx.block():
        if ctx.role == "func":
            ctx.emit(f"return {return_value(ctx)}")
        else:
            ctx.emit("return")


# --------------------------------------------------------------------------- choosing

def _compound(ctx):
    return ctx.depth < MAX_DEPTH


CONSTRUCTS = [
    # (construct, weight, when it applies)
    (s_assign, 6, lambda ctx: True),
    (s_rebind, 2, lambda ctx: _locals(ctx)),
    (s_alias, 2, lambda ctx: _locals(ctx)),
    (s_swap, 1, lambda ctx: len(_locals(ctx)) >= 2 and not ctx.vectors),   # refused there
    (s_augassign, 2, lambda ctx: _locals(ctx)),
    (s_ternary, 1, lambda ctx: True),
    (s_call, 3, lambda ctx: any(ctx.callable(f) for f in ctx.funcs)),
    (s_if_else, 3, _compound),
    (s_if_only, 2, lambda ctx: _compound(ctx) and _locals(ctx)),
    (s_const_if, 0.3, _compound),
    (s_for, 3, _compound),
    (s_while, 1.5, _compound),
    (s_break, 1, lambda ctx: ctx.in_loop()),
    (s_continue, 1, lambda ctx: ctx.in_loop()),
    (s_return, 0.7, lambda ctx: ctx.role == "func" or ctx.depth > 0),
]
KERNEL_CONSTRUCTS = []     # filled by gen_kernel: loads, gathers, writes
VECTOR_CONSTRUCTS = []     # filled by gen_vec: vec3, mat33 and quat statements
VECTOR_CARRY = []          # gen_vec's loop-carried vec3 update


def body(ctx, n):
    """``n`` random statements at the current position."""
    table = CONSTRUCTS + (KERNEL_CONSTRUCTS if ctx.role == "kernel" else []) + \
        (VECTOR_CONSTRUCTS if ctx.vectors else [])
    for _ in range(n):
        usable = [(c, w) for c, w, ok in table if ok(ctx)]
        constructs, weights = zip(*usable)
        ctx.rng.choices(constructs, weights)[0](ctx)
