"""Random ``@ad.kernel`` definitions: parameters, loads, gathers, stencils and writes.

A kernel reads grid-shaped float arrays at the thread's own index and at
neighbours (a periodic or clamped stencil), gathers through an index array,
takes an int (loop bounds) and a float scalar, and writes each output in one
*mode*: a plain store at its own index (maybe conditional, maybe followed by a
load of the element just stored, maybe through a permutation), ``+=`` at its own
index, a scatter (``acc[idx[i]] += v``, ``ad.atomic_add``/``atomic_sub``), or a
shared total (``ad.atomic_add(tot, 0, v)``). Outputs are never read otherwise, so
every kernel is one adjoint accepts (see docs/semantics.md). Accumulated values
are scaled by (bins / threads) so sums stay of size about 1.

A kernel drawn with stores (``stores``: program.py's ``Profile.stores``) also writes one
or two outputs in a mode of their own, after the other outputs' last writes: the same
element stored two or more times (``STORE_MODES``, ``s_stores``), the shapes pass
scale's doubling got wrong before 09b4cd3 (issue 37).

A kernel of a vector program (``vectors``: "vec3", maybe "mat33" and "quat") also
reads arrays of vec3 (``p0: ad.array(dtype=ad.vec3)``, loads ``p0[i]`` and
neighbours), may write arrays of vec3 (``out1[i] = v``, ``out1[i] += v``, a scatter
or ``ad.atomic_add`` of a vector into ``bins`` vectors), and its body uses gen_vec's
statements and scalar forms.
"""
from dataclasses import dataclass, field

from .gen_expr import Ctx, bounded, comparison, int_condition
from .gen_stmt import KERNEL_CONSTRUCTS, body
from .gen_vec import vec

GRID_OUT_MODES = ["store", "store", "store", "add", "cond", "load", "perm", "const"]
ACC_MODES = ["scatter", "atomic", "atomic_sub"]
VEC_OUT_MODES = ["vstore", "vstore", "vadd"]
VEC_ACC_MODES = ["vscatter", "vatomic"]
VEC_KINDS = ("vin", "vout", "vacc")      # parameters that are arrays of vec3
STORE_MODES = {"twice": "out", "twice0": "tot", "vtwice": "vout"}   # s_stores: mode -> kind


@dataclass
class Param:
    name: str
    kind: str       # in, src, idx, perm, n, c, vin (inputs); out, acc, tot, vout, vacc (outputs)
    ndim: int = 1
    mode: str = ""  # outputs: how the kernel writes it

    @property
    def is_output(self):
        return self.kind in ("out", "acc", "tot", "vout", "vacc")

    def annotation(self):
        if self.kind == "n":
            return "int"
        if self.kind == "c":
            return "float"
        dtype = "ad.int32" if self.kind in ("idx", "perm") else \
            "ad.vec3" if self.kind in VEC_KINDS else "float"
        return f"ad.array(dtype={dtype})" if self.ndim == 1 else \
            f"ad.array(dtype={dtype}, ndim={self.ndim})"


@dataclass
class KernelDef:
    name: str
    ndim: int
    params: list
    source: str = ""
    features: list = field(default_factory=list)


class KernelCtx(Ctx):
    """A ``Ctx`` that also knows the kernel's arrays, its index and its outputs."""

    def __init__(self, rng, funcs, kdef, scales):
        super().__init__(rng, "kernel", funcs)
        self.kdef = kdef
        self.index = "i" if kdef.ndim == 1 else "i, j"
        self.scales = scales            # output kind -> factor keeping sums of size ~1
        self.outputs = [p for p in kdef.params if p.is_output]
        self.stored_once = set()        # "load" outputs: stored once (outside loops), then read
        self.idx = next((p.name for p in kdef.params if p.kind == "idx"), None)
        self.perm = next((p.name for p in kdef.params if p.kind == "perm"), None)


# --------------------------------------------------------------------------- parameters

def choose_params(rng, ndim, vectors=frozenset(), loss_only=False, stores=False):
    params = [Param(f"x{k}", "in", ndim) for k in range(rng.randint(1, 3))]
    modes = [rng.choice(GRID_OUT_MODES + ACC_MODES + ["total"]) for _ in range(rng.randint(1, 3))]
    if vectors:
        params += [Param(f"p{k}", "vin", ndim) for k in range(rng.randint(1, 2))]
        modes.append(rng.choice(VEC_OUT_MODES + VEC_ACC_MODES))
    if loss_only:
        modes = ["total"]
    elif stores:
        modes += store_modes(rng, vectors)
    if rng.random() < 0.4 or any(m in ACC_MODES + VEC_ACC_MODES for m in modes):
        params.append(Param("src", "src", 1))
        params.append(Param("idx", "idx", ndim))
    if "perm" in modes:
        params.append(Param("perm", "perm", 1))
    if rng.random() < 0.6:
        params.append(Param("n", "n"))
    if rng.random() < 0.3:
        params.append(Param("c", "c"))
    for k, mode in enumerate(modes):
        kind = "acc" if mode in ACC_MODES else "tot" if mode == "total" else \
            "vout" if mode in VEC_OUT_MODES else "vacc" if mode in VEC_ACC_MODES else \
            STORE_MODES.get(mode, "out")
        params.append(Param(f"out{k}", kind, ndim if kind in ("out", "vout") else 1, mode))
    return params


def header(kdef):
    args = ", ".join(f"{p.name}: {p.annotation()}" for p in kdef.params)
    return ["@ad.kernel", f"def {kdef.name}({args}):"]


# --------------------------------------------------------------------------- loads

def _stencil(ctx):
    """Neighbour indices along one axis (periodic by branches or %, or clamped), then
    loads of every grid input at them."""
    axis = ctx.rng.randint(0, ctx.kdef.ndim - 1)
    t = "ij"[axis]
    arr = next(p.name for p in ctx.kdef.params if p.kind == "in")
    size = f"{arr}.shape[{axis}]"
    ip, im = ctx.fresh("ip"), ctx.fresh("im")
    style = ctx.pick(["branch", "branch", "mod", "clamp", "mod2"])
    ctx.kdef.features.append(f"stencil-{style}")
    if style == "branch":
        nn = ctx.fresh("nn")
        ctx.emit(f"{nn} = {size}")
        for name, init, test, wrap in ((ip, f"{t} + 1", f"{ip} == {nn}", "0"),
                                       (im, f"{t} - 1", f"{im} < 0", f"{nn} - 1")):
            ctx.emit(f"{name} = {init}")
            ctx.emit(f"if {test}:")
            ctx.emit(f"    {name} = {wrap}")
    elif style == "mod":
        ctx.emit(f"{ip} = ({t} + 1) % {size}")
        ctx.emit(f"{im} = ({t} + {size} - 1) % {size}")
    elif style == "mod2":
        ctx.emit(f"{ip} = ({t} + 2) % {size}")
        ctx.emit(f"{im} = ({t} + {size} - 1) % {size}")
    else:
        ctx.emit(f"{ip} = min({t} + 1, {size} - 1)")
        ctx.emit(f"{im} = max({t} - 1, 0)")
    ctx.scope.indices += [ip, im]
    for p in ctx.kdef.params:
        if p.kind in ("in", "vin"):
            for nb in (ip, im):
                at = [nb if a == axis else "ij"[a] for a in range(ctx.kdef.ndim)]
                (ctx.reads if p.kind == "in" else ctx.vreads).append(f"{p.name}[{', '.join(at)}]")


def s_load(ctx):
    """``t = x[i, j]``, a neighbour or a gather ``src[idx[i]]`` into a new local."""
    t = ctx.fresh("v")
    ctx.emit(f"{t} = {ctx.pick(ctx.reads)}")
    ctx.define(t)


# --------------------------------------------------------------------------- writes

def s_vload(ctx):
    """``u = p0[i]`` (or a neighbour) into a new vec3 local."""
    t = ctx.fresh("u")
    ctx.emit(f"{t} = {ctx.pick(ctx.vreads)}")
    ctx.define(t, "v")


def _scaled(ctx, out):
    return f"{ctx.scales[out.kind]} * {bounded(ctx)}"


def _sink(ctx):
    """The value of a kernel's last write of a vector: the vec3 locals assigned last
    reach the loss (as do, through them, the matrices and quaternions they came from)."""
    last = ctx.scope.vecs[-2:]
    return " + ".join([f"{0.5 if len(last) > 1 else 0.7} * {u}" for u in last] +
                      [f"0.3 * {vec(ctx)}" if len(last) == 1 else vec(ctx)][:2 - len(last)])


def write_vector(ctx, out, last=False):
    """One write of an array of vec3 in its mode (``last``: the kernel's final write,
    of its latest vec3 locals)."""
    own = f"{out.name}[{ctx.index}]"
    v = f"({_sink(ctx)})" if last and ctx.scope.vecs else vec(ctx)
    if out.mode == "vstore":
        ctx.emit(f"{own} = {v}")
    elif out.mode == "vadd":
        ctx.emit(f"{own} {ctx.pick(['+=', '-='])} {v}")
    elif out.mode == "vscatter":
        ctx.emit(f"{out.name}[{ctx.idx}[{ctx.index}]] += {ctx.scales['acc']} * {v}")
    elif out.mode == "vatomic":
        ctx.emit(f"ad.atomic_add({out.name}, {ctx.idx}[{ctx.index}], {ctx.scales['acc']} * {v})")
    else:
        raise ValueError(out.mode)


def write(ctx, out, last=False):
    """One write of ``out`` in its mode."""
    own = f"{out.name}[{ctx.index}]"
    mode = out.mode
    if out.kind in ("vout", "vacc") and mode not in STORE_MODES:
        write_vector(ctx, out, last)
    elif mode == "store":
        ctx.emit(f"{own} = {bounded(ctx)}")
    elif mode == "add":
        ctx.emit(f"{own} {ctx.pick(['+=', '-='])} {bounded(ctx)}")
    elif mode == "cond":
        ctx.emit(f"if {comparison(ctx)}:")
        ctx.emit(f"    {own} = {bounded(ctx)}")
        if ctx.chance(0.5):
            ctx.emit("else:")
            ctx.emit(f"    {own} = {bounded(ctx)}")
    elif mode == "load":
        t = ctx.fresh("s")
        ctx.emit(f"{own} = {bounded(ctx)}")
        ctx.emit(f"{t} = {own}")
        ctx.define(t)
        ctx.stored_once.add(out.name)
    elif mode == "perm":
        at = f"{ctx.perm}[i]" if ctx.kdef.ndim == 1 else f"{ctx.perm}[i], j"
        ctx.emit(f"{out.name}[{at}] = {bounded(ctx)}")
    elif mode == "const":
        ctx.emit(f"{own} += 1.0")
    elif mode == "scatter":
        ctx.emit(f"{out.name}[{ctx.idx}[{ctx.index}]] += {_scaled(ctx, out)}")
    elif mode in ("atomic", "atomic_sub"):
        fn = "ad.atomic_add" if mode == "atomic" else "ad.atomic_sub"
        ctx.emit(f"{fn}({out.name}, {ctx.idx}[{ctx.index}], {_scaled(ctx, out)})")
    elif mode == "total":
        ctx.emit(f"ad.atomic_add({out.name}, 0, {_scaled(ctx, out)})")
    elif mode in STORE_MODES:
        s_stores(ctx, out)
    else:
        raise ValueError(mode)


def _writable(ctx):
    """Outputs a write may go to here: a "load" output is stored once, outside loops
    (the one store-then-load pattern adjoint allows, docs/semantics.md); the outputs of
    ``STORE_MODES`` only by their own ``s_stores``, at the end."""
    return [o for o in ctx.outputs if o.mode not in STORE_MODES and (o.mode != "load" or
            (not ctx.in_loop() and o.name not in ctx.stored_once))]


# --------------------------------------------------------------------------- stores (issue 37)

def store_modes(rng, vectors):
    """The outputs a kernel drawn with stores adds: one or two of ``STORE_MODES``, and
    sometimes a "load" output (stored once, then read back: a read between the stores)."""
    choices = ["twice", "twice", "twice", "twice0"] + ["vtwice"] * 2 * bool(vectors)
    modes = [rng.choice(choices) for _ in range(1 if rng.random() < 0.7 else 2)]
    return modes + ["load"] * (rng.random() < 0.4)


def s_stores(ctx, out):
    """The same element of ``out`` stored two or more times: ``o[i] = v`` (the first
    sometimes ``o[i] += v`` or ``ad.atomic_add(o, i, v)``), then one to three more stores,
    mostly of the same value ``v`` and now and then of another, with zero to two
    statements before each: a read of another array, a store into another output (of
    ``v`` too), a load output stored and read back at the thread's index, a local
    computed, or another value stored into ``o`` itself. ``twice0``: the element
    ``o[0]``, stored by one thread (``if i == 0:``); ``vtwice``: vec3 values. In the
    backward each store hands ``adj_o[i]`` to its value and clears it, so the second
    ``adj_v += adj_o[i]`` adds 0, which pass scale read as a doubling before 09b4cd3."""
    vector = out.mode == "vtwice"
    if out.mode == "twice0":
        at = "0"
        guard = "i == 0" if ctx.kdef.ndim == 1 else \
            ctx.pick(["i == 0 and j == 0", "i == 1 and j == 2", "j == 1 and i == 2"])
        ctx.emit(f"if {guard}:")
        with ctx.block():
            _stores(ctx, out, at, vector)
        ctx.kdef.features.append("store-const-index")
        return
    _stores(ctx, out, ctx.index, vector)


def _stores(ctx, out, at, vector):
    own = f"{out.name}[{at}]"
    kind = "v" if vector else "f"
    v = _stored_value(ctx, kind)
    first = ctx.pick(["=", "=", "=", "+=", "atomic"])
    if first == "atomic":
        ctx.emit(f"ad.atomic_add({out.name}, {at}, {v})")
    else:
        ctx.emit(f"{own} {first} {v}")
    how = {"atomic": "atomic", "+=": "add"}.get(first, "store")
    features = {"store-twice", f"store-first-{how}"}
    for _ in range(ctx.rng.choices([1, 2, 3], [5, 3, 1])[0]):
        for _ in range(ctx.rng.choices([0, 1, 2], [4, 4, 2])[0]):
            features.add(_between(ctx, out, own, v, kind))
        if ctx.chance(0.8):
            ctx.emit(f"{own} = {v}")
        else:
            ctx.emit(f"{own} = {_other_value(ctx, kind, v)}")
            features.add("store-other-value")
    ctx.kdef.features += sorted(features)


def _stored_value(ctx, kind):
    """The value stored: a local of the scope, a new local, or (floats) an array read."""
    names = [n for n in ctx.scope.of_kind(kind)]
    if names and ctx.chance(0.45):
        return ctx.pick(names)
    if kind == "f" and ctx.chance(0.2):
        return ctx.pick(ctx.reads)
    t = ctx.fresh("sv" if kind == "f" else "su")
    ctx.emit(f"{t} = {bounded(ctx) if kind == 'f' else vec(ctx)}")
    ctx.define(t, kind)
    return t


def _other_value(ctx, kind, v):
    names = [n for n in ctx.scope.of_kind(kind) if n != v]
    if names and ctx.chance(0.5):
        return ctx.pick(names)
    return bounded(ctx) if kind == "f" else vec(ctx)


def _between(ctx, out, own, v, kind):
    """One statement between two stores into ``own``; its feature tag."""
    others = [o for o in _writable(ctx) if o is not out and o.kind in ("out", "acc", "tot")] + \
        [o for o in ctx.outputs if o is not out and o.mode in ("twice", "vtwice")]
    loads = [o for o in others if o.mode == "load"]
    options = ["read", "local", "other-value"] + ["other-store"] * 2 * bool(others) + \
        ["read-back"] * 3 * bool(loads)
    what = ctx.pick(options)
    if what == "read":
        t = ctx.fresh("sr")
        ctx.emit(f"{t} = {ctx.pick(ctx.reads)}")
        ctx.define(t)
    elif what == "local":
        t = ctx.fresh("sl")
        ctx.emit(f"{t} = {bounded(ctx)}")
        ctx.define(t)
    elif what == "other-value":
        ctx.emit(f"{own} = {_other_value(ctx, kind, v)}")
    elif what == "read-back":
        write(ctx, ctx.pick(loads))        # o2[i] = e; s = o2[i]
    else:
        other = ctx.pick(others)
        if other.mode in ("twice", "vtwice"):
            value = v if (other.mode == "vtwice") == (kind == "v") and ctx.chance(0.7) else \
                (vec(ctx) if other.mode == "vtwice" else bounded(ctx))
            ctx.emit(f"{other.name}[{ctx.index}] = {value}")
        else:
            write(ctx, other)
    return f"store-between-{what}"


def s_write(ctx):
    write(ctx, ctx.pick(_writable(ctx)))


def s_pairs(ctx):
    """``p = 0.0; for k in range(n): p += f(...) * x[k]`` at the top level of a 1-D
    kernel: every thread reads every element of an input, and its backward adds into
    them at an index all threads compute alike (where a privatized backward runs its
    threads two at a time: adjoint/emit/jam.py)."""
    acc, k = ctx.fresh("p"), ctx.fresh("k")
    taken = {p.name for p in ctx.kdef.params}
    while acc in taken:         # (p0, p1: a vector program's arrays of vec3)
        acc = ctx.fresh("p")
    ints = [p.name for p in ctx.kdef.params if p.kind == "n"]
    ctx.emit(f"{acc} = 0.0")
    ctx.emit(f"for {k} in range({ctx.pick(ints + [str(ctx.rng.randint(1, 4))])}):")
    extra = [f"{p.name}[min(max({k}, 0), {p.name}.shape[0] - 1)]" for p in ctx.kdef.params
             if p.kind == "in"]
    ctx.reads += extra
    with ctx.block() as s:
        s.ints.append(k)
        s.loops.append("for")
        ctx.emit(f"{acc} += {bounded(ctx)} * {ctx.pick(extra)}")
    ctx.reads[:] = [r for r in ctx.reads if r not in extra]
    ctx.define(acc)
    ctx.kdef.features.append("all-pairs")


KERNEL_CONSTRUCTS += [
    (s_load, 2, lambda ctx: ctx.reads),
    (s_write, 1, _writable),
    (s_pairs, 1, lambda ctx: ctx.depth == 0 and ctx.kdef.ndim == 1),
    (s_vload, 2, lambda ctx: ctx.vreads),
]


# --------------------------------------------------------------------------- a kernel

def gen_kernel(rng, name, ndim, funcs, scales, statements=(2, 6), vectors=frozenset(),
               extras=False, loss_only=False, stores=False):
    """A random kernel over a ``ndim``-D grid calling ``funcs`` (a list of FuncSig), with
    ``statements`` (low, high) top-level statements. ``scales`` maps an output kind
    ("acc", "tot") to the factor its increments get; ``vectors`` names the vector
    kinds the kernel may use (none: a scalar kernel, drawn as before they existed);
    ``extras``: gen_expr's extra forms and keyword calls (program.py's Profile.extras);
    ``loss_only``: its one output is a one-element total (Profile.losses); ``stores``: it
    also stores one element several times (s_stores, Profile.stores)."""
    kdef = KernelDef(name, ndim, choose_params(rng, ndim, vectors, loss_only, stores))
    ctx = KernelCtx(rng, funcs, kdef, dict(scales, out=1.0))
    ctx.vectors = vectors
    ctx.extras = extras
    ctx.emit("i = ad.tid()" if ndim == 1 else "i, j = ad.tid()")
    ctx.scope.indices += ["i"] if ndim == 1 else ["i", "j"]
    ctx.scope.ints += [p.name for p in kdef.params if p.kind == "n"]
    ctx.float_params += [p.name for p in kdef.params if p.kind == "c"]
    for p in kdef.params:
        if p.kind == "in":
            ctx.reads.append(f"{p.name}[{ctx.index}]")
        elif p.kind == "src":
            ctx.reads.append(f"{p.name}[{ctx.idx}[{ctx.index}]]")
        elif p.kind == "vin":
            ctx.vreads.append(f"{p.name}[{ctx.index}]")
    if rng.random() < 0.35:
        _stencil(ctx)
    for _ in range(rng.randint(0, 2)):
        s_load(ctx)
    if vectors:
        s_vload(ctx)
    if rng.random() < 0.15:
        cond = int_condition(ctx) if rng.random() < 0.5 else comparison(ctx)
        ctx.emit(f"if {cond}:")
        ctx.emit("    return")
        kdef.features.append("guard-return")
    body(ctx, rng.randint(*statements))
    for out in ctx.outputs:
        if out.name not in ctx.stored_once:
            write(ctx, out, last=True)
    kdef.source = "\n".join(header(kdef) + ctx.lines) + "\n"
    kdef.features += sorted({p.mode for p in ctx.outputs})
    return kdef
