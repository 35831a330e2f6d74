"""adjoint/derivatives/traces.py: evaluation traces with numbers (``ad.evaluation_trace``, ``adjoint trace``).

The values in the table are the program's: the primal result is the func's value in
plain Python, the final adjoint of each input is ``ad.grad``'s and agrees with central
differences in float64, the tangent of the result is ``ad.jvp``'s; loops show their
iterations (elided past a limit); each row names the user's line it comes from.
"""
import inspect
import os
import sys
import math
import re
import textwrap

import numpy as np
import pytest

import adjoint as ad
from adjoint import cli
from adjoint.traces import Elided, Row


@ad.func
def product_sin(x: float, y: float) -> float:
    a = x * y
    b = math.sin(a)
    return b + x


@ad.func
def branchy(x: float, y: float) -> float:
    if x > y:
        z = x * x
    else:
        z = math.exp(y) / x
    return z - math.sqrt(y)


@ad.func
def powers(x: float, n: int) -> float:
    s = 0.0
    for i in range(n):
        s = s + x * s + x
    return s


@ad.func
def nested(x: float, y: float) -> float:
    t = 0.0
    for i in range(3):
        for j in range(2):
            t = t + x * y
        t = t * x
    return t


@ad.func
def calls(x: float, y: float) -> float:
    return product_sin(x, y) * y


CASES = [(product_sin, (0.5, 1.2)), (branchy, (1.3, 0.4)), (branchy, (0.7, 0.9)),
         (powers, (0.5, 6)), (nested, (0.8, -1.1)), (calls, (0.3, 2.0))]


def central(f, args, k, eps=1e-6):
    hi, lo = list(args), list(args)
    hi[k] += eps
    lo[k] -= eps
    return (f.pyfunc(*hi) - f.pyfunc(*lo)) / (2 * eps)


def floats(f):
    return [k for k, p in enumerate(f.transformed.pf.params) if p.kind == "float"]


@pytest.mark.parametrize("f,args", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_primal_result_is_the_python_value(f, args):
    t = ad.evaluation_trace(f, *args)
    assert t.value("primal", "return") == pytest.approx(f.pyfunc(*args), rel=1e-14)
    assert all(r.phase in ("primal", "tangent", "adjoint", "replay") for r in t.all_rows)


@pytest.mark.parametrize("f,args", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_final_adjoints_are_the_gradient_and_central_differences(f, args):
    t = ad.evaluation_trace(f, *args)
    params = f.transformed.pf.params
    ks = floats(f)
    grads = ad.grad(f, tuple(ks))(*args)
    returned = t.value("adjoint", "return")
    returned = returned if isinstance(returned, tuple) else (returned,)
    for k, g in zip(ks, grads):
        final = t.value("adjoint", f"adj_{params[k].name}")
        assert final == pytest.approx(g, rel=1e-12, abs=1e-14)
        assert returned[k] == pytest.approx(g, rel=1e-12, abs=1e-14)
        assert final == pytest.approx(central(f, args, k), rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("f,args", CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_tangent_of_the_result_is_the_jvp(f, args):
    n = len(args)
    for k in floats(f):
        direction = tuple(1.0 if j == k else 0.0 for j in range(n))
        t = ad.evaluation_trace(f, *args, tangent=direction)
        value, dot = ad.jvp(f, args, direction)
        assert t.value("tangent", "return") == pytest.approx(dot, rel=1e-12, abs=1e-14)
        assert t.value("tangent", "return") == pytest.approx(central(f, args, k), rel=1e-6,
                                                             abs=1e-8)


def test_seed_scales_the_adjoints():
    one = ad.evaluation_trace(product_sin, 0.5, 1.2)
    three = ad.evaluation_trace(product_sin, 0.5, 1.2, seed=3.0)
    assert three.value("adjoint", "adj_y") == pytest.approx(3 * one.value("adjoint", "adj_y"))
    assert three.value("adjoint", "adj_ret") == 3.0


def test_rows_follow_the_generated_lines_in_order():
    t = ad.evaluation_trace(product_sin, 0.5, 1.2, tangent=(0.0, 1.0))
    shown = [(r.phase, r.variable, r.statement) for r in t.rows]
    assert shown[:4] == [("primal", "x", "x = 0.5"), ("primal", "y", "y = 1.2"),
                         ("tangent", "dot_x", "dot_x = 0.0"), ("tangent", "dot_y", "dot_y = 1.0")]
    primal = [(r.variable, r.statement) for r in t.rows if r.phase == "primal"][2:]
    assert primal == [("a", "a = x * y"), ("b", "b = rt.sin(a)"), ("t0", "t0 = b + x"),
                      ("return", "return t0")]
    tangent = [r.variable for r in t.rows if r.phase == "tangent"][2:]
    assert tangent == ["dot_a", "dot_b", "dot_t0", "return"]
    assert t.value("tangent", "dot_a") == 0.5           # dot_x * y + dot_y * x
    adjoint = [(r.variable, r.statement) for r in t.rows if r.phase == "adjoint"]
    accumulated = [a for a in adjoint if "+=" in a[1]]
    assert accumulated == [("adj_t0", "adj_t0 += adj_ret"), ("adj_b", "adj_b += adj_t0"),
                           ("adj_x", "adj_x += adj_t0"), ("adj_a", "adj_a += adj_b * rt.cos(a)"),
                           ("adj_x", "adj_x += adj_a * y"), ("adj_y", "adj_y += adj_a * x")]
    # adj_x as it accumulates: 1 from b + x, then 1 + y cos(xy)
    xs = [r.value for r in t.rows if r.phase == "adjoint" and r.variable == "adj_x"]
    assert xs == [0.0, 1.0, pytest.approx(1 + 1.2 * math.cos(0.6))]


def test_rows_name_the_users_lines():
    lines, start = inspect.getsourcelines(powers.pyfunc)
    here = {start + k: text.strip() for k, text in enumerate(lines)}
    t = ad.evaluation_trace(powers, 0.5, 4)
    named = [r for r in t.all_rows if r.line and not r.source.startswith("(")]
    assert named
    for r in named:
        assert r.file == "test_trace.py"
        assert here[r.line] == r.source, r
    assert {r.source for r in named if r.variable == "t1"} == {"s = s + x * s + x"}
    assert {r.source for r in named if r.variable == "i"} == {"for i in range(n):"}


def test_loop_iterations_appear_and_are_elided_past_the_limit():
    t = ad.evaluation_trace(powers, 0.5, 7, max_iterations=2)
    every = [r.value for r in t.all_rows if r.phase == "primal" and r.variable == "i"]
    assert every == list(range(7))
    shown = [r for r in t.rows if r.phase == "primal"]
    assert [r.value for r in shown if isinstance(r, Row) and r.variable == "i"] == [0, 1, 6]
    gaps = [r for r in shown if isinstance(r, Elided)]
    assert len(gaps) == 1 and (gaps[0].first, gaps[0].last) == (2, 5)
    assert gaps[0].count == 4 * 5          # i, t1, t0, s_2, s_1 in each hidden iteration
    # the reverse sweep's iterations too, the last one (the loop's first) kept
    rev = [r.value for r in t.rows if isinstance(r, Row) and r.variable == "loop0_iter"]
    assert rev == [6, 5, 0]
    assert any(isinstance(r, Elided) and r.phase == "adjoint" for r in t.rows)
    text = str(t)
    assert "… iterations 3 to 6 elided …" in text and "20 rows" in text
    # no limit reached: nothing elided
    assert not any(isinstance(r, Elided) for r in ad.evaluation_trace(powers, 0.5, 2).rows)


def test_nested_loops_elide_inner_iterations_per_outer_iteration():
    t = ad.evaluation_trace(nested, 0.8, -1.1, max_iterations=1)
    js = [r.value for r in t.rows if isinstance(r, Row) and r.phase == "primal"
          and r.variable == "j"]
    assert js == [0, 1, 0, 1]          # outer iterations 0 and 2 shown; each inner loop whole
    assert ad.evaluation_trace(nested, 0.8, -1.1).value("primal", "return") == \
        pytest.approx(nested.pyfunc(0.8, -1.1))


def test_replay_rows_are_kept_but_not_shown_by_default():
    t = ad.evaluation_trace(powers, 0.5, 3)
    assert any(r.phase == "replay" for r in t.all_rows)
    assert not any(r.phase == "replay" for r in t.rows)
    assert "replay" in t.text(phases=("adjoint", "replay"))


def test_markdown_and_html_hold_the_same_values():
    t = ad.evaluation_trace(product_sin, 0.5, 1.2)
    md, html = t.markdown(), t.html()
    assert md.startswith("| phase | user line | variable | value | generated line |")
    assert "| adjoint | `test_trace.py:" in md and "`adj_y` | 0.412668 |" in md
    assert html.count("<tr") == len(t.rows) + 1
    assert '<tr class="tangent"><td>tangent</td>' in html and "0.412668" in html
    assert len(md.splitlines()) == len(t.rows) + 2


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="takes 2 arguments"):
        ad.evaluation_trace(product_sin, 0.5)
    with pytest.raises(TypeError, match="one tangent per parameter"):
        ad.evaluation_trace(product_sin, 0.5, 1.0, tangent=(1.0,))
    with pytest.raises(TypeError, match="@ad.func"):
        ad.evaluation_trace(lambda x: x, 1.0)


SOURCE = textwrap.dedent("""\
    import math
    import adjoint as ad


    @ad.func
    def f(x: float, y: float) -> float:
        a = x * y
        b = math.sin(a)
        return b + x


    @ad.kernel
    def k(x: ad.array(dtype=float)):
        i = ad.tid()
        x[i] = x[i] * 2.0
    """)


def test_cli_prints_the_table(tmp_path, capsys):
    path = tmp_path / "traced.py"
    path.write_text(SOURCE)
    assert cli.main(["trace", f"{path}:f", "--args", "0.5", "1.2", "--tangent", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# trace of f(0.5, 1.2): tangent (0, 1), seed adj_ret = 1\n")
    assert "── traced.py:7: a = x * y" in out
    assert [ln.split()[:3] for ln in out.splitlines() if ln.startswith("adjoint  adj_y")][-1] == \
        ["adjoint", "adj_y", f"{math.cos(0.6) * 0.5:.6g}"]
    assert "tangent  return" in out and f"{1.2 * 0 + 0.5 * math.cos(0.6):.6g}" in out
    assert cli.main(["trace", f"{path}:f", "--args", "0.5", "1.2", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == ad.evaluation_trace(_load(path).f, 0.5, 1.2).markdown()
    assert cli.main(["trace", f"{path}:k", "--args", "1"]) == 2
    assert "is a kernel: give --dim N" in capsys.readouterr().err
    assert cli.main(["trace", f"{path}:f", "--args", "1", "2", "--dim", "3"]) == 2
    assert "--dim is for kernels" in capsys.readouterr().err
    assert cli.main(["trace", f"{path}:f", "--args", "1"]) == 2
    assert "takes 2 arguments" in capsys.readouterr().err


def _load(path):
    from adjoint.generate import import_source
    return import_source(str(path))


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_docs_page_renders_live_traces_with_the_values_it_states():
    """docs/traces.md's markers expand (as `mkdocs build` expands them, docs/hooks.py) to
    the live tables, which hold the numbers its prose states; the page is in the nav."""
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    try:
        import gen_stages
        import trace_example
    finally:
        sys.path.remove(os.path.join(ROOT, "docs"))
    with open(os.path.join(ROOT, "docs", "traces.md"), encoding="utf-8") as fh:
        page = fh.read()
    assert page.count("<!-- adjoint trace ") == 3
    out = gen_stages.expand(page)
    assert "<!--" not in out
    table = ad.evaluation_trace(trace_example.baydin, 2, 5).markdown()
    assert table.rstrip() in out
    t = ad.evaluation_trace(trace_example.baydin, 2, 5)
    assert t.value("adjoint", "adj_x1") == pytest.approx(5.5)
    assert f"{t.value('adjoint', 'adj_x2'):.6g}" == "1.71634" and "≈ 1.71634" in page
    assert t.value("tangent", "return") == pytest.approx(5.5)
    loop = ad.evaluation_trace(trace_example.compound, 0.1, 5, max_iterations=2)
    assert "```text\n" + loop.text().rstrip() + "\n```" in out
    assert f"`{loop.value('adjoint', 'adj_x'):.6g}` at `x = 0.1, n = 5`" in page
    # one thread of a kernel, from the command line: its last adj_x[i] is 2 cos(1) + 2
    kernel = out.split("adjoint trace docs/transpose_kernel.py:wave", 1)[1]
    assert kernel.split("```", 2)[1].rstrip().splitlines()[-1].split()[:3] == \
        ["adjoint", "adj_x[i]", f"{2 * math.cos(1.0) + 2:.6g}"]
    assert f"2 cos(1) + 2 ≈ {2 * math.cos(1.0) + 2:.5g}" in page
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as fh:
        assert "  - Evaluation traces with numbers: traces.md\n" in fh.read()


@ad.kernel
def smooth(n: int, x: ad.array(dtype=float), w: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        s = s + w[i] * math.sin(s + x[i])
    out[i] = s * x[i]


def run_smooth(x, w, n=5):
    out = ad.zeros(len(x), requires_grad=True)
    xs = ad.array(x, requires_grad=True)
    ws = ad.array(w, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(smooth, dim=len(x), inputs=[n, xs, ws], outputs=[out])
    tape.backward(grads={out: np.ones(len(x))})
    return out.numpy(), xs.grad.numpy(), ws.grad.numpy()


def test_one_thread_of_a_kernel():
    x, w = np.linspace(0.2, 0.9, 4), np.linspace(1.5, 0.5, 4)
    xs, ws, out = ad.array(x), ad.array(w), ad.zeros(4)
    t = ad.evaluation_trace(smooth, 4, inputs=[5, xs, ws], outputs=[out], thread=2,
                            max_iterations=2)
    assert not out.numpy().any() and (xs.numpy() == x).all()     # copies were launched
    value, gx, gw = run_smooth(x, w)
    assert t.value("primal", "out[i]") == value[2]
    assert t.value("adjoint", "adj_x[i]") == pytest.approx(gx[2], rel=1e-12)
    assert t.value("adjoint", "adj_w[i]") == pytest.approx(gw[2], rel=1e-12)
    eps = 1e-6
    hi, lo = x.copy(), x.copy()
    hi[2] += eps
    lo[2] -= eps
    fd = (run_smooth(hi, w)[0].sum() - run_smooth(lo, w)[0].sum()) / (2 * eps)
    assert t.value("adjoint", "adj_x[i]") == pytest.approx(fd, rel=1e-6)
    # the JVP along x (the default: ones for the first float array input)
    dots = ad.launch(smooth, 4, inputs=[5, ad.array(x), ad.array(w)], outputs=[ad.zeros(4)],
                     tangents={"x": ad.ones(4)})
    assert t.value("tangent", "dot_out[i]") == pytest.approx(dots["out"].numpy()[2], rel=1e-12)
    assert t.value("tangent", "dot_out[i]") == pytest.approx(fd, rel=1e-6)
    # the rows are thread 2's, its loop elided past 2 iterations, the user's lines named
    assert t.value("primal", "i") == 2
    assert [r.value for r in t.rows if isinstance(r, Row) and r.phase == "primal"
            and r.variable == "k"] == [0, 1, 4]
    assert any(isinstance(r, Elided) for r in t.rows)
    assert {r.source for r in t.all_rows if r.variable == "out[i]"} == {"out[i] = s * x[i]"}
    assert str(t).startswith("# trace of smooth, thread 2 of a launch over 4\n")
    seeded = ad.evaluation_trace(smooth, 4, inputs=[5, xs, ws], outputs=[out], thread=2,
                                 seed={out: ad.full(4, 2.0)}, tangent={ws: ad.ones(4)})
    assert seeded.value("adjoint", "adj_x[i]") == pytest.approx(2 * gx[2], rel=1e-12)
    assert seeded.value("tangent", "dot_out[i]") == pytest.approx(gw[2], rel=1e-12)


@ad.func
def halving(x: float, n: int) -> float:
    k = 0
    while k < n:
        x = x * 0.5 + 1.0
        k += 1
    return x


@ad.func
def two_values(x: float, y: float):
    return x * y, math.exp(x)


@ad.func
def squared_norm(v: ad.vec3) -> float:
    return ad.dot(v, v)


def test_while_loop_multiple_returns_and_vector_components():
    t = ad.evaluation_trace(halving, 0.5, 6, max_iterations=2)
    assert t.value("primal", "return") == halving.pyfunc(0.5, 6)
    assert t.value("adjoint", "adj_x") == ad.grad(halving)(0.5, 6) == 0.5 ** 6
    assert [r.value for r in t.rows if isinstance(r, Row) and r.phase == "primal"
            and r.variable == "k_2"] == [1, 2, 6]
    t = ad.evaluation_trace(two_values, 0.5, 2.0, seed=(1.0, 2.0))
    assert t.value("primal", "return") == (1.0, math.exp(0.5))
    assert t.value("tangent", "return") == (2.0, math.exp(0.5))     # along x
    assert t.value("adjoint", "return") == pytest.approx((2.0 + 2 * math.exp(0.5), 0.5))
    t = ad.evaluation_trace(squared_norm, 1.0, 2.0, 3.0, tangent=(0.0, 0.0, 1.0))
    assert t.value("adjoint", "return") == (2.0, 4.0, 6.0)
    assert t.value("tangent", "return") == 6.0
    with pytest.raises(TypeError, match=r"v_x, v_y, v_z: a vector parameter is given as its"):
        ad.evaluation_trace(squared_norm, ad.vec3(1.0, 2.0, 3.0))


def smooth_numpy(n, x, w):
    """``smooth``'s outputs, computed independently with numpy."""
    s = np.zeros_like(x)
    for _ in range(n):
        s = s + w * np.sin(s + x)
    return s * x


X_EXPR, W_EXPR = "np.linspace(0.2, 0.9, 4)", "np.linspace(1.5, 0.5, 4)"
KERNEL_ARGS = ["--dim", "4", "--inputs", "5", X_EXPR, W_EXPR, "--outputs", "4"]


def _cli_values(argv, capsys):
    """{(phase, variable): [values in order]} of the table `adjoint trace argv` prints."""
    assert cli.main(["trace"] + argv + ["--digits", "17"]) == 0
    out = capsys.readouterr().out
    values = {}
    for line in out.splitlines()[2:]:
        row = re.match(r"(primal|tangent|adjoint) +(\S.*?)  +(\S+)  ", line)
        if row:
            values.setdefault(row.group(1, 2), []).append(float(row[3]))
    return out, values


def test_cli_traces_one_kernel_thread_against_numpy_and_central_differences(capsys):
    """`adjoint trace FILE:KERNEL --dim --inputs --outputs --thread`: the primal is what
    the kernel computes (a numpy model), the adjoints are central differences of it in
    float64 (times --seed), the tangent along --tangent NAME=EXPR is too."""
    x, w = np.linspace(0.2, 0.9, 4), np.linspace(1.5, 0.5, 4)
    argv = [f"{__file__}:smooth"] + KERNEL_ARGS + ["--thread", "2", "--seed", "2",
                                                   "--tangent", "w=0.5"]
    out, v = _cli_values(argv, capsys)
    assert out.startswith("# trace of smooth, thread 2 of a launch over 4\n")
    assert v[("primal", "i")] == [2]
    assert v[("primal", "out[i]")] == [pytest.approx(smooth_numpy(5, x, w)[2], rel=1e-14)]
    eps = 1e-6

    def fd(which, k):
        hi, lo = [x.copy(), w.copy()], [x.copy(), w.copy()]
        hi[which][k] += eps
        lo[which][k] -= eps
        return (smooth_numpy(5, *hi).sum() - smooth_numpy(5, *lo).sum()) / (2 * eps)
    assert v[("adjoint", "adj_x[i]")][-1] == pytest.approx(2 * fd(0, 2), rel=1e-7)
    assert v[("adjoint", "adj_w[i]")][-1] == pytest.approx(2 * fd(1, 2), rel=1e-7)
    assert v[("tangent", "dot_out[i]")] == [pytest.approx(0.5 * fd(1, 2), rel=1e-7)]
    # the default direction: ones for the first float array input (x)
    _, v = _cli_values([f"{__file__}:smooth"] + KERNEL_ARGS + ["--thread", "1"], capsys)
    assert v[("tangent", "dot_out[i]")] == [pytest.approx(fd(0, 1), rel=1e-7)]
    assert v[("adjoint", "adj_x[i]")][-1] == pytest.approx(fd(0, 1), rel=1e-7)


@ad.kernel
def square2d(a: ad.array(dtype=float, ndim=2), c: float, b: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    b[i, j] = c * a[i, j] * a[i, j] + float(j)


def test_cli_traces_a_2d_kernel_with_a_shape_giving_zeros(capsys):
    argv = [f"{__file__}:square2d", "--dim", "2", "3", "--inputs",
            "np.arange(6.0).reshape(2, 3)", "1.5", "--outputs", "(2, 3)", "--thread", "1", "2"]
    out, v = _cli_values(argv, capsys)
    assert out.startswith("# trace of square2d, thread 1, 2 of a launch over (2, 3)\n")
    assert v[("primal", "b[i, j]")] == [1.5 * 5.0 ** 2 + 2]
    assert v[("adjoint", "adj_a[i, j]")][-1] == 2 * 1.5 * 5.0


BAD_KERNEL_LINES = [
    (["--inputs", "5", X_EXPR, W_EXPR, "--outputs", "4"], "give the launch's size with --dim N"),
    (["--dim", "4", "--inputs", "5", X_EXPR, "--outputs", "4"],
     "takes 4 arguments (n, x, w, out), got 2 --inputs + 1 --outputs"),
    (["--dim", "4", "--args", "1", "2"], "is a kernel: give --dim N"),
    (KERNEL_ARGS + ["--thread", "4"], "--thread 4 is not a thread of a launch over --dim 4"),
    (KERNEL_ARGS + ["--thread", "1", "1"], "is not a thread of a launch over --dim 4"),
    (["--dim", "4", "--inputs", "5", "np.nosuch(4)", W_EXPR, "--outputs", "4"],
     "--inputs 'np.nosuch(4)': AttributeError"),
    (["--dim", "4", "--inputs", "[5]", X_EXPR, W_EXPR, "--outputs", "4"],
     "parameter 'n' is a number, not an array"),
    (KERNEL_ARGS + ["--tangent", "out=1"], "NAME=EXPR for a float array input of 'smooth' (x, w)"),
    (KERNEL_ARGS + ["--tangent", "x=np.ones(3)"], "shape (3,) does not fit 'x' (shape (4,))"),
    (["--dim", "8", "--inputs", "5", X_EXPR, W_EXPR, "--outputs", "4"], "out of bounds"),
]


@pytest.mark.parametrize("command,argv,message", [
    (command, argv, message) for command in ("trace", "transpose")
    for argv, message in BAD_KERNEL_LINES
    if command == "trace" or "--tangent" not in argv], ids=lambda a: str(a)[:30])
def test_cli_kernel_usage_errors_are_named(command, argv, message, capsys):
    """A kernel's command line that does not fit it is a usage error (exit 2) naming what
    is wrong, for `adjoint trace` and `adjoint transpose` alike (adjoint/build/cli_point.py)."""
    assert cli.main([command, f"{__file__}:smooth"] + argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"adjoint {command}: error: ") and message in err, err
    assert "Traceback" not in err
