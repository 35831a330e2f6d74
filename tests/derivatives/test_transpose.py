"""adjoint/derivatives/transposes.py: the linearized program next to its transpose (``ad.transpose_view``,
``adjoint transpose``).

The numbers are checked three ways: each transposed line's coefficient is the partial of
its primal statement by central differences in float64; the transposed program, run bottom
up, takes the same values, adjoint by adjoint, as the real backward does (its evaluation
trace); the adjoints it ends with are ``ad.grad``'s (a kernel: the tape's). Each term of a
JVP line has the same coefficient as its transposed line.
"""
import math
import os
import re
import sys

import numpy as np
import pytest

import adjoint as ad
from adjoint import cli
from adjoint.runtime import backend, backend_scope


@ad.func
def baydin(x1: float, x2: float) -> float:
    y = math.log(x1) + x1 * x2 - math.sin(x2)
    return y


@ad.func
def branchy(x: float, y: float) -> float:
    if x > y:
        z = x * x / y
    else:
        z = math.exp(y) / x
    return z - math.sqrt(y) + x ** y + abs(y - x)


@ad.func
def compound(x: float, n: int) -> float:
    s = 1.0
    for k in range(n):
        s = s * (1.0 + x) + math.cos(s)
    return s


@ad.func
def inlined(x: float, y: float) -> float:
    return baydin(x, y) * min(x, y)


@ad.func
def halving(x: float, n: int) -> float:
    k = 0
    while k < n:
        x = x * 0.5 + math.tanh(x)
        k += 1
    return x


@ad.func
def two_values(x: float, y: float):
    return x * y, math.exp(x) / y


@ad.func
def squared_norm(v: ad.vec3) -> float:
    return ad.dot(v, v * 2.0)


@ad.kernel
def saxpy_sin(x: ad.array(dtype=float), a: float, y: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y[i] = a * math.sin(v) + v * v


@ad.kernel
def accumulate(x: ad.array(dtype=float), total: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(total, 0, x[i] * x[i])


CASES = [(baydin, (2.0, 5.0)), (branchy, (0.7, 1.3)), (branchy, (1.6, 0.9)),
         (compound, (0.3, 4)), (inlined, (1.5, 2.5)), (halving, (0.5, 5)),
         (squared_norm, (1.0, -2.0, 3.0))]


def _updates(pairs):
    """{adjoint: [values after each += line]} from (variable, value) pairs."""
    out = {}
    for var, value in pairs:
        out.setdefault(var, []).append(value)
    return out


def _real_backward(f, args, **kw):
    t = ad.evaluation_trace(f, *args, **kw)
    return _updates((r.variable, r.value) for r in t.all_rows if r.phase == "adjoint"
                    and (" += " in r.statement or " -= " in r.statement))


def _transposed(view):
    return _updates((u.target, u.value) for u in view.adjoints if " += " in u.statement)


@pytest.mark.parametrize("f,args", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_transposed_lines_are_the_real_backwards_values(f, args):
    view = ad.transpose_view(f, *args)
    mine, real = _transposed(view), _real_backward(f, args)
    assert mine.keys() == real.keys()
    for var in real:
        np.testing.assert_allclose(mine[var], real[var], rtol=1e-12, atol=1e-15, err_msg=var)


@pytest.mark.parametrize("f,args", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_final_adjoints_are_the_gradient_and_central_differences(f, args):
    view = ad.transpose_view(f, *args)
    floats = [k for k, a in enumerate(args) if isinstance(a, float)]
    names = [p.name for p in f.transformed.pf.params]      # (a vec3's components: v_x, ...)
    if f is squared_norm:       # takes one vec3: its gradient is 4 v
        grad, call = tuple(4.0 * a for a in args), lambda *a: f.pyfunc(ad.vec3(*a))
    else:
        grad, call = ad.grad(f, argnums=tuple(floats))(*args), f.pyfunc
    grad = grad if isinstance(grad, tuple) else (grad,)
    h = 1e-6
    for k, g in zip(floats, grad):
        got = view.value(f"adj_{names[k]}")
        assert got == pytest.approx(g, rel=1e-12, abs=1e-14)
        up, down = list(args), list(args)
        up[k] += h
        down[k] -= h
        fd = (call(*up) - call(*down)) / (2 * h)
        assert got == pytest.approx(fd, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("f,args", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_each_coefficient_is_its_statements_partial(f, args):
    """Each transposed line ``adj_x += c * adj_z`` of an operation: ``c`` is dz/dx by central
    differences of the primal statement in float64, and the JVP line's term of ``x`` has
    the same coefficient."""
    view = ad.transpose_view(f, *args)
    with backend_scope("python"):
        rt = backend()
    checked = 0
    for e in view.entries:
        if e.step.kind != "op":
            continue
        env = _env_before(view, e)
        forward = {}
        for c, d in e.jvp_terms:
            forward[d[4:]] = forward.get(d[4:], 0.0) + c
        backward = {}
        for t in e.terms:
            backward[t.target[4:]] = backward.get(t.target[4:], 0.0) + t.coefficient
        # (a term of a branch not taken, as min's: 0 in the JVP line, no transposed line)
        assert {v: c for v, c in forward.items() if c or v in backward} == \
            pytest.approx(backward, rel=1e-15), e.step.statement
        for var, c in backward.items():
            h = 1e-6 * max(1.0, abs(env[var]))

            def z(x):
                local = dict(env, rt=rt, **{var: x})
                exec(e.step.statement, {}, local)
                return local[e.step.target]
            fd = (z(env[var] + h) - z(env[var] - h)) / (2 * h)
            assert c == pytest.approx(fd, rel=1e-6, abs=1e-8), (e.step.statement, var)
            checked += 1
    assert checked >= 3


def _env_before(view, entry):
    """The primal values when ``entry`` ran: each entry's value, those of the arguments."""
    env = dict(view.arguments)
    for e in view.entries:
        if e is entry:
            return env
        if e.step.kind in ("op", "call", "copy", "load"):
            env[e.step.target] = e.value
    raise AssertionError("entry not found")


def test_kernel_thread_against_its_backward_and_the_tape():
    x = ad.array(np.array([0.5, 1.0, 2.0]), requires_grad=True)
    y = ad.zeros(3, requires_grad=True)
    kw = dict(inputs=[x, 2.0], outputs=[y], thread=1)
    view = ad.transpose_view(saxpy_sin, 3, **kw)
    real = _real_backward(saxpy_sin, (3,), **kw)
    mine = _transposed(view)
    assert mine.keys() == real.keys()
    for var in real:
        np.testing.assert_allclose(mine[var], real[var], rtol=1e-12, err_msg=var)
    tape = ad.Tape()
    with tape:
        ad.launch(saxpy_sin, 3, inputs=[x, 2.0], outputs=[y])
    tape.backward(grads={y: np.ones(3)})
    assert view.value("adj_x[1]") == pytest.approx(x.grad.numpy()[1], rel=1e-12)
    assert view.value("adj_x[1]") == pytest.approx(2.0 * math.cos(1.0) + 2.0, rel=1e-12)
    text = str(view)
    assert "adj_x[1] += 1 * adj_v" in text and "adj_t0 += 1 * adj_y[1]; adj_y[1] = 0" in text


def test_kernel_atomic_add_and_seed():
    x = ad.array(np.array([0.5, -1.5]))
    total = ad.zeros(1)
    seed = {total: ad.array(np.array([3.0]))}
    view = ad.transpose_view(accumulate, 2, inputs=[x], outputs=[total], thread=1, seed=seed)
    assert view.seeds == {"adj_total[0]": 3.0}
    assert view.value("adj_x[1]") == pytest.approx(3.0 * 2 * -1.5, rel=1e-12)
    assert "adj_total[0] = 0" not in str(view)      # an accumulation keeps its adjoint


def test_several_returned_values_each_with_a_seed():
    view = ad.transpose_view(two_values, 0.5, 2.0, seed=(1.0, 3.0))
    assert view.seeds == {"adj_ret0": 1.0, "adj_ret1": 3.0}
    real = ad.evaluation_trace(two_values, 0.5, 2.0, seed=(1.0, 3.0))
    assert (view.value("adj_x"), view.value("adj_y")) == \
        pytest.approx(real.value("adjoint", "return"), rel=1e-14)
    assert view.value("adj_x") == pytest.approx(2.0 + 3.0 * math.exp(0.5) / 2.0, rel=1e-14)


def test_loop_iterations_elided():
    view = ad.transpose_view(compound, 0.3, 9, max_iterations=2)
    text = view.text()
    assert "iterations 3 to 8 elided" in text
    assert "lines of iterations 3 to 8 elided" in text      # the run bottom up too
    assert len(view.entries) > 9 * 3


def test_markdown_table_has_both_columns():
    md = ad.transpose_view(baydin, 2.0, 5.0).markdown()
    assert "| JVP at the primal point | transpose at the primal point |" in md
    assert "`dot_t2 = 5 * dot_x1 + 2 * dot_x2`" in md
    assert "`adj_x1 += 5 * adj_t2`<br>`adj_x2 += 2 * adj_t2`" in md


def test_cli(capsys):
    path = __file__
    assert cli.main(["transpose", f"{path}:baydin", "--args", "2", "5"]) == 0
    out = capsys.readouterr().out
    assert "adj_x1 += 0.5 * adj_t1" in out and "adj_x1 = 5.5" in out
    assert cli.main(["transpose", f"{path}:saxpy_sin", "--args", "1"]) == 2
    assert "is a kernel: give --dim N" in capsys.readouterr().err
    assert cli.main(["transpose", f"{path}:baydin", "--args", "2", "5", "--thread", "1"]) == 2
    assert "--thread is for kernels" in capsys.readouterr().err


def saxpy_sin_numpy(x, a):
    """``saxpy_sin``'s output, computed independently with numpy."""
    return a * np.sin(x) + x * x


def test_cli_kernel_thread_against_numpy_and_central_differences(capsys):
    """`adjoint transpose FILE:KERNEL --dim --inputs --outputs --thread --seed`: the
    primal values shown are the kernel's (a numpy model), the coefficients its partials,
    and the adjoint the transpose ends with is --seed times central differences in
    float64 of the thread's output (6 significant digits printed)."""
    x = np.array([0.5, 1.0, 2.0])
    argv = ["transpose", f"{__file__}:saxpy_sin", "--dim", "3", "--inputs", "[0.5, 1.0, 2.0]",
            "2.0", "--outputs", "3", "--thread", "2", "--seed", "3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("# transpose of saxpy_sin, thread 2 of a launch over 3\n")
    assert "seeded with adj_y[2] = 3\n" in out
    shown = [float(v) for v in re.findall(r"y\[i\] = t0  \[(\S+)\]", out)]
    assert shown == [pytest.approx(saxpy_sin_numpy(x, 2.0)[2], rel=1e-5)]
    assert f"dot_t2 = {math.cos(2.0):.6g} * dot_v" in out
    final = [float(v) for v in re.findall(r"adj_x\[2\] = (\S+)", out)][-1]
    eps = 1e-6
    hi, lo = x.copy(), x.copy()
    hi[2] += eps
    lo[2] -= eps
    fd = (saxpy_sin_numpy(hi, 2.0) - saxpy_sin_numpy(lo, 2.0)).sum() / (2 * eps)
    assert final == pytest.approx(3 * fd, rel=1e-5)
    # an atomic accumulation into a zeros output given by its size
    assert cli.main(["transpose", f"{__file__}:accumulate", "--dim", "2", "--inputs",
                     "np.array([0.5, -1.5])", "--outputs", "1", "--thread", "1"]) == 0
    out = capsys.readouterr().out
    assert [float(v) for v in re.findall(r"adj_x\[1\] = (\S+)", out)][-1] == \
        pytest.approx(2 * -1.5, rel=1e-6)


def test_refusals():
    with pytest.raises(TypeError, match="@ad.func or @ad.kernel"):
        ad.transpose_view(math.sin, 1.0)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        ad.transpose_view(baydin, 1.0)


def test_docs_page_renders_live_transposes_with_the_values_it_states():
    """docs/transpose.md's markers expand (as `mkdocs build` expands them) to the live
    views, which hold the numbers its prose states; the page is in the nav."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "docs"))
    try:
        import gen_stages
        import trace_example
    finally:
        sys.path.remove(os.path.join(root, "docs"))
    with open(os.path.join(root, "docs", "transpose.md"), encoding="utf-8") as fh:
        page = fh.read()
    assert page.count("<!-- adjoint transpose ") == 3
    out = gen_stages.expand(page)
    assert "<!--" not in out
    view = ad.transpose_view(trace_example.baydin, 2, 5)
    assert view.markdown().rstrip() in out and view.text().rstrip() in out
    assert view.value("adj_x1") == pytest.approx(5.5) and "`adj_x1 = 5.5`" in page
    assert f"{view.value('adj_x2'):.6g}" == "1.71634" and "adj_x2 ≈ 1.71634" in page
    for stated in ("`5 * dot_x1 + 2 * dot_x2`", "`adj_x1 += 5 * adj_t2`",
                   "`adj_x2 += 2 * adj_t2`", "`1 * dot_t0 - 1 * dot_t3`",
                   "`adj_t3 += -1 * adj_y`", "`adj_y[1] = 0`", "`adj_x[1] = 3.0806`"):
        assert stated.strip("`") in out, stated
    assert f"{2 * math.cos(1.0) + 2:.5g}" == "3.0806"
    with open(os.path.join(root, "mkdocs.yml"), encoding="utf-8") as fh:
        nav = fh.read()
    assert "transpose.md\n" in nav and "teaching.md\n" in nav
