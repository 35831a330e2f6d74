"""The rule table (adjoint/rules) and the runtime builtins (adjoint/runtime/ieee.py) match.

Adding a math function is two entries: its rule (``@math_rule`` in
adjoint/rules/mathfns.py, stating its partials once) and its runtime builtin
(one ``math_function``/``@builtin`` line in adjoint/runtime/ieee.py). Nothing
else names it: the frontend's table of callables, the ``ad.*`` exports, the
backends (python, numba, the CUDA simulator and CUDA device functions) and the
table-driven tests all iterate those two registries. The checks here:

- both sides match exactly: every rule's runtime name is a builtin of every
  backend, every builtin has a rule, and every spelling of a call (symbol,
  alias, ``ad.*`` export) reaches the rule it names;
- for every differentiable rule, the forward mode (``Rule.forward``) and the
  reverse mode (``Rule.reverse``) it instantiates are transposes of each other,
  and the forward mode matches central differences of the primal: the generated
  statements run as plain Python at random points of the rule's domain;
- ``math.expm1`` is the proof: it was added as exactly those two entries and
  works end to end, reverse and forward, on every backend (the last test).
"""
import ast
import builtins
import dataclasses
import math

import gast
import numpy as np
import pytest

import adjoint as ad
from adjoint.frontend import parse
from adjoint.frontend.parse import CALLABLES, resolve
from adjoint.rules import RULES
from adjoint.runtime import backend_cuda, backend_numba, backend_python
from adjoint.runtime import builtins as adb
from adjoint.runtime.all_builtins import BUILTINS
from tests.conftest import central_fd

BACKENDS = {"python": backend_python, "numba": backend_numba, "cuda": backend_cuda}
CALLS = sorted(k for k, r in RULES.items() if r.is_call)
DIFFERENTIABLE = sorted(k for k, r in RULES.items() if r.differentiable)


# -- the two registries match ------------------------------------------------------

def test_every_rule_runtime_name_is_a_builtin_and_every_builtin_has_a_rule():
    runtime = {r.runtime: k for k, r in RULES.items() if r.runtime}
    assert sorted(set(runtime) - set(BUILTINS)) == [], "rules calling rt.<name> with no builtin"
    assert sorted(set(BUILTINS) - set(runtime)) == [], "runtime builtins no rule calls"


@pytest.mark.parametrize("backend_name", sorted(BACKENDS))
def test_every_backend_provides_every_builtin(backend_name):
    be = BACKENDS[backend_name]
    for name, b in sorted(BUILTINS.items()):
        fn = getattr(be, name)
        assert callable(fn), (backend_name, name)
        if backend_name == "python":
            assert fn is b.python
        elif backend_name == "cuda" and backend_cuda.simulated():
            assert fn is b.python         # the simulator runs device code as Python


@pytest.mark.parametrize("key", CALLS)
def test_every_spelling_of_a_call_reaches_its_rule(key):
    rule = RULES[key]
    assert rule.spellings[0] == rule.symbol
    for spelling in rule.spellings:
        obj = resolve(spelling)
        assert CALLABLES.get(id(obj)) == ("op", key), f"{spelling} does not reach rule {key}"
    if rule.symbol.startswith("math."):
        # ad.sin is math.sin: the ad.* spelling of every math rule exists, so the
        # table-driven rule tests (tests/rules/test_rules.py) never drop its variant
        name = rule.symbol[len("math."):]
        assert getattr(ad, name) is resolve(rule.symbol), f"ad.{name} is not {rule.symbol}"


def test_every_ad_export_of_a_builtin_reaches_the_rule_calling_it():
    by_runtime = {r.runtime: k for k, r in RULES.items() if r.runtime}
    exported = {n: b.user for n, b in BUILTINS.items() if b.user is not None}
    assert exported == adb.MATH
    for name, fn in sorted(exported.items()):
        assert getattr(ad, name) is fn
        # (left out of ``from adjoint import *`` where it would shadow a different Python
        # builtin: ad.round, ad.pow)
        assert (name in ad.__all__) == (getattr(builtins, name, fn) is fn)
        assert CALLABLES[id(fn)] == ("op", by_runtime[name]), f"ad.{name}"


def test_aliases_are_their_rule_and_a_clash_is_refused(monkeypatch):
    assert CALLABLES[id(math.fabs)] == ("op", "abs")
    assert CALLABLES[id(builtins.pow)] == ("op", "pow")
    assert CALLABLES[id(ad.clamp)] == ("op", "clamp")
    ops = [v for v in CALLABLES.values() if v[0] == "op"]
    spellings = {id(resolve(s)) for r in RULES.values() for s in r.spellings}
    assert len(ops) == len(spellings)          # nothing callable that no rule spells
    # two rules claiming one callable is an error when the table is built
    clash = dataclasses.replace(RULES["cos"], key="cos2", aliases=("math.sin",))
    monkeypatch.setattr(parse, "RULES", {**RULES, "cos2": clash})
    with pytest.raises(ValueError, match="is the rule of both"):
        parse._callables()


# -- forward and reverse mode are transposes of each other --------------------------

OPERATORS = {"Add": "{0} + {1}", "Sub": "{0} - {1}", "Mult": "{0} * {1}", "Div": "{0} / {1}",
             "Mod": "{0} % {1}", "Pow": "{0} ** {1}", "USub": "-{0}"}


def primal(rule):
    """``f(*operands)``: the rule's operation in plain Python (its IEEE meaning)."""
    if rule.is_call:
        fn = BUILTINS[rule.runtime].python if rule.runtime else resolve(rule.symbol)
        return fn
    template = OPERATORS[rule.key]
    names = [f"a{k}" for k in range(len(rule.params))]
    return eval(f"lambda {', '.join(names)}: {template.format(*names)}")


def _atom(name):
    return gast.Name(id=name, ctx=gast.Load(), annotation=None, type_comment=None)


def _prefixed(prefix, inactive=()):
    """The derivative name of an operand (``adj_a0``), None for one in ``inactive``."""
    def of(atom):
        n = atom if isinstance(atom, str) else atom.id
        return None if n in inactive else prefix + n
    return of


def run(stmts, env):
    """Execute gast statements (``rt.cos(a0)``: rt is the Python backend) in ``env``."""
    module = ast.fix_missing_locations(gast.gast_to_ast(gast.Module(body=list(stmts),
                                                                    type_ignores=[])))
    exec(compile(module, "<rule>", "exec"), {"rt": backend_python, "math": math}, env)
    return env


def operand_sets(rule):
    """(operand names per parameter, inactive names): all distinct, one shared name for
    every operand (``x * x``), and each operand in turn without a derivative."""
    n = len(rule.params)
    distinct = [f"a{k}" for k in range(n)]
    out = [(distinct, ())]
    if n > 1:
        out.append((["a0"] * n, ()))
        out += [(distinct, (f"a{k}",)) for k in range(n)]
    return out


def sample(rule, rng):
    return [float(rng.uniform(lo, hi)) for lo, hi in rule.domain]


def transpose_pair(reverse_rule, forward_rule, names, inactive, values, dots):
    """(dot_z from ``forward_rule``'s JVP, sum of adj_x * dot_x from ``reverse_rule``'s
    VJP seeded with adj_z = 1) for operands ``names`` at ``values``, tangents ``dots``."""
    args = [_atom(n) for n in names]
    active = sorted(set(names) - set(inactive))
    z = primal(forward_rule)(*[values[n] for n in names])
    reverse = reverse_rule.reverse("z", args, _prefixed("adj_", inactive))
    forward = forward_rule.forward("z", args, _prefixed("dot_", inactive), "dot_z")
    adj = run(reverse, {**values, "z": z, "adj_z": 1.0, **{f"adj_{n}": 0.0 for n in active}})
    fwd = run(forward, {**values, "z": z, **{f"dot_{n}": dots[n] for n in active}})
    return fwd["dot_z"], sum(adj[f"adj_{n}"] * dots[n] for n in active)


@pytest.mark.parametrize("key", DIFFERENTIABLE)
def test_forward_is_the_transpose_of_reverse_and_matches_differences(key):
    rule = RULES[key]
    f = primal(rule)
    rng = np.random.default_rng(sum(map(ord, key)))
    for names, inactive in operand_sets(rule):
        for _ in range(5):
            if len(set(names)) == 1:      # one variable for every operand: a common point
                lo = max(d[0] for d in rule.domain)
                hi = min(d[1] for d in rule.domain)
                lo, hi = (lo, hi) if lo < hi else rule.domain[0]      # (clamp's are disjoint)
                values = {"a0": float(rng.uniform(lo, hi))}
            else:
                values = dict(zip(names, sample(rule, rng)))
            dots = {n: float(rng.normal()) for n in set(names) - set(inactive)}
            dot_z, transposed = transpose_pair(rule, rule, names, inactive, values, dots)
            assert dot_z == pytest.approx(transposed, rel=1e-12, abs=1e-14), \
                f"{key}{tuple(names)} inactive {inactive} at {values}"

            def along(t):
                point = {n: values[n] + t * dots.get(n, 0.0) for n in values}
                return f(*[point[n] for n in names])
            fd = float(central_fd(lambda t: along(float(t[0])), np.zeros(1))[0])
            assert dot_z == pytest.approx(fd, rel=1e-6, abs=1e-7), \
                f"{key}{tuple(names)} at {values}: forward {dot_z}, differences {fd}"


@pytest.mark.parametrize("reverse_key, forward_key", [("sin", "cos"), ("Add", "Sub"),
                                                      ("min", "max"), ("Div", "Mult")])
def test_the_transposition_check_can_fail(reverse_key, forward_key):
    """The comparison above tells apart two rules whose partials differ."""
    n = len(RULES[forward_key].params)
    names = [f"a{k}" for k in range(n)]
    values = dict(zip(names, [0.7, 1.3][:n]))
    dots = dict(zip(names, [1.0, -0.5][:n]))
    dot_z, transposed = transpose_pair(RULES[reverse_key], RULES[forward_key], names, (),
                                       values, dots)
    assert dot_z != pytest.approx(transposed, rel=1e-6)


# -- the proof: math.expm1 is its rule plus its runtime builtin, nothing else --------

EXPM1 = '''
    @ad.kernel
    def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = math.expm1(x[i] * x[i]) * ad.expm1(x[i])
'''



@pytest.mark.parametrize("key", sorted(k for k, r in RULES.items() if r.safe_reciprocal))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_rule_with_a_safe_reciprocal_never_returns_a_subnormal(key, dtype):
    """``Rule.safe_reciprocal`` (pass reciprocal multiplies by ``1 / z``): over the whole
    positive range of the dtype -- the smallest subnormal, the smallest normal, 1, the
    largest finite number, and random points between -- the rule's runtime function
    returns a value whose reciprocal is a normal number."""
    info = np.finfo(dtype)
    rng = np.random.default_rng(0)
    xs = np.concatenate([[info.smallest_subnormal, info.tiny, 1.0, info.max],
                         np.exp2(rng.uniform(np.log2(info.smallest_subnormal),
                                             np.log2(info.max), 200))]).astype(dtype)
    fn = getattr(backend_python, RULES[key].runtime)
    for x in xs:
        z = dtype(fn(x))
        inv = dtype(1) / z
        assert np.isfinite(inv) and abs(inv) >= info.tiny, (key, x, z, inv)


def test_expm1_reverse_and_forward_match_differences_on_every_backend(backend, kernel_module):
    """``math.expm1`` and ``ad.expm1`` in a kernel: the gradient (tape) and the JVP
    (``tangents=``) against central differences, on python, numba and CUDA."""
    m = kernel_module(EXPM1)
    dev = "cuda" if backend == "cuda" else "cpu"
    x0 = np.array([-1.1, -0.3, 0.2, 0.9])
    w = np.array([0.7, -1.3, 0.4, 1.1])

    def f(x):
        y = ad.zeros(4, device=dev)
        ad.launch(m.k, 4, inputs=[ad.array(x, device=dev)], outputs=[y])
        return y.numpy()

    want_y = np.expm1(x0 * x0) * np.expm1(x0)
    np.testing.assert_allclose(f(x0), want_y, rtol=1e-14)

    x = ad.array(x0, requires_grad=True, device=dev)
    y = ad.zeros(4, requires_grad=True, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(m.k, 4, inputs=[x], outputs=[y])
    tape.backward(grads={y: w})
    fd = central_fd(lambda v: float(np.dot(w, f(v))), x0)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-8)

    out = ad.launch(m.k, 4, inputs=[ad.array(x0, device=dev)], outputs=[ad.zeros(4, device=dev)],
                    tangents={"x": ad.array(w, device=dev)})
    jvp_fd = (f(x0 + 1e-6 * w) - f(x0 - 1e-6 * w)) / 2e-6
    np.testing.assert_allclose(out["y"].numpy(), jvp_fd, rtol=1e-6, atol=1e-8)
    # by hand: d/dx [expm1(x^2) expm1(x)] = 2x e^(x^2) expm1(x) + expm1(x^2) e^x
    exact = (2 * x0 * np.exp(x0 * x0) * np.expm1(x0) + np.expm1(x0 * x0) * np.exp(x0)) * w
    np.testing.assert_allclose(out["y"].numpy(), exact, rtol=1e-13)
