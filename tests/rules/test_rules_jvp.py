"""Forward mode of every rule in ``adjoint.rules.RULES``, against finite differences
and against reverse mode.

The kernels are those of tests/rules/test_rules.py (one kernel per group of rules,
one output row per variant: see its docstring), launched through their JVP
(``ad.launch(..., tangents=...)``). For each input row ``r`` the tangent is
``e_r`` (ones in row ``r``, zeros elsewhere); each thread reads only its own
column, so ``dot_O[v.row, i]`` is ``dO[v.row, i] / dA[r, i]``, and

- it matches the central difference of the forward along ``e_r`` (float64);
- it equals the reverse-mode row: the adjoint of ``A[r]`` seeded with 1 on
  ``O[v.row]`` (each output is a scalar op of its operands, so the JVP along
  ``e_k`` and the VJP seeded with 1 are one partial derivative; both come from
  one rule, so they agree to the last bits);
- it is exactly zero for a row the variant does not read, and for the value
  of a non-differentiable rule (comparisons, ``floor``, ``int``, ``//``...);
- the float32 kernel's tangent matches the float64 one at the same
  (float32-rounded) inputs, to float32 accuracy. (The float32 kernels leave
  out the ``ad.*`` spellings and the non-differentiable rules' ``select`` and
  ``mixed`` variants, which repeat what other variants check, to keep numba's
  compile time down.)

The JVP also writes the outputs exactly as the forward does (on a real GPU, to
rounding: NVVM fuses multiply-adds in each kernel its own way, tests/gpu_tolerance.py). Every rule has a
forward instantiation (checked directly, by running the statements
``Rule.forward`` and ``Rule.reverse`` make in plain Python), and every math
name the frontend accepts has a rule.
"""
import builtins
import dataclasses
import math

import gast
import numpy as np
import pytest

import adjoint as ad
from adjoint import passes
from adjoint.frontend.parse import CALLABLES
from adjoint.rules import RULES, lookup
from adjoint.rules.registry import unparse
from adjoint.runtime import backend_python
from adjoint.runtime import builtins as adb
from tests.conftest import central_fd
from tests.gpu_tolerance import assert_same, tolerance
from tests.rules.test_rules import (ATOL, EPS, GROUPS, RTOL, VARIANTS, Group, N, group_kernel,
                        kernel_source, sample_inputs, spell, user_symbol)

RTOL32, ATOL32 = 2e-4, 2e-5   # float32 tangents against float64 ones (float32 eps ~ 6e-8)

def float32_group(g):
    """``g`` with the variants the float32 kernels check, renumbered, and
    [(float64 variant, float32 variant)]."""
    picked = [v for v in g.variants
              if not v.name.startswith("ad-") and not v.name.endswith(("-select", "-mixed"))]
    pairs = [(v, dataclasses.replace(v, row=k)) for k, v in enumerate(picked)]
    return Group(g.index, list(g.columns), [v32 for _, v32 in pairs]), pairs


F32 = [(g, float32_group(g)) for g in GROUPS]
F32_VARIANTS = [(g, g32, v, v32) for g, (g32, pairs) in F32 for v, v32 in pairs]
_kernels32 = {}


def group_kernel32(g32, kernel_module):
    """The float32 kernel of a group (its float32 variants, float32 arrays)."""
    if g32.index not in _kernels32:
        src = kernel_source(g32).replace("dtype=float,", "dtype=ad.float32,")
        assert src.count("dtype=ad.float32") == 2
        _kernels32[g32.index] = getattr(kernel_module(src), f"rules_{g32.index}")
    return _kernels32[g32.index]


_jvps = {}


def jvp_along_row(kernel, a0, rows, r, dtype):
    """(outputs, tangents of the outputs) of one JVP launch along ``e_r``; the variants of
    a group share it (launched once per backend, kernel, input and row)."""
    key = (ad.backend_name(), passes.current(), id(kernel), a0.tobytes(), r,
           np.dtype(dtype).name)       # (the optimizations: tests/levels.py reruns with none)
    if key not in _jvps:
        _jvps[key] = _launch_jvp(kernel, a0, rows, r, dtype)
    return _jvps[key]


def _launch_jvp(kernel, a0, rows, r, dtype):
    A = ad.array(a0.astype(dtype))
    O = ad.zeros((rows, N), dtype=dtype)
    e = np.zeros(a0.shape, dtype=dtype)
    e[r] = 1.0
    dA = ad.array(e)
    dots = ad.launch(kernel, N, inputs=[A], outputs=[O], tangents={A: dA})
    assert dots["A"] is dA, "the tangent given is the one returned"
    np.testing.assert_array_equal(dA.numpy(), e, err_msg="an input's tangent was written")
    return O.numpy().copy(), dots["O"].numpy().copy()


def forward(kernel, a, rows, dtype=np.float64):
    O = ad.zeros((rows, N), dtype=dtype)
    ad.launch(kernel, N, inputs=[ad.array(a.astype(dtype))], outputs=[O], record_tape=False)
    return O.numpy().copy()


def vjp_of_row(kernel, a0, rows, row):
    """The adjoint of ``A`` with the seed 1 on every element of ``O[row]`` (reverse mode)."""
    A = ad.array(a0)
    O = ad.zeros((rows, N))
    adj_A = ad.zeros(a0.shape)
    seed = np.zeros((rows, N))
    seed[row] = 1.0
    ad.launch(kernel, N, inputs=[A], outputs=[O], adjoint=True, adj_inputs=[adj_A],
              adj_outputs=[ad.array(seed)])
    return adj_A.numpy()


@pytest.mark.parametrize("g,v", VARIANTS, ids=[f"{v.rule}-{v.name}" for _, v in VARIANTS])
def test_rule_jvp_matches_finite_differences_and_reverse_mode(backend, kernel_module, g, v):
    k = group_kernel(g, kernel_module)
    a0 = sample_inputs(g)
    rows = len(g.variants)
    out = forward(k, a0, rows)
    grad = vjp_of_row(k, a0, rows, v.row)
    for r in range(len(g.columns)):
        values, dots = jvp_along_row(k, a0, rows, r, np.float64)
        assert_same(values, out, err_msg="the JVP's outputs are the forward's")
        dot = dots[v.row]
        where = f"{v.rule} {v.name}: {v.expr}, tangent e_{r}"
        if r not in v.rows or v.zero:
            assert np.all(dot == 0.0), f"{where}: nonzero tangent {dot}"
            continue
        assert np.all(np.isfinite(dot)), where

        def f(x, r=r):
            a = a0.copy()
            a[r] = x
            return forward(k, a, rows)[v.row]
        fd = (f(a0[r] + EPS) - f(a0[r] - EPS)) / (2 * EPS)
        np.testing.assert_allclose(dot, fd, rtol=RTOL, atol=ATOL, err_msg=where + " vs FD")
        np.testing.assert_allclose(dot, grad[r], rtol=1e-14, atol=tolerance(grad[r]),
                                   err_msg=where + " vs the reverse-mode row")


@pytest.mark.parametrize("g,g32,v,v32", F32_VARIANTS,
                         ids=[f"{v.rule}-{v.name}" for _, _, v, _ in F32_VARIANTS])
def test_rule_jvp_float32(backend, kernel_module, g, g32, v, v32):
    k64, k32 = group_kernel(g, kernel_module), group_kernel32(g32, kernel_module)
    a0 = sample_inputs(g).astype(np.float32).astype(np.float64)
    for r in v.rows:
        values32, dots32 = jvp_along_row(k32, a0, len(g32.variants), r, np.float32)
        values64, dots64 = jvp_along_row(k64, a0, len(g.variants), r, np.float64)
        assert dots32.dtype == np.float32
        where = f"{v.rule} {v.name}: {v.expr}, tangent e_{r} (float32)"
        np.testing.assert_allclose(values32[v32.row], values64[v.row], rtol=RTOL32,
                                   atol=ATOL32, err_msg=where)
        if v.zero:
            assert np.all(dots32[v32.row] == 0.0), where
        np.testing.assert_allclose(dots32[v32.row], dots64[v.row], rtol=RTOL32, atol=ATOL32,
                                   err_msg=where)


# --------------------------------------------------------------------- the table itself

def _name(id_):
    return gast.Name(id=id_, ctx=gast.Load(), annotation=None, type_comment=None)


def _id(atom):
    return atom if isinstance(atom, str) else atom.id


def _sample(rule, seed):
    rng = np.random.default_rng(seed)
    return [float(rng.uniform(lo, hi)) for lo, hi in rule.domain]


def _divisions(body):
    return sum(isinstance(n, gast.BinOp) and isinstance(n.op, gast.Div)
               for s in body for n in gast.walk(s))


def _shares_division(rule):
    """Whether the JVP with every tangent divides fewer times than its operands' terms
    would each (``registry._sum``: terms over one denominator divide once)."""
    args = [_name(p) for p in rule.params]
    every = _divisions(rule.forward("z", args, lambda a: "dot_" + a.id, "dot_z"))
    alone = sum(_divisions(rule.forward("z", args, lambda a, p=p: "dot_" + p if a.id == p
                                        else None, "dot_z")) for p in rule.params)
    return every < alone


SHARED_DIVISION = {k for k, r in RULES.items() if _shares_division(r)}


@pytest.mark.parametrize("key", sorted(RULES))
def test_every_rule_has_a_forward_instantiation(key):
    """``Rule.forward`` assigns ``dot_z`` (0.0 when no operand has a tangent, and always for
    a non-differentiable rule); run as plain Python, the tangent along ``e_k`` is the
    reverse instantiation's adjoint of operand ``k`` seeded with 1, and the central
    difference of the primal."""
    rule = RULES[key]
    ops = [f"x{k}" for k in range(len(rule.params))]
    args = [_name(o) for o in ops]
    rt = backend_python
    env0 = {"math": math, "ad": ad, "rt": rt}

    none = unparse(rule.forward("z", args, lambda a: None, "dot_z"))
    assert none == "dot_z = 0.0", f"{key}: with no tangents in:\n{none}"
    every = unparse(rule.forward("z", args, lambda a: "dot_" + a.id, "dot_z"))
    back = unparse(rule.reverse("z", args, lambda a: "adj_" + _id(a)))
    if not rule.differentiable:
        assert every == "dot_z = 0.0" and back == "", f"{key}:\n{every}\n{back}"
        return
    assert every.startswith("dot_z = "), every
    primal = spell(user_symbol(rule.symbol), ops)
    for seed in range(3):
        xs = _sample(rule, seed)
        env = dict(env0, **dict(zip(ops, xs)))
        z = eval(primal, env)
        for k in range(len(ops)):
            fwd = dict(env, z=z, **{f"dot_{o}": float(j == k) for j, o in enumerate(ops)})
            exec(every, fwd)
            rev = dict(env, z=z, adj_z=1.0, **{f"adj_{o}": 0.0 for o in ops})
            exec(back, rev)
            # bit for bit, but where the JVP's terms share their division: (0 - 1 * z) / y
            # is -(1 / y * z) rounded once less (one ulp apart, two at most)
            gap = 2 * np.spacing(abs(rev[f"adj_{ops[k]}"])) if key in SHARED_DIVISION else 0
            assert abs(fwd["dot_z"] - rev[f"adj_{ops[k]}"]) <= gap, \
                f"{key} at {xs}: JVP along e_{k} {fwd['dot_z']!r} != VJP {rev[f'adj_{ops[k]}']!r}"

            def f(x, k=k):
                return eval(primal, dict(env, **{ops[k]: float(x)}))
            fd = central_fd(f, xs[k], EPS)
            np.testing.assert_allclose(fwd["dot_z"], fd, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{key} at {xs}, operand {k}")


def test_every_math_name_the_frontend_accepts_has_a_rule():
    ops = {name for kind, name in CALLABLES.values() if kind == "op"}
    assert ops, "no op callables found"
    assert {name for name in ops if lookup(name) is None} == set()
    # every ad.* math spelling resolves to a callable the frontend knows
    for name in adb.__all__:
        if name in ("tid", "atomic_add", "atomic_sub", "atomic_min", "atomic_max", "atomic_and",
                    "atomic_or", "atomic_xor"):     # (statements, not math: no rule)
            continue
        assert id(getattr(adb, name)) in CALLABLES, f"ad.{name} is not accepted in kernels"
        kind, op = CALLABLES[id(getattr(adb, name))]
        if kind == "choose":        # ad.where/select: the ternary, rewritten (frontend/choose.py)
            continue
        assert lookup(op) is not None, f"ad.{name}"
    # and math.* / builtins the frontend maps: each an op with a rule
    for obj in (math.fabs, builtins.abs, builtins.min, builtins.max, builtins.pow,
                builtins.float, builtins.int):
        assert CALLABLES[id(obj)][0] == "op"


def test_every_rule_is_checked_in_forward_mode():
    assert {v.rule for _, v in VARIANTS} == set(RULES)
    assert {v.rule for _, _, v, _ in F32_VARIANTS} == set(RULES)
    assert {g.index for g in GROUPS} == set(range(len(GROUPS)))


@pytest.mark.parametrize("key", ["Div", "div_or_zero", "atan2", "length2", "length3",
                                 "length4"])
def test_terms_over_one_denominator_divide_once(key):
    """A rule whose partials all divide by one value (``g / y``, ``g / y * z``) has a JVP
    that divides once, ``(dot_x - dot_y * z) / y``, not once per operand: a division costs
    several multiplications. (Its value is checked by the tests above.)"""
    rule = RULES[key]
    args = [gast.Name(id=p, ctx=gast.Load(), annotation=None, type_comment=None)
            for p in rule.params]
    body = rule.forward("z", args, lambda a: "dot_" + a.id, "dot_z")
    assert _divisions(body) == 1, unparse(body)
    assert key in SHARED_DIVISION
