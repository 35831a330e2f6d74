"""Smoke tests of the examples: each runs a few optimisation steps (not the full
run) in a subprocess, and its loss goes down; the committed gradient module of
the springs example is up to date with its kernels."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.build.test_generate import ROOT

EXAMPLES = os.path.join(ROOT, "examples")


def run_example(name, *args, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / f"{name}.png"
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, f"{name}.py"), *args,
                        "--out", str(out)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout, out


def final_losses(stdout):
    m = re.search(r": (\S+) -> (\S+?)[;\s]", stdout + "\n")
    return float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize("name, args", [
    ("springs", ["--iters", "4", "--steps", "30"]),
    ("projectile", ["--iters", "4", "--steps", "40"]),
    ("heat", ["--iters", "5", "--steps", "10"]),
    ("rigid_body", ["--iters", "4", "--steps", "20"]),
])
def test_example_runs_and_improves(name, args, tmp_path):
    stdout, plot = run_example(name, *args, tmp_path=tmp_path)
    first, last = final_losses(stdout)
    assert last < first, stdout
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "no plot written" in stdout
    else:
        assert plot.exists() and plot.stat().st_size > 1000


def test_quickstart_runs(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "quickstart.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_committed_gradient_module_is_up_to_date():
    from adjoint.generate import check
    result = check(os.path.join(EXAMPLES, "springs_grad.py"))
    assert result.ok, (f"{result.reason}; regenerate with `adjoint generate "
                       "examples/springs_kernels.py -o examples/springs_grad.py`")


def test_springs_gradient_matches_finite_differences(tmp_path):
    """The committed module's gradient through the whole simulation, checked by FD."""
    sys.path.insert(0, EXAMPLES)
    try:
        import numpy as np

        import adjoint as ad
        import springs
        x0, ends, pinned = springs.make_chain()
        rest0 = (ends[:, 1] - ends[:, 0]) * 0.75
        target = ad.array(x0 + 0.1)

        def loss_of(rest, grad=False):
            r = ad.array(rest, requires_grad=grad)
            loss = ad.zeros(1, requires_grad=grad)
            with ad.Tape() as tape:
                springs.simulate(r, x0, ends, pinned, 20, target, loss)
            if grad:
                tape.backward(loss=loss)
                return r.grad.numpy()
            return loss.numpy()[0]
        g = loss_of(rest0, grad=True)
        eps = 1e-6
        for k in (0, 7, len(rest0) - 1):
            e = np.zeros_like(rest0)
            e[k] = eps
            fd = (loss_of(rest0 + e) - loss_of(rest0 - e)) / (2 * eps)
            assert abs(fd - g[k]) <= 1e-6 * max(1.0, abs(fd)), (k, fd, g[k])
    finally:
        sys.path.remove(EXAMPLES)


def test_jacobian_example_builds_it_both_ways(tmp_path):
    """examples/jacobian.py: columns from JVPs, rows from VJPs and finite differences
    agree; its column for x[2] is the one derived by hand."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "jacobian.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-> OK" in r.stdout
    blocks = re.findall(r"\[\[(.*?)\]\]", r.stdout, re.DOTALL)
    assert len(blocks) == 3, r.stdout
    # x[2] = -0.7 lies below every thread's threshold 0.5 * i, so each iteration on it
    # runs s = 0.5 * s + x[2]**2 (derivative 2 * x[2] = -1.4); the next input x[3] = 0.9
    # passes s on unchanged (s + sin(x[3]) * d) for threads 0 and 1, and halves it for
    # thread 2 (0.9 < 1.0)
    for block in blocks:
        J = np.array([[float(v) for v in row.replace("[", "").replace("]", "").split()]
                      for row in block.split("\n")])
        assert J.shape == (3, 4)
        assert np.allclose(J[:, 2], [-1.4, -1.4, -0.7], atol=1e-6), J


def test_derivatives_example_matches_finite_differences(tmp_path):
    """examples/derivatives.py: ad.grad, ad.hessian, ad.grad(ad.grad(f)) of a func with a
    loop and a branch and an HVP of a kernel agree with central differences (numba)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "derivatives.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("-> OK"), r.stdout
    assert r.stdout.count(": True") == 4, r.stdout
