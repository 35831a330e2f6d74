"""Random ``@ad.func`` definitions, and funcs with a hand-written ``@ad.func_grad``.

A generated func takes one to three floats (and sometimes an int loop bound),
may call funcs generated before it, may ``return`` early from a branch or a
loop, and returns one or two values (every return the same number). A
custom-gradient func is ``A(a) * B(b)`` (or ``A(a)``) from a table of smooth
functions with known derivatives, and its ``@ad.func_grad`` returns the exact
adjoints (and its ``@ad.func_jvp`` the exact tangent), so finite differences of the
primal check that adjoint uses the rules.

A vector program also gets funcs taking vec3 (``u: ad.vec3``, before its floats)
and returning a vec3, a float, or a vec3 and a float (``gen_vec_funcs``).

In a program drawn with extras (``extras``), the last parameters of a func (scalar or
custom-gradient) often have numeric defaults (``b: float = 0.35``, ``m: int = 2``,
sometimes an int for a float: ``d: float = 1``), which calls leave out or pass by
keyword (gen_expr's ``call_source``), and the bodies use gen_expr's extra forms.
"""
from .gen_expr import Ctx, FuncSig
from .gen_stmt import body, return_value

PARAMS = ["a", "b", "d"]
VEC_PARAMS = ["u", "w"]

# primal and derivative of a smooth one-argument function, in the argument {x}
SMOOTH = [
    ("math.sin({x})", "math.cos({x})"),
    ("math.tanh({x})", "(1.0 - math.tanh({x}) ** 2)"),
    ("math.atan({x})", "1.0 / (1.0 + {x} * {x})"),
    ("math.exp(0.5 * math.sin({x}))", "0.5 * math.cos({x}) * math.exp(0.5 * math.sin({x}))"),
    ("{x} / (1.0 + {x} * {x})", "(1.0 - {x} * {x}) / (1.0 + {x} * {x}) ** 2"),
    ("(0.5 * {x} + 0.25)", "0.5"),
]


def _defaults(rng, names):
    """``(n, [param: annotation[ = default], ...])``: the last ``n`` of ``names`` (float
    parameters, and ``m``, an int) defaulted to numbers."""
    n = rng.randint(1, len(names)) if rng.random() < 0.75 else 0
    out = []
    for k, p in enumerate(names):
        text = f"{p}: int" if p == "m" else f"{p}: float"
        if k >= len(names) - n:
            value = str(rng.randint(0, 3)) if p == "m" else \
                rng.choice(["1", "0", "-1"]) if rng.random() < 0.15 else \
                repr(round(rng.uniform(-0.9, 0.9), 2))
            text += f" = {value}"
        out.append(text)
    return n, out


def gen_func(rng, name, callable_funcs, extras=False):
    """A random func; returns (FuncSig, source)."""
    n_floats = rng.randint(1, 3)
    has_int = rng.random() < 0.3
    n_returns = 2 if rng.random() < 0.3 else 1
    ctx = Ctx(rng, "func", callable_funcs)
    ctx.extras = extras
    ctx.n_returns = n_returns
    ctx.scope.floats += PARAMS[:n_floats]
    if has_int:
        ctx.scope.ints.append("m")
    body(ctx, rng.randint(1, 4))
    ctx.emit(f"return {return_value(ctx)}")
    args = [f"{p}: float" for p in PARAMS[:n_floats]] + (["m: int"] if has_int else [])
    n_defaults = 0
    if extras:
        n_defaults, args = _defaults(rng, PARAMS[:n_floats] + (["m"] if has_int else []))
    ret = " -> float" if n_returns == 1 else ""
    src = ["@ad.func", f"def {name}({', '.join(args)}){ret}:"] + ctx.lines
    return FuncSig(name, n_floats, has_int, n_returns, n_defaults=n_defaults), \
        "\n".join(src) + "\n"


def gen_custom_grad_func(rng, name, extras=False):
    """``A(a) [* B(b)]`` with an exact hand-written adjoint; returns (FuncSig, source)."""
    n = rng.randint(1, 2)
    parts = [rng.choice(SMOOTH) for _ in range(n)]
    prim = [f.format(x=p) for (f, _), p in zip(parts, PARAMS)]
    deriv = [d.format(x=p) for (_, d), p in zip(parts, PARAMS)]
    params = ", ".join(f"{p}: float" for p in PARAMS[:n])
    n_defaults, signature = (_defaults(rng, PARAMS[:n]) if extras else (0, [params]))
    lines = ["@ad.func", f"def {name}({', '.join(signature)}) -> float:"]
    if rng.random() < 0.5:
        lines += [f"    u = {prim[0]}", f"    return {' * '.join(['u'] + prim[1:])}"]
    else:
        lines += [f"    return {' * '.join(prim)}"]
    adjs = []
    for k in range(n):
        factors = ["adj_ret", deriv[k]] + [prim[m] for m in range(n) if m != k]
        adjs.append(" * ".join(factors))
    lines += ["", "", f"@ad.func_grad({name})",
              f"def {name}_grad({params}, adj_ret: float):",
              f"    return {', '.join(adjs)}"]
    dots = [" * ".join([f"dot_{PARAMS[k]}", deriv[k]] + [prim[m] for m in range(n) if m != k])
            for k in range(n)]
    dot_params = ", ".join(f"dot_{p}: float" for p in PARAMS[:n])
    lines += ["", "", f"@ad.func_jvp({name})",
              f"def {name}_jvp({params}, {dot_params}):",
              f"    return {' * '.join(prim)}, {' + '.join(dots)}"]
    return FuncSig(name, n, False, 1, n_defaults=n_defaults), "\n".join(lines) + "\n"


def gen_vec_func(rng, name, callable_funcs, vectors, extras=False):
    """A random func of one or two vec3 (and up to two floats); returns (FuncSig, source)."""
    n_vecs, n_floats = rng.randint(1, 2), rng.randint(0, 2)
    vec_returns = rng.choice([(0,), (0,), (), (0,)])
    n_returns = 2 if vec_returns and rng.random() < 0.3 else 1
    ctx = Ctx(rng, "func", callable_funcs)
    ctx.extras = extras
    ctx.vectors, ctx.n_returns, ctx.vec_returns = vectors, n_returns, vec_returns
    ctx.scope.vecs += VEC_PARAMS[:n_vecs]
    ctx.scope.floats += PARAMS[:n_floats]
    body(ctx, rng.randint(1, 4))
    ctx.emit(f"return {return_value(ctx)}")
    args = [f"{p}: ad.vec3" for p in VEC_PARAMS[:n_vecs]] + \
        [f"{p}: float" for p in PARAMS[:n_floats]]
    ret = "" if n_returns == 2 else " -> ad.vec3" if vec_returns else " -> float"
    src = ["@ad.func", f"def {name}({', '.join(args)}){ret}:"] + ctx.lines
    return FuncSig(name, n_floats, False, n_returns, n_vecs, vec_returns), "\n".join(src) + "\n"


def gen_vec_funcs(rng, sigs, vectors, first, extras=False):
    """Zero to two vector funcs named from ``f{first}`` on, after the scalar ``sigs``."""
    sources = []
    for k in range(rng.choice([0, 1, 1, 2])):
        sig, src = gen_vec_func(rng, f"f{first + k}", list(sigs), vectors, extras)
        sigs.append(sig)
        sources.append(src)
    return sources


def gen_funcs(rng, extras=False):
    """Zero to two funcs (one to three with ``extras``), each able to call the ones
    before it."""
    sigs, sources = [], []
    for k in range(rng.choice([1, 2, 2, 3] if extras else [0, 0, 1, 1, 2])):
        name = f"f{k}"
        if rng.random() < 0.25:
            sig, src = gen_custom_grad_func(rng, name, extras)
        else:
            sig, src = gen_func(rng, name, sigs, extras)
        sigs.append(sig)
        sources.append(src)
    return sigs, sources
