"""docs/derivatives.md cannot go stale: its markers expand (every output on the page is
produced when the site is built), the numbers its prose derives by hand are the ones the
scripts print, the generated code it quotes is still generated, and
examples/derivatives.py passes its finite-difference checks.
"""
import ast
import math
import os
import re
import subprocess
import sys

from tests.docs.test_docs_forward import (FENCE, GENERATED_NAME, SPAN, expanded, generated_blocks,
                                         page_text)
from tests.build.test_generate import ROOT

PAGE = "derivatives.md"
# spans naming generated code in general, not a line the page's scripts print
SCHEMATIC = {"dot_x", "adj_ret", "f_jvp(x, dot_x)", "rt.stack_*"}


def printed(title):
    """The lines a ``run`` marker's block printed, for the script ``title``."""
    text = expanded(PAGE)
    m = re.search(r"<small>`python " + re.escape(title) + r"`</small>\n\n```text\n(.*?)^```$",
                  text, re.MULTILINE | re.DOTALL)
    assert m, f"no output of {title} on the page"
    return m.group(1).splitlines()


def value(lines, label):
    """The value printed after ``label ... = ``."""
    line = next(line for line in lines if line.startswith(label))
    return line.split(" = ", 1)[1].strip()


def test_every_marker_expands():
    text = expanded(PAGE)
    assert not re.search(r"<!-- (adjoint show|include|run) ", text)
    assert text.count("```text") == 6           # the output of every script on the page


def test_first_gradient_is_sin_plus_x_cos():
    lines = printed("docs/derivatives_first.py")
    assert math.isclose(float(lines[0]), math.sin(1.0) + math.cos(1.0), rel_tol=1e-15)
    assert lines[2].startswith("def f_adjoint(x, adj_ret):")


def test_tour_numbers_are_the_ones_derived_by_hand():
    """At (0.5, 0.4) g = ((x² + y)² + y)² + y: the prose's 2.1385 and 4.7835, and the
    second derivatives of that polynomial."""
    lines = printed("docs/derivatives_tour.py")
    x, y = 0.5, 0.4
    s1 = x * x + y
    s2 = s1 * s1 + y
    gx, gy = 8 * x * s1 * s2, 2 * s2 * (2 * s1 + 1) + 1
    gxx = 8 * s1 * s2 + 8 * x * (2 * x) * s2 + 8 * x * s1 * (2 * s1 * 2 * x)
    gxy = 8 * x * s2 + 8 * x * s1 * (2 * s1 + 1)
    gyy = 2 * (2 * s1 + 1) ** 2 + 4 * s2
    assert (round(gx, 10), round(gy, 10)) == (2.1385, 4.7835)
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-12)   # noqa: E731
    assert close(ast.literal_eval(value(lines, "value_and_grad(g)"))[1], gx)
    assert all(map(close, ast.literal_eval(value(lines, "grad(g, argnums=(0, 1))")), (gx, gy)))
    assert close(ast.literal_eval(value(lines, "jvp(g, (0.5, 0.4), (0, 1))"))[1], gy)
    H = ast.literal_eval(value(lines, "hessian(g, argnums=(0, 1))"))
    for got, want in zip(sum(H, ()), (gxx, gxy, gxy, gyy)):
        assert close(got, want), (H, (gxx, gxy, gyy))
    assert close(float(value(lines, "grad(grad(g))")), gxx)
    assert close(float(value(lines, "grad(grad(g, 1), 0)")), gxy)


def test_higher_page_shows_the_printed_jvp_and_its_adjoint():
    lines = printed("docs/derivatives_higher.py")
    text = "\n".join(lines)
    assert "def f_jvp(x: ad.float64, dot_x: ad.float64):" in text
    assert "def f_jvp_adjoint(x, dot_x, adj_ret0, adj_ret1):" in text
    assert "def f_d0_adjoint(x, adj_ret):" in text and "f_jvp_adjoint(x, 1.0," in text
    assert math.isclose(float(lines[-2]), 2 * math.cos(1.0) - math.sin(1.0), rel_tol=1e-14)


def test_custom_rules_are_used_and_a_grad_only_func_is_refused():
    lines = printed("docs/derivatives_custom.py")
    for label in ("grad(loss)", "grad(grad(loss))"):
        got, by_hand = value(lines, label).split(" by hand:")
        assert math.isclose(float(got), float(by_hand), rel_tol=1e-14), label
    refused = next(line for line in lines if line.startswith("grad(grad(relu6))"))
    assert "no @ad.func_jvp" in refused and "'relu6'" in refused


def test_hvp_hessian_is_the_one_derived_by_hand():
    lines = printed("docs/derivatives_hvp.py")
    text = "\n".join(lines)
    got, by_hand = text.split("by hand:")
    assert got.split(":", 1)[1].split() == by_hand.split()
    assert "[[-2.  1.  4.]" in by_hand


def test_quoted_generated_code_is_still_generated():
    prose = FENCE.sub("", page_text(PAGE))
    spans = [s for s in SPAN.findall(prose)
             if s.isascii() and s not in SCHEMATIC
             and any(GENERATED_NAME.match(n) for n in re.findall(r"[A-Za-z_]\w*", s))]
    assert spans, "the page quotes no generated code: is the pattern still right?"
    code = generated_blocks(PAGE)
    stale = [s for s in spans if s not in code]
    assert not stale, f"docs/{PAGE} quotes code its scripts no longer print: {stale}"


def test_page_is_in_the_nav_after_forward_mode():
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as fh:
        nav = fh.read().split("\nnav:\n", 1)[1]
    assert re.search(r"^  - [^:]+: forward-mode.md\n  - [^:]+: derivatives.md$", nav,
                     re.MULTILINE)


def test_api_reference_lists_the_new_names():
    with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as fh:
        api = fh.read()
    for name in ("adjoint.derivatives.grad", "adjoint.derivatives.value_and_grad",
                 "adjoint.derivatives.jvp", "adjoint.derivatives.hessian",
                 "adjoint.api.func_jvp", "adjoint.derivatives.autograd"):
        assert f"::: {name}\n" in api, name


def test_derivatives_example_passes_on_the_python_backend(tmp_path):
    """examples/derivatives.py (as the page runs it): every derivative agrees with central
    differences. tests/docs/test_examples.py runs it with numba."""
    env = dict(os.environ, ADJOINT_JIT="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "derivatives.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("-> OK"), r.stdout
    assert r.stdout.count(": True") == 4, r.stdout
