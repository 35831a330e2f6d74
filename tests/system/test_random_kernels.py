"""Property test: random kernels built from the rule table, AD against finite differences.

Hypothesis draws small programs over two inputs ``x = a[i]`` and ``y = b[i]``:
a few statements, each assigning a random expression tree of differentiable
rules, a ternary, an augmented assignment, or an ``if``/``else`` on a random
comparison that assigns a variable in both branches. The program is written
to a real file as an ``@ad.kernel``, launched on a tape and differentiated;
the gradients of ``a`` and ``b`` must match central finite differences.

Values stay finite: a rule's operand is squashed into the rule's test domain
with ``lo + (hi - lo) * (0.5 + 0.45 * tanh(e))`` unless the rule is defined and
tame on all reals (``+``, ``sin``, ``min``...), or the operand is an input
(in [-1, 1]) and the domain holds [-1, 1].
Inputs are random floats, so an ``abs``/``min``/``if`` kink lies within the
finite-difference step with probability ~1e-6; runs are derandomized.
"""
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adjoint as ad
from adjoint import passes
from adjoint.build.pipeline import inexact
from adjoint.rules import RULES
from tests.conftest import central_fd

N = 4
RTOL, ATOL = 1e-5, 1e-6
# rules whose operands may be any values of moderate size (not clamp: it needs lo < hi)
TAME = {"Add", "Sub", "Mult", "USub", "abs", "min", "max", "sin", "cos", "atan", "tanh",
        "float"}
DIFFERENTIABLE = sorted(k for k, r in RULES.items() if r.differentiable)
COMPARISONS = ["<", "<=", ">", ">="]
assert all(any(r.symbol == c for r in RULES.values()) for c in COMPARISONS)


def spell(rule, args):
    symbol = "ad." + rule.symbol[3:] if rule.symbol.startswith("rt.") else rule.symbol
    if not symbol[0].isalpha():
        return f"({symbol}{args[0]})" if len(args) == 1 else f"({args[0]} {symbol} {args[1]})"
    return f"{symbol}({', '.join(args)})"


def squash(e, lo, hi):
    return f"({lo!r} + {hi - lo!r} * (0.5 + 0.45 * math.tanh({e})))"


@st.composite
def expressions(draw, names, depth):
    """Source of a random expression over ``names`` (x, y and earlier temporaries)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(names))
    rule = RULES[draw(st.sampled_from(DIFFERENTIABLE))]
    args = []
    for lo, hi in rule.domain:
        if draw(st.integers(0, 5)) == 0:
            args.append(repr(round(draw(st.floats(lo, hi)), 3)))   # a constant operand
            continue
        e = draw(expressions(names, depth - 1))
        input_in_domain = e in ("x", "y") and lo <= -1 and hi >= 1   # x, y lie in [-1, 1]
        if not (rule.key in TAME or input_in_domain):
            e = squash(e, float(lo), float(hi))
        args.append(e)
    return spell(rule, args)


@dataclass
class Program:
    lines: list

    def source(self):
        body = "\n".join("    " + ln for ln in self.lines)
        return ("@ad.kernel\n"
                "def k(a: ad.array(dtype=float), b: ad.array(dtype=float), "
                "out: ad.array(dtype=float)):\n"
                "    i = ad.tid()\n    x = a[i]\n    y = b[i]\n" + body + "\n")


@st.composite
def programs(draw):
    names, lines = ["x", "y"], []
    for k in range(draw(st.integers(1, 3))):
        t = f"t{k}"
        form = draw(st.sampled_from(["assign", "if", "ternary", "augassign"]))
        expr = lambda: draw(expressions(names, 2))  # noqa: E731
        if form == "assign" or (form == "augassign" and len(names) == 2):
            lines.append(f"{t} = {expr()}")
        elif form == "augassign":
            lines.append(f"{t} = {draw(st.sampled_from(names[2:]))}")
            lines.append(f"{t} {draw(st.sampled_from(['+=', '-=', '*=']))} {expr()}")
        elif form == "ternary":
            cmp = draw(st.sampled_from(COMPARISONS))
            lines.append(f"{t} = {expr()} if {expr()} {cmp} {expr()} else {expr()}")
        else:
            cmp = draw(st.sampled_from(COMPARISONS))
            lines += [f"if {expr()} {cmp} {expr()}:", f"    {t} = {expr()}", "else:",
                      f"    {t} = {expr()}"]
        names.append(t)
    lines.append(f"out[i] = {names[-1]}")
    return Program(lines)


# Hypothesis draws floats among the constants of the modules loaded so far, which include
# the kernel modules a run writes: a rerun of the whole test (tests/levels.py) would draw
# other programs. Each drawn program is compared with its unoptimized self here instead.
@pytest.mark.levels_skip("draws depend on the modules loaded: each example compares levels")
def test_random_kernels_match_finite_differences(backend, kernel_module):
    """... and every drawn kernel's forward values and gradients, optimized, are those of
    the same kernel with no optimization pass (bit for bit unless a pass that rounds
    otherwise applied: ``pipeline.inexact``)."""
    # numba compiles every drawn kernel (seconds each), so it sees fewer examples
    n_examples = 3 if backend == "numba" else 25

    @settings(max_examples=n_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(prog=programs(), seed=st.integers(0, 2 ** 16))
    def check(prog, seed):
        src = prog.source()
        k = kernel_module(src).k
        rng = np.random.default_rng(seed)
        a0, b0, w = rng.uniform(-1, 1, N), rng.uniform(-1, 1, N), rng.uniform(0.5, 1.5, N)

        def gradients():
            a, b = ad.array(a0, requires_grad=True), ad.array(b0, requires_grad=True)
            out = ad.zeros(N, requires_grad=True)
            tape = ad.Tape()
            with tape:
                ad.launch(k, N, inputs=[a, b], outputs=[out])
            tape.backward(grads={out: w})
            return out.numpy(), a.grad.numpy(), b.grad.numpy()

        out, ga, gb = gradients()
        assert np.all(np.isfinite(out)), src

        def f(aa, bb):
            o = ad.zeros(N)
            ad.launch(k, N, inputs=[ad.array(aa), ad.array(bb)], outputs=[o], record_tape=False)
            return float(np.dot(w, o.numpy()))

        np.testing.assert_allclose(ga, central_fd(lambda v: f(v, b0), a0),
                                   rtol=RTOL, atol=ATOL, err_msg=src)
        np.testing.assert_allclose(gb, central_fd(lambda v: f(a0, v), b0),
                                   rtol=RTOL, atol=ATOL, err_msg=src)
        with passes.optimizing(False):
            plain = gradients()
        rounds = inexact(k.transformed)
        for name, got, want in zip(("out", "a.grad", "b.grad"), (out, ga, gb), plain):
            if rounds:
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12,
                                           err_msg=f"{name}, {rounds}: {src}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{name} unoptimized: {src}")

    check()
