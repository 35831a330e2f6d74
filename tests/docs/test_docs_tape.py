"""docs/tape.md cannot go stale: its markers expand when the site is built, and the
struct example's printed numbers are the derivatives its prose states."""
import math
import re

import numpy as np

from tests.docs.test_docs_forward import expanded

PAGE = "tape.md"


def printed(title):
    """The lines a ``run`` marker's block printed, for the script ``title``."""
    m = re.search(r"<small>`python " + re.escape(title) + r"`</small>\n\n```text\n(.*?)^```$",
                  expanded(PAGE), re.MULTILINE | re.DOTALL)
    assert m, f"no output of {title} on the page"
    return m.group(1).splitlines()


def values(lines, label):
    line = next(line for line in lines if line.startswith(label))
    return np.array([float(v) for v in line.split("=", 1)[1].strip(" []").split()])


def test_every_marker_expands():
    assert not re.search(r"<!-- (adjoint show|include|run) ", expanded(PAGE))


def test_a_struct_built_in_python_gets_its_gradients():
    """x_new = x + dt * v * exp(-drag * dt) with dt = 0.1, drag = 0.5: the derivatives
    are 1 for p.x and dt * exp(-drag * dt) for p.v, as the page says."""
    lines = printed("docs/structs_example.py")
    x, v, dt, drag = np.array([0.0, 1.0, 2.0]), np.array([1.0, -1.0, 0.5]), 0.1, 0.5
    factor = dt * math.exp(-drag * dt)
    np.testing.assert_allclose(values(lines, "x_new"), x + v * factor, rtol=1e-7)
    np.testing.assert_array_equal(values(lines, "p.x.grad"), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(values(lines, "p.v.grad"), [factor] * 3, rtol=1e-7)
    assert values(lines, "by hand")[0] == factor
    assert lines[-1] == "LaunchError: launch of kernel 'drift': field 'p.x' is not set"
