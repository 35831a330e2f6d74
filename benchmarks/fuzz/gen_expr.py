"""Random expressions of adjoint's kernel language, and the state a generator carries.

A ``Ctx`` is what every construct generator reads and writes: the random source,
the lines written so far (with their indentation), and the ``Scope`` -- which float
and int locals are assigned on *every* path reaching the current line. Generators
only ever read names from the scope, so every program they write is valid Python
that never reads a maybe-unassigned name.

Values stay finite and of moderate size, so central finite differences of the
forward are meaningful: inputs lie in [-1, 1], and every float variable is assigned
a ``bounded`` expression (about [-2, 2] whenever its operands are), built from
smooth saturating functions (tanh, sin, exp of a tanh...), convex combinations
and scaled products. ``raw`` expressions (sums and products of leaves) appear only
inside those saturating functions and in comparisons. Kinks (abs, min, max,
clamp, branches) are allowed: the reference interpreter records every comparison,
so a finite difference that straddles one is detected and skipped.

In a program drawn with vector types (``Ctx.vectors``), the scope also holds vec3,
mat33 and quat locals; gen_vec writes their expressions and registers the scalar
forms that reduce them (``VECTOR_FORMS``), and a leaf is sometimes a component.

In a program drawn with extras (``Ctx.extras``, program.py's ``Profile.extras``), the
bounded forms also include ``EXTRA_FORMS``: ``asinh``, ``acosh`` of ``1.5 + r * r``,
``atanh`` of ``0.6 * tanh(r)`` (and the like), ``hypot`` with one argument bounded away
from 0 (smooth), ``fmod`` by a divisor bounded away from 0 (its jumps, where ``x / y``
crosses an integer, are recorded in the reference's trace as a branch is, so a finite
difference across one is skipped), and ``float(math.isnan(...))``; conditions are
sometimes combined with ``math.isfinite/isnan/isinf`` (always True or False on the
finite values a program computes, so the branch is still decided by the comparison);
and calls of funcs with defaulted parameters leave some out or pass some by keyword
(``call_source``). Nothing of this draws from the random source of a program without
extras, so those programs are the ones drawn before extras existed.
"""
import contextlib
import itertools
import re
from dataclasses import dataclass, field


@dataclass
class Scope:
    """Names assigned on every path to the current line."""
    floats: list = field(default_factory=list)
    ints: list = field(default_factory=list)      # small ints: loop counters, int params (<= 4)
    indices: list = field(default_factory=list)   # thread and neighbour indices (any size)
    loops: list = field(default_factory=list)     # enclosing loop kinds, innermost last
    vecs: list = field(default_factory=list)      # vec3 locals (vector programs only)
    mats: list = field(default_factory=list)      # mat33 locals
    quats: list = field(default_factory=list)     # unit quat locals

    def copy(self):
        return Scope(list(self.floats), list(self.ints), list(self.indices), list(self.loops),
                     list(self.vecs), list(self.mats), list(self.quats))

    def of_kind(self, kind):
        """The locals of one kind: "f" (float), "v" (vec3), "m" (mat33) or "q" (quat)."""
        return {"f": self.floats, "v": self.vecs, "m": self.mats, "q": self.quats}[kind]


@dataclass
class FuncSig:
    """A func a kernel or a later func may call."""
    name: str
    n_floats: int
    has_int: bool
    n_returns: int
    n_vecs: int = 0               # vec3 parameters, before the floats
    vec_returns: tuple = ()       # which results are vec3 (the others are floats)
    n_defaults: int = 0           # the last n_defaults parameters have numeric defaults

    def returns_float(self):
        return self.n_returns == 1 and not self.vec_returns

    def params(self):
        """The parameter names in order: vec3 (u, w), floats (a, b, d), the int (m)."""
        return ["u", "w"][:self.n_vecs] + ["a", "b", "d"][:self.n_floats] + \
            (["m"] if self.has_int else [])


class Ctx:
    """Generator state for one kernel or func body."""

    def __init__(self, rng, role, funcs=()):
        self.rng = rng
        self.role = role                  # "kernel" or "func"
        self.funcs = list(funcs)          # FuncSig callable from here
        self.lines = []
        self.indent = 1
        self.depth = 0                    # nesting of compound statements
        self.scope = Scope()
        self.float_params = []            # float scalars (read-only leaves)
        self.reads = []                   # array loads usable as leaves, e.g. "x0[i, j]"
        self.n_returns = 1                # funcs: values each return gives back
        self.vec_returns = ()             # funcs: which of them are vec3
        self.vectors = frozenset()        # vector kinds this body may use: vec3, mat33, quat
        self.vreads = []                  # vec3 array loads, e.g. "p0[i]"
        self.extras = False               # a program drawn with extras (EXTRA_FORMS, ...)
        self._names = itertools.count()

    # -- writing -------------------------------------------------------------------------
    def emit(self, line):
        self.lines.append("    " * self.indent + line)

    def fresh(self, prefix="t"):
        return f"{prefix}{next(self._names)}"

    def define(self, name, kind="f"):
        names = self.scope.of_kind(kind)
        if name not in names:
            names.append(name)

    def callable(self, f):
        """Whether this body can call ``f`` (a func taking vectors needs a vector body)."""
        return not f.n_vecs or bool(self.vectors)

    @contextlib.contextmanager
    def block(self):
        """An indented block whose new names are dropped afterwards (a loop body, a
        branch); yields the block's own scope so callers can see what it assigned."""
        saved = self.scope
        self.scope = saved.copy()
        self.indent += 1
        self.depth += 1
        try:
            yield self.scope
        finally:
            self.indent -= 1
            self.depth -= 1
            self.scope = saved

    # -- choosing ------------------------------------------------------------------------
    def chance(self, p):
        return self.rng.random() < p

    def pick(self, seq):
        return self.rng.choice(list(seq))

    def const(self, lo=-0.9, hi=0.9):
        return repr(round(self.rng.uniform(lo, hi), 2))

    def in_loop(self):
        return bool(self.scope.loops)


# --------------------------------------------------------------------------- leaves

def var(ctx):
    """A float local (often a recent one, so values flow on), or a float parameter; a
    constant when there is none yet."""
    names = ctx.scope.floats + ctx.float_params
    if not names:
        return ctx.const()
    return ctx.pick(ctx.scope.floats[-3:] or names) if ctx.chance(0.5) else ctx.pick(names)


def component(ctx):
    """A component of a vector, quaternion or matrix local: ``u.x``, ``u[2]``, ``m[1, 0]``."""
    kind = ctx.pick(k for k in "vqm" if ctx.scope.of_kind(k))
    name = ctx.pick(ctx.scope.of_kind(kind))
    if kind == "m":
        return f"{name}[{ctx.rng.randint(0, 2)}, {ctx.rng.randint(0, 2)}]"
    k = ctx.rng.randint(0, 3 if kind == "q" else 2)
    return f"{name}.{'xyzw'[k]}" if ctx.chance(0.5) else f"{name}[{k}]"


def leaf(ctx):
    """A value of size about 1: a variable, an array load, a vector's component or a
    constant."""
    if ctx.vectors and (ctx.scope.vecs or ctx.scope.mats or ctx.scope.quats) and ctx.chance(0.2):
        return component(ctx)
    r = ctx.rng.random()
    if ctx.reads and r < 0.3:
        return ctx.pick(ctx.reads)
    if r < 0.9 and (ctx.scope.floats or ctx.float_params):
        return var(ctx)
    return ctx.const()


def raw(ctx, depth=2):
    """Sums and products of leaves: finite, but not bounded (used inside tanh, sin...)."""
    if depth == 0 or ctx.chance(0.35):
        return leaf(ctx)
    a, b = raw(ctx, depth - 1), raw(ctx, depth - 1)
    form = ctx.pick(["{a} + {b}", "{a} - {b}", "{a} * {b}", "{c} * {a}", "-{a}"])
    return "(" + form.format(a=a, b=b, c=ctx.const(-2.0, 2.0)) + ")"


# --------------------------------------------------------------------------- bounded forms
# Each takes ctx and returns source whose value lies in about [-2, 2] when every
# variable does. One function per form keeps the table readable.

def _saturate(ctx):
    fn = ctx.pick(["math.sin", "math.cos", "math.tanh", "ad.sin", "ad.tanh", "ad.cos"])
    return f"{fn}({raw(ctx)})"


def _atan(ctx):
    return f"0.6 * {ctx.pick(['math.atan', 'ad.atan'])}({raw(ctx)})"


def _exp_tanh(ctx):
    return f"math.exp(0.5 * math.tanh({raw(ctx)}))"


def _gauss(ctx):
    r = raw(ctx, 1)
    return f"math.exp(-{r} * {r})"


def _log(ctx):
    return f"math.log(2.0 + math.sin({raw(ctx)}))"


def _sqrt(ctx):
    v = var(ctx)
    return f"(math.sqrt(1.0 + {v} * {v}) - 1.0)"


def _ratio(ctx):
    r = raw(ctx, 1)
    return f"{var(ctx)} / (1.0 + {r} * {r})"


def _ratio_cos(ctx):
    return f"{var(ctx)} / (2.0 + math.cos({raw(ctx)}))"


def _product(ctx):
    return f"0.5 * {leaf(ctx)} * {leaf(ctx)}"


def _square(ctx):
    return ctx.pick(["0.25 * {v} ** 2", "{v} ** 2 * 0.25", "0.1 * {v} ** 3",
                     "(-0.5) ** 2 * {v}", "-0.5 ** 2 * {v}", "0.3 * {v} * {v}"]).format(v=leaf(ctx))


def _pow(ctx):
    return f"0.2 * math.pow(1.5 + math.sin({raw(ctx)}), 2.0)"


def _atan2(ctx):
    return f"0.6 * ad.atan2({raw(ctx)}, 1.5 + math.cos({raw(ctx)}))"


def _hyperbolic(ctx):
    return ctx.pick(["math.sinh(0.5 * {v})", "(math.cosh(0.5 * {v}) - 1.0)"]).format(v=leaf(ctx))


def _convex(ctx, depth):
    a = ctx.rng.choice([0.5, 0.3, 0.7, 0.25])
    op = ctx.pick(["+", "-"])
    return f"({a} * {bounded(ctx, depth)} {op} {round(1 - a, 2)} * {bounded(ctx, depth)})"


def _minmax(ctx, depth):
    fn = ctx.pick(["min", "max", "ad.min", "ad.max"])
    return f"{fn}({bounded(ctx, depth)}, {bounded(ctx, depth)})"


def _abs(ctx, depth):
    return f"{ctx.pick(['abs', 'ad.abs'])}({bounded(ctx, depth)})"


def _clamp(ctx, depth):
    return ctx.pick([f"ad.clamp({raw(ctx)}, -1.0, 1.0)",
                     f"ad.clamp({var(ctx)}, {ctx.const(-0.9, -0.1)}, {ctx.const(0.1, 0.9)})"])


def _ternary(ctx, depth):
    return f"({bounded(ctx, depth)} if {comparison(ctx)} else {bounded(ctx, depth)})"


def _counter(ctx, depth):
    k = ctx.pick(ctx.scope.ints + ctx.scope.indices)
    return f"0.1 * float({k} % 7) * {bounded(ctx, depth)}"


def _call(ctx, depth):
    f = ctx.pick([f for f in ctx.funcs if f.returns_float() and ctx.callable(f)])
    return "0.5 * " + call_source(ctx, f)


LEAF_FORMS = [_saturate, _atan, _exp_tanh, _gauss, _log, _sqrt, _ratio, _ratio_cos,
              _product, _square, _pow, _atan2, _hyperbolic]
VECTOR_FORMS = []      # filled by gen_vec: dot, length, components of vector expressions


# --------------------------------------------------------------------------- extras
# Only in programs drawn with extras (Ctx.extras). Each keeps its function where it is
# smooth (or, fmod, piecewise smooth with its jumps traced by the reference).

def _asinh(ctx):
    return f"0.5 * {ctx.pick(['math.asinh', 'ad.asinh'])}({raw(ctx)})"


def _acosh(ctx):
    r = raw(ctx, 1)
    return f"0.5 * {ctx.pick(['math.acosh', 'ad.acosh'])}(1.5 + {r} * {r})"


def _atanh(ctx):
    inner = ctx.pick(["0.6 * math.tanh", "0.8 * math.sin", "0.7 * math.cos", "0.5 * ad.tanh"])
    return f"{ctx.pick(['math.atanh', 'ad.atanh'])}({inner}({raw(ctx)}))"


def _away(ctx):
    """A value at least 0.3 from 0: ``0.6 + 0.3 * sin(r)`` (or its negative)."""
    return f"{ctx.pick(['0.6', '-0.6', '0.75'])} + 0.3 * math.sin({raw(ctx, 1)})"


def _hypot(ctx):
    args = [ctx.pick([leaf(ctx), raw(ctx, 1)]), _away(ctx)]
    if ctx.chance(0.5):
        args.reverse()
    return f"0.5 * {ctx.pick(['math.hypot', 'ad.hypot'])}({args[0]}, {args[1]})"


def _fmod(ctx):
    x = ctx.pick([f"2.0 * math.sin({raw(ctx)})", leaf(ctx), f"1.5 * {leaf(ctx)}"])
    y = ctx.pick([ctx.pick(["0.45", "-0.55", "0.8", "-0.9", "0.7"]), _away(ctx),
                  f"0.7 + 0.2 * math.tanh({raw(ctx, 1)})"])
    return f"{ctx.pick(['math.fmod', 'ad.fmod'])}({x}, {y})"


def predicate(ctx):
    """``math.isfinite(x)`` (always True here), ``math.isnan(x)`` or ``math.isinf(x)``
    (always False), ``ad.`` spellings too."""
    fn = ctx.pick(["isfinite", "isnan", "isinf"])
    arg = ctx.pick([leaf(ctx), raw(ctx, 1)])
    return f"{ctx.pick(['math', 'math', 'ad'])}.{fn}({arg})", fn == "isfinite"


def _flag(ctx):
    """``float(math.isnan(x))`` (0.0 here) in arithmetic."""
    pred, true = predicate(ctx)
    return f"({0.5 if not true else -0.5} * float({pred}) + {ctx.pick(LEAF_FORMS)(ctx)})"


EXTRA_FORMS = [_asinh, _acosh, _atanh, _hypot, _hypot, _fmod, _fmod, _flag]


def _with_predicate(ctx, cmp):
    """``cmp`` combined with a predicate that does not change its value."""
    pred, true = predicate(ctx)
    if true:
        return ctx.pick([f"({pred} and {cmp})", f"({cmp} and {pred})", f"(not (not {pred}) and {cmp})"])
    return ctx.pick([f"(not {pred} and {cmp})", f"({cmp} or {pred})", f"({pred} or {cmp})",
                     f"(not ({pred} or not ({cmp})))"])


def bounded(ctx, depth=0):
    """A smooth (or kinked) expression of about [-2, 2] over the variables in scope;
    ``depth`` counts the combining forms (min, convex sums, ternaries...) around it."""
    if depth >= 2 or not ctx.chance(0.3):
        if ctx.vectors and ctx.chance(0.3):
            return ctx.pick(VECTOR_FORMS)(ctx)
        if ctx.extras and ctx.chance(0.3):
            return ctx.pick(EXTRA_FORMS)(ctx)
        return ctx.pick(LEAF_FORMS)(ctx)
    nested = [_convex, _minmax, _abs, _clamp, _ternary]
    if ctx.scope.ints or ctx.scope.indices:
        nested.append(_counter)
    if any(f.returns_float() and ctx.callable(f) for f in ctx.funcs):
        nested += [_call, _call]
    return ctx.pick(nested)(ctx, depth + 1)


# --------------------------------------------------------------------------- conditions

def comparison(ctx):
    """A float comparison that goes either way on random data (sometimes combined)."""
    if ctx.extras and ctx.chance(0.2):
        if ctx.chance(0.15):
            return predicate(ctx)[0]      # constant on the program's finite values
        ctx.extras = False                # (one predicate a condition)
        try:
            return _with_predicate(ctx, comparison(ctx))
        finally:
            ctx.extras = True
    op = ctx.pick(["<", "<=", ">", ">="])
    right = ctx.const(-0.6, 0.6) if ctx.chance(0.5) else leaf(ctx)
    cmp = f"{raw(ctx, 1)} {op} {right}"
    r = ctx.rng.random()
    if r < 0.1:
        return f"not ({cmp})"
    if r < 0.2:      # parenthesized: a while test puts it after "w < limit and"
        other = f"{leaf(ctx)} {ctx.pick(['<', '>'])} {ctx.const(-0.5, 0.5)}"
        return f"({cmp} {ctx.pick(['and', 'or'])} {other})"
    ints = ctx.scope.ints + ctx.scope.indices
    if r < 0.25 and ints:
        return f"({cmp} and {ctx.pick(ints)} % 2 == 0)"
    return cmp


def int_condition(ctx):
    """A condition on ints only (a loop counter, the thread index)."""
    k = ctx.pick(ctx.scope.ints + ctx.scope.indices)
    return f"{k} % {ctx.rng.randint(2, 4)} == {ctx.rng.randint(0, 1)}"


# --------------------------------------------------------------------------- calls

VECTOR_ARG = []       # gen_vec's vec3 expression, for the vector arguments of a call


def call_source(ctx, f):
    """``f(args)``: vector and float arguments from scope (no deeper calls), an int one if
    ``f`` takes it."""
    args = [VECTOR_ARG[0](ctx, 2) for _ in range(f.n_vecs)]
    args += [bounded(ctx, 2) if ctx.chance(0.4) else var(ctx) for _ in range(f.n_floats)]
    if f.has_int:
        ints = ctx.scope.ints
        args.append(ctx.pick(ints) if ints and ctx.chance(0.6) else str(ctx.rng.randint(0, 3)))
    if ctx.extras and ctx.chance(0.6):
        return _keyword_call(ctx, f, args)
    return f"{f.name}({', '.join(args)})"


CALLS = re.compile(r"\w\(")


def _keyword_call(ctx, f, args):
    """``f(x, b=y)``, ``f(d=.., a=..)``, ``f(x)``: the first few arguments positional, the
    others by keyword or (defaulted ones) left out. Keyword arguments are sometimes
    written out of the parameters' order, only where none calls a function (adjoint
    refuses that: it evaluates them in the parameters' order, docs/language.md)."""
    names = f.params()
    first_default = len(names) - f.n_defaults
    given = ctx.rng.randint(0, len(names))
    out, keywords = list(args[:given]), []
    for k in range(given, len(names)):
        if k >= first_default and ctx.chance(0.5):
            continue                        # left out: its default
        value = args[k]
        if names[k] not in ("u", "w") and ctx.chance(0.4):
            value = leaf(ctx) if names[k] != "m" else str(ctx.rng.randint(0, 3))
        keywords.append(f"{names[k]}={value}")
    if len(keywords) > 1 and ctx.chance(0.5) and \
            not any(CALLS.search(kw) for kw in keywords):
        ctx.rng.shuffle(keywords)
    return f"{f.name}({', '.join(out + keywords)})"
