"""examples/teaching/: the exercises of docs/teaching.md run and say their checks passed.

Each script runs in a subprocess with the pure-Python backend (``ADJOINT_JIT=0``: the
same numbers without numba's compile time) and small sizes. The scripts check
themselves (a wrong rule must be caught, the stack must hold the forward's values, the
launch counts must be n and m); these tests also check what they print."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEACHING = os.path.join(ROOT, "examples", "teaching")


def run(script, *args, cwd=None):
    env = dict(os.environ, ADJOINT_JIT="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, os.path.join(TEACHING, script), *args],
                       capture_output=True, text=True, env=env, cwd=cwd or ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("all checks passed"), r.stdout
    return r.stdout


def test_custom_rule_gradcheck_names_the_wrong_partial():
    out = run("custom_rule.py")
    assert "the correct rule: gradcheck passed: True" in out
    assert "by partial: d out/d y: 4 of 16 entries wrong; d out/d x agrees" in out
    assert "out[0] / y[0]" in out and "/ x[" not in out


def test_loop_stack_in_the_generated_backward():
    out = run("loop_stack.py")
    assert "rt.stack_push(" in out and "[loop0_iter]" in out
    assert "stack holds the forward's values: True" in out


def test_jacobian_cost_table(tmp_path):
    out = run("jacobian_cost.py", "--sizes", "2", "5", "--plot", str(tmp_path / "cost.png"),
              cwd=str(tmp_path))
    rows = [line.split() for line in out.splitlines() if line.startswith(("wide", "tall"))]
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        ("wide", "2", "2", "2", "2"), ("wide", "5", "2", "5", "2"),
        ("tall", "2", "2", "2", "2"), ("tall", "2", "5", "2", "5")]
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib is not installed" in out
        assert not (tmp_path / "cost.png").exists()
    else:
        assert (tmp_path / "cost.png").exists()


@pytest.mark.parametrize("script", ["custom_rule.py", "loop_stack.py", "jacobian_cost.py"])
def test_each_exercise_says_what_it_teaches(script):
    with open(os.path.join(TEACHING, script), encoding="utf-8") as fh:
        head = fh.read(400)
    assert head.startswith('"""Exercise ')


def test_docs_chapter_runs_the_exercises():
    """docs/teaching.md includes each script and shows what it prints, run at build time."""
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    try:
        import gen_stages
    finally:
        sys.path.remove(os.path.join(ROOT, "docs"))
    with open(os.path.join(ROOT, "docs", "teaching.md"), encoding="utf-8") as fh:
        page = fh.read()
    for script in ("custom_rule.py", "loop_stack.py", "jacobian_cost.py"):
        assert f"<!-- include examples/teaching/{script} -->" in page
        assert f"<!-- run examples/teaching/{script}" in page
    out = gen_stages.expand(page)
    assert "<!--" not in out
    assert out.count("all checks passed") >= 3
    assert "by partial: d out/d y: 4 of 16 entries wrong; d out/d x agrees" in out
