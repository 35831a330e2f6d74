"""Table-driven test of every adjoint rule in ``adjoint.rules.RULES``.

For each rule the table below builds a few *variants* of one operation, written
as a user would write it inside a kernel:

* ``active``   every operand read from an input array;
* ``constK``   operand K of a multi-operand rule replaced by a literal constant;
* ``same``     one variable used for every operand (``x * x``, ``atan2(x, x)``);
* ``ad``       the ``ad.*`` spelling of a ``math.*``/builtin call (``ad.sin(x)``);
* ``aliasK``   the rule's K-th alias (``math.fabs(x)`` for ``abs``, ``pow(x, y)``).

A differentiable rule's variant is stored as is. A non-differentiable rule
(comparisons, ``not``, ``floor``, ``ceil``, ``int``, ``//``) is stored twice:
``zero`` (its value alone, as a float or a ternary) must have an exactly zero
gradient, and ``select``/``mixed`` feed it into differentiable arithmetic so
the kernel's gradient is checked against finite differences too.

Operand values are sampled uniformly in the rule's own ``domain`` with a fixed
seed. Every variant is compared with central finite differences in float64.
Samples are continuous random draws, so one landing within ``EPS`` of a kink
(``abs`` at 0, ``floor`` at an integer, ...) has probability ~1e-6 per element;
the seed is fixed, so the table is deterministic.

To keep numba compilation affordable, the variants of a handful of rules share
one kernel: input ``A[row, i]`` holds one operand column per row and output
``O[row, i]`` one variant per row. Each test seeds one output row only, so the
gradient it reads is that variant's alone, and every other input row must get
an exactly zero gradient.
"""
import re
from dataclasses import dataclass, field

import numpy as np
import pytest

import adjoint as ad
from adjoint.rules import RULES
from tests.conftest import central_fd

N = 4                 # threads (elements) per launch
EPS = 1e-6
RTOL, ATOL = 1e-6, 1e-7
RULES_PER_KERNEL = 8  # rules sharing one compiled kernel


def user_symbol(symbol):
    """How user code spells a rule's primal (``rt.clamp`` is ``ad.clamp``)."""
    return "ad." + symbol[3:] if symbol.startswith("rt.") else symbol


def spell(symbol, args):
    """Source of the operation ``symbol`` applied to operand sources ``args``."""
    if symbol == "not":
        return f"(not {args[0]})"
    if not symbol[0].isalpha():
        return f"({symbol}{args[0]})" if len(args) == 1 else f"({args[0]} {symbol} {args[1]})"
    return f"{symbol}({', '.join(args)})"


def ad_spelling(rule):
    """``ad.<name>`` when adjoint exports one for a call-style rule, else None."""
    sym = user_symbol(rule.symbol)
    if not sym[0].isalpha() or sym == "not" or sym.startswith("ad."):
        return None
    return f"ad.{rule.key}" if hasattr(ad, rule.key) else None


def returns_bool(rule):
    return rule.result_kind(*(["float"] * len(rule.params))) == "bool"


def intersect(domains):
    lo = max(d[0] for d in domains)
    hi = min(d[1] for d in domains)
    return (lo, hi) if lo < hi else tuple(domains[0])


@dataclass
class Variant:
    rule: str
    name: str
    expr: str              # source stored into O[row, i]
    rows: list             # input rows the expression reads
    row: int = -1          # output row
    zero: bool = False     # gradient must be exactly zero


@dataclass
class Group:
    """Several rules' variants compiled as one kernel."""
    index: int
    columns: list = field(default_factory=list)   # (lo, hi) per input row
    variants: list = field(default_factory=list)

    def column(self, domain):
        self.columns.append(tuple(domain))
        return len(self.columns) - 1


def operand_patterns(rule, group, rng):
    """[(name, operand sources, input rows read)] for one rule (a rule of ints, ``&``, takes
    ``int(v)`` of its sampled floats, and int constants)."""
    n = len(rule.params)
    cols = [group.column(d) for d in rule.domain]
    names = [f"int(v{c})" if rule.integer else f"v{c}" for c in cols]
    out = [("active", names, cols)]
    for k in range(n if n >= 2 else 0):
        lo, hi = rule.domain[k]
        value = float(rng.uniform(lo, hi))
        const = repr(int(value) if rule.integer else round(value, 3))
        args = list(names)
        args[k] = const
        out.append((f"const{k}", args, [c for j, c in enumerate(cols) if j != k]))
    if n >= 2:
        s = group.column(intersect(rule.domain))
        out.append(("same", [f"int(v{s})" if rule.integer else f"v{s}"] * n, [s]))
    return out


def rule_variants(rule, group, rng):
    symbol = user_symbol(rule.symbol)
    patterns = operand_patterns(rule, group, rng)
    spellings = [("", symbol)]
    if ad_spelling(rule):
        spellings.append(("ad-", ad_spelling(rule)))
    spellings += [(f"alias{k}-", alias) for k, alias in enumerate(rule.aliases)]
    out = []
    for prefix, sym in spellings:
        for pname, args, rows in (patterns if not prefix else patterns[:1]):
            e = spell(sym, args)
            name = prefix + pname
            if rule.differentiable:
                out.append(Variant(rule.key, name, e, rows))
            elif returns_bool(rule):
                a, b = args[0], args[-1]
                out.append(Variant(rule.key, name + "-zero", f"(1.5 if {e} else -0.5)", rows,
                                   zero=True))
                out.append(Variant(rule.key, name + "-select",
                                   f"({a} * {b} if {e} else {a} - {b})", rows))
            else:
                out.append(Variant(rule.key, name + "-zero", f"float({e})", rows, zero=True))
                out.append(Variant(rule.key, name + "-mixed",
                                   f"{' * '.join(args)} * float({e})", rows))
    return out


def build_groups():
    rng = np.random.default_rng(20240601)
    groups, keys = [], sorted(RULES)
    for start in range(0, len(keys), RULES_PER_KERNEL):
        g = Group(len(groups))
        for key in keys[start:start + RULES_PER_KERNEL]:
            for v in rule_variants(RULES[key], g, rng):
                v.row = len(g.variants)
                g.variants.append(v)
        groups.append(g)
    return groups


def kernel_source(g):
    lines = [
        "@ad.kernel",
        f"def rules_{g.index}(A: ad.array(dtype=float, ndim=2), "
        "O: ad.array(dtype=float, ndim=2)):",
        "    i = ad.tid()",
    ]
    lines += [f"    v{c} = A[{c}, i]" for c in range(len(g.columns))]
    lines += [f"    O[{v.row}, i] = {v.expr}  # {v.rule} {v.name}" for v in g.variants]
    return "\n".join(lines) + "\n"


GROUPS = build_groups()
VARIANTS = [(g, v) for g in GROUPS for v in g.variants]
_compiled = {}


def group_kernel(g, kernel_module):
    """Each group's kernel is imported once per test session (numba compiles once per backend)."""
    if g.index not in _compiled:
        _compiled[g.index] = getattr(kernel_module(kernel_source(g)), f"rules_{g.index}")
    return _compiled[g.index]


def sample_inputs(g):
    rng = np.random.default_rng(1000 + g.index)
    return np.array([rng.uniform(lo, hi, N) for lo, hi in g.columns])


def test_every_rule_is_in_the_table():
    tested = {v.rule for _, v in VARIANTS}
    assert tested == set(RULES)


@pytest.mark.parametrize("g,v", VARIANTS, ids=[f"{v.rule}-{v.name}" for _, v in VARIANTS])
def test_rule_gradient_matches_finite_differences(backend, kernel_module, g, v):
    k = group_kernel(g, kernel_module)
    a0 = sample_inputs(g)
    w = np.random.default_rng(7).uniform(0.5, 1.5, N)

    A = ad.array(a0, requires_grad=True)
    O = ad.zeros((len(g.variants), N), requires_grad=True)
    seed = np.zeros((len(g.variants), N))
    seed[v.row] = w
    tape = ad.Tape()
    with tape:
        ad.launch(k, N, inputs=[A], outputs=[O])
    tape.backward(grads={O: seed})
    grad = A.grad.numpy()

    def f(a):
        out = ad.zeros((len(g.variants), N))
        ad.launch(k, N, inputs=[ad.array(a)], outputs=[out])
        return float(np.dot(w, out.numpy()[v.row]))

    assert np.all(np.isfinite(O.numpy()[v.row]))
    for r in sorted(set(v.rows)):
        def f_row(x, r=r):
            a = a0.copy()
            a[r] = x
            return f(a)
        fd = central_fd(f_row, a0[r], EPS)
        np.testing.assert_allclose(grad[r], fd, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{v.rule} {v.name}: {v.expr}, input row {r}")
    others = [r for r in range(len(g.columns)) if r not in v.rows]
    assert np.all(grad[others] == 0.0), "gradient leaked into rows the variant does not read"
    if v.zero:
        assert np.all(grad == 0.0)


DIFFERENTIABLE = sorted(k for k, r in RULES.items() if r.differentiable)


@pytest.mark.parametrize("key", DIFFERENTIABLE)
def test_backward_source_updates_each_operand_adjoint(kernel_module, key):
    rule = RULES[key]
    n = len(rule.params)
    params = ", ".join(f"a{k}: ad.array(dtype=float)" for k in range(n))
    loads = "\n".join(f"    x{k} = a{k}[i]" for k in range(n))
    expr = spell(user_symbol(rule.symbol), [f"x{k}" for k in range(n)])
    m = kernel_module(f"@ad.kernel\ndef k({params}, out: ad.array(dtype=float)):\n"
                      f"    i = ad.tid()\n{loads}\n    out[i] = {expr}\n")
    text = ad.source(m.k, "backward")
    for k in range(n):
        # an operand whose partial the rule does not state has derivative zero: no update
        # (its first term is assigned, adj_x0 = ..., where it comes at the top level:
        # emit/firsts.py; a zero start is not an update)
        stated = rule.params[k] in rule.partials
        update = rf"^\s*adj_x{k} ([+-]= |= (?!-0\.0$))"
        assert bool(re.search(update, text, re.M)) == stated, \
            f"'adj_x{k} += ...' line for {key} {'missing' if stated else 'present'} in:\n{text}"
