"""Bounds checks (issue 11, item 1): an index out of bounds raises ad.BoundsError
naming the kernel, the file:line of the access, the array, the index and the
shape -- on every backend, in the forward and in the backward.

Before the checks, numba read and wrote outside the arrays (garbage, then
``corrupted size vs. prev_size`` and an abort), and the Python backend and the
CUDA simulator wrapped negative indices around or raised numpy's IndexError
with no kernel line. The numba cases therefore run in a child process: without
the checks they corrupt the memory of the process that runs them.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import adjoint as ad

KERNELS = '''
@ad.func
def shifted(i: int) -> int:
    return i + 7


@ad.kernel
def scale(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] * 2.0


@ad.kernel
def far(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i + 100]


@ad.kernel
def left(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i - 1]


@ad.kernel
def cast(v: ad.array(dtype=float), x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[int(v[i])]


@ad.kernel
def gather(idx: ad.array(dtype=ad.int64), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[idx[i]]


@ad.kernel
def window(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(n):
        s += x[j] * x[j]
    out[i] = s


@ad.kernel
def grid2(a: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    out[i, j] = a[i, j + 1]


@ad.kernel
def via_func(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[shifted(i)]


@ad.kernel
def scatter(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i + 2] += x[i]


def case_dim_too_large():
    return scale, 8, [ad.array(np.arange(4.0))], [ad.zeros(8)]


def case_plus_100():
    return far, 4, [ad.array(np.arange(4.0))], [ad.zeros(4)]


def case_minus_1_at_0():
    return left, 4, [ad.array(np.arange(4.0))], [ad.zeros(4)]


def case_huge():
    return cast, 2, [ad.array(np.array([0.0, 1e30])), ad.array(np.arange(4.0))], [ad.zeros(2)]


def case_nan():
    return cast, 2, [ad.array(np.array([0.0, np.nan])), ad.array(np.arange(4.0))], [ad.zeros(2)]


def case_gathered():
    idx = ad.array(np.array([0, 3, 9, 1]))
    return gather, 4, [idx, ad.array(np.arange(4.0))], [ad.zeros(4)]


def case_loop_range():
    return window, 2, [6, ad.array(np.arange(4.0))], [ad.zeros(2)]


def case_two_d():
    return grid2, (3, 4), [ad.array(np.ones((3, 4)))], [ad.zeros((3, 4))]


def case_two_d_dim():
    return grid2, (3, 5), [ad.array(np.ones((3, 6)))], [ad.zeros((3, 4))]


def case_in_func():
    return via_func, 4, [ad.array(np.arange(8.0))], [ad.zeros(4)]


def case_store():
    return scatter, 4, [ad.array(np.arange(4.0))], [ad.zeros(4)]


def run(case, direction):
    """Launch ``case`` forward or backward (adjoint=True); (error type, message, attributes)."""
    kernel, dim, inputs, outputs = globals()["case_" + case]()

    def adj(a):
        return ad.zeros(a.shape) if isinstance(a, ad.Array) and a.dtype == np.float64 else None
    try:
        if direction == "forward":
            ad.launch(kernel, dim, inputs=inputs, outputs=outputs)
        else:
            ad.launch(kernel, dim, inputs=inputs, outputs=outputs, adjoint=True,
                      adj_inputs=[adj(a) for a in inputs], adj_outputs=[adj(a) for a in outputs])
        ad.synchronize()        # (a CUDA launch's fault is reported where the host waits)
    except Exception as exc:  # noqa: BLE001 - the test looks at whatever was raised
        attrs = {k: getattr(exc, k, None) for k in ("kernel", "array", "index", "lineno")}
        attrs["shape"] = list(getattr(exc, "shape", ()) or ())
        return [type(exc).__name__, isinstance(exc, IndexError), str(exc), attrs]
    return ["no error", False, "", {}]
'''

# case: (kernel, array, index, shape, text of the access's line); index None: any value
# out of bounds; a tuple: any of these (the backward of a serial kernel runs its threads
# in parallel or in reverse: any failing thread may report first)
EXPECT = {
    "dim_too_large": ("scale", "x", 4, (4,), "out[i] = x[i] * 2.0"),
    "plus_100": ("far", "x", 100, (4,), "out[i] = x[i + 100]"),
    "minus_1_at_0": ("left", "x", -1, (4,), "out[i] = x[i - 1]"),
    "huge": ("cast", "x", None, (4,), "out[i] = x[int(v[i])]"),
    "nan": ("cast", "x", None, (4,), "out[i] = x[int(v[i])]"),
    "gathered": ("gather", "x", 9, (4,), "out[i] = x[idx[i]]"),
    "loop_range": ("window", "x", 4, (4,), "s += x[j] * x[j]"),
    "two_d": ("grid2", "a", 4, (3, 4), "out[i, j] = a[i, j + 1]"),
    "two_d_dim": ("grid2", "out", 4, (3, 4), "out[i, j] = a[i, j + 1]"),
    "in_func": ("via_func", "x", 8, (8,), "out[i] = x[shifted(i)]"),
    "store": ("scatter", "out", (4, 5), (4,), "out[i + 2] += x[i]"),
}

CHILD = '''
import json, sys
import adjoint as ad
ad.use_backend("numba")
sys.path.insert(0, {folder!r})
import {module} as m
out = {{}}
for case in {cases!r}:
    for direction in ("forward", "backward"):
        out[case + ":" + direction] = m.run(case, direction)
        print(json.dumps({{case + ":" + direction: out[case + ":" + direction]}}), flush=True)
'''


@pytest.fixture(scope="module")
def kernels_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bounds")
    path = folder / "bounds_kernels.py"
    path.write_text("import math\nimport numpy as np\nimport adjoint as ad\n\n" +
                    textwrap.dedent(KERNELS))
    return path


@pytest.fixture(scope="module")
def kernels(kernels_file):
    sys.path.insert(0, str(kernels_file.parent))
    try:
        import bounds_kernels
    finally:
        sys.path.remove(str(kernels_file.parent))
    return bounds_kernels


@pytest.fixture(scope="module")
def numba_outcomes(kernels_file):
    """Every numba case, run in one child process (see the module docstring)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(ad.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    script = CHILD.format(folder=str(kernels_file.parent), module="bounds_kernels",
                          cases=sorted(EXPECT))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=900)
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            found.update(json.loads(line))
    return found, proc


def outcome(backend, kernels, numba_outcomes, case, direction):
    if backend != "numba":
        return kernels.run(case, direction)
    found, proc = numba_outcomes
    key = f"{case}:{direction}"
    assert key in found, (f"the child process died before {key} (exit status "
                          f"{proc.returncode}): {proc.stderr[-2000:]}")
    return found[key]


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("case", sorted(EXPECT))
def test_out_of_bounds_index_raises_bounds_error(backend, kernels, kernels_file,
                                                 numba_outcomes, case, direction):
    kernel, array, index, shape, text = EXPECT[case]
    kind, is_index_error, message, attrs = outcome(backend, kernels, numba_outcomes, case,
                                                   direction)
    assert kind == "BoundsError" and is_index_error, (kind, message)
    line = [k + 5 for k, ln in enumerate(textwrap.dedent(KERNELS).splitlines())
            if ln.strip() == text][0]      # 4 import lines, numbered from 1
    assert kernels_file.read_text().splitlines()[line - 1].strip() == text
    assert f"kernel '{kernel}' (bounds_kernels.py:{line})" in message
    assert f"array '{array}' with shape {shape}" in message
    assert attrs["kernel"] == kernel and attrs["array"] == array and attrs["lineno"] == line
    assert tuple(attrs["shape"]) == shape
    if index is None:
        assert not 0 <= attrs["index"] < shape[-1]
    else:
        assert attrs["index"] in np.atleast_1d(index) and f"index {attrs['index']}" in message
    if attrs["index"] < 0:
        assert "does not wrap around" in message


def test_error_names_the_loop_range_checked_before_the_loop(backend, kernels, numba_outcomes):
    kind, _, message, _ = outcome(backend, kernels, numba_outcomes, "loop_range", "forward")
    assert kind == "BoundsError"
    assert re.search(r"index 4 \(the loop's range\(0, 6, 1\), checked before the loop runs\)",
                     message), message


def test_thread_index_bound_is_checked_once_per_launch(backend, kernels, numba_outcomes):
    """``x[i]``: no check inside the kernel, one per launch (dim <= x.shape[0])."""
    assert "rt.fault" not in ad.source(kernels.scale, "forward")
    assert "rt.fault" not in ad.source(kernels.scale, "backward")
    spec = kernels.scale.spec_for("cuda" if backend == "cuda" else "cpu")
    kinds = {(s.array, s.kind) for s in spec.bounds.sites}
    assert kinds == {("x", "thread"), ("out", "thread")}
    kind, _, message, _ = outcome(backend, kernels, numba_outcomes, "dim_too_large", "forward")
    assert "checked once per launch" in message and "dim=(8,)" in message


def test_loop_variable_is_checked_once_before_the_loop(kernels):
    """``x[j]`` for ``j in range(n)``: one range check before the loop, none inside."""
    for stage in ("forward", "backward"):
        # (each function running threads: the thread function, and a backward's pair
        # function where it has one, emit/jam.py)
        for src in ad.source(kernels.window, stage).split("\ndef ")[:2]:
            if "for j in range(0, n, 1):" not in src:
                continue
            loop = src.index("for j in range(0, n, 1):")
            assert "rt.range_outside(0, n, 1, x.shape[0])" in src[:loop]
            assert "rt.fault" not in src[loop:]


def test_gathered_index_is_checked_where_it_is_used(kernels):
    src = ad.source(kernels.gather, "forward")
    assert re.search(r"if (\w+) < 0 or \1 >= x\.shape\[0\]:", src), src


def test_a_constant_index_is_checked_against_the_size_only(backend, kernel_module):
    """A constant index is never negative: its check tests the size alone (no ``if 0 < 0
    or ...``), and an array too small for it still raises."""
    m = kernel_module('''
        @ad.kernel
        def second(rows: ad.array(dtype=int), x: ad.array(dtype=float, ndim=2),
                   y: ad.array(dtype=float)):
            i = ad.tid()
            if rows[i] >= 0:        # (under a branch: checked where it is read)
                y[i] = x[rows[i], 1] * 2.0
    ''')
    src = ad.source(m.second, "forward")
    assert "if 1 >= x.shape[1]:" in src and "1 < 0" not in src, src
    y = ad.zeros(3)
    rows = ad.array(np.array([2, 0, 1]))
    ad.launch(m.second, 3, inputs=[rows, ad.array(np.arange(6.0).reshape(3, 2))], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [10.0, 2.0, 6.0])
    with pytest.raises(ad.BoundsError):
        ad.launch(m.second, 3, inputs=[rows, ad.array(np.zeros((3, 1)))], outputs=[y])
        y.numpy()           # (on CUDA, where the fault is reported)


def test_negative_index_in_a_guarded_branch_is_not_an_error(backend, kernel_module):
    """A per-launch check only covers accesses every thread makes: one under an ``if``
    that keeps it in bounds must not be refused."""
    m = kernel_module('''
        @ad.kernel
        def guarded(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            if i < n:
                out[i] = x[i] + x[i - 1] * 0.0 if i > 0 else x[i]
        ''')
    x = ad.array(np.arange(4.0), requires_grad=True)
    out = ad.zeros(8, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.guarded, 8, inputs=[4, x], outputs=[out])
    tape.backward(grads={out: np.ones(8)})
    assert np.array_equal(out.numpy(), [0, 1, 2, 3, 0, 0, 0, 0])
    assert np.array_equal(x.grad.numpy(), [1, 1, 1, 1])


def test_bounds_check_false_emits_no_checks_and_keeps_results(backend, kernel_module):
    """``@ad.kernel(bounds_check=False)``: no checks, the same values and gradients
    (out[i] = x[i]^2 + x[idx[i]]: d/dx = 2 x on the diagonal + the gathered ones)."""
    src = '''
        @ad.kernel({opt})
        def k{n}(idx: ad.array(dtype=ad.int64), x: ad.array(dtype=float),
                 out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = x[i] * x[i] + x[idx[i]]
        '''
    checked = kernel_module(src.format(opt="", n=1)).k1
    unchecked = kernel_module(src.format(opt="bounds_check=False", n=2)).k2
    for stage in ("forward", "backward"):
        text = ad.source(unchecked, stage)
        assert "rt.fault" not in text and "rt_status" not in text
    assert unchecked.spec_for("cuda" if backend == "cuda" else "cpu").bounds is None
    x0 = np.array([1.0, 2.0, 3.0, 4.0])
    idx = np.array([3, 0, 0, 2])
    for k in (checked, unchecked):
        x = ad.array(x0, requires_grad=True)
        out = ad.zeros(4, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(k, 4, inputs=[ad.array(idx), x], outputs=[out])
        tape.backward(grads={out: np.ones(4)})
        assert np.array_equal(out.numpy(), x0 * x0 + x0[idx])
        assert np.array_equal(x.grad.numpy(), 2 * x0 + np.bincount(idx, minlength=4))


def test_zero_size_launch_checks_nothing(backend, kernels):
    """No thread runs: a launch over dim=0 indexes nothing, whatever the shapes."""
    ad.launch(kernels.scale, 0, inputs=[ad.zeros(0)], outputs=[ad.zeros(0)])


STENCIL = '''
@ad.kernel
def smooth(u: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    nx = u.shape[0]
    c = u[i, j]
    if i > 0 and i < nx - 1 and j > 0:
        out[i, j] = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] - 3.0 * c
    else:
        out[i, j] = c


@ad.kernel
def off_by_one(u: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    nx = u.shape[0]
    if i >= 0 and i < nx:
        out[i, j] = u[i - 1, j] + u[i + 1, j]
'''


def test_neighbours_proven_by_their_guard_need_no_check(backend, kernel_module):
    """``u[i - 1, j]`` under ``i > 0``, ``u[i + 1, j]`` under ``i < nx - 1`` (nx =
    u.shape[0]) and ``u[i, j - 1]`` under ``j > 0`` are in bounds: no check is made;
    results and gradients are those of numpy (d sum(out) / du by hand)."""
    m = kernel_module(STENCIL)
    for stage in ("forward", "backward"):
        assert "rt.fault" not in ad.source(m.smooth, stage)
    u0 = np.arange(20.0).reshape(4, 5) ** 1.5
    u = ad.array(u0, requires_grad=True)
    out = ad.zeros((4, 5), requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.smooth, (4, 5), inputs=[u], outputs=[out])
    tape.backward(grads={out: np.ones((4, 5))})
    want, grad = u0.copy(), np.ones((4, 5))
    for i in range(1, 3):
        for j in range(1, 5):
            want[i, j] = u0[i - 1, j] + u0[i + 1, j] + u0[i, j - 1] - 3.0 * u0[i, j]
            grad[i, j] -= 4.0                  # the 1 of the border copy becomes -3
            grad[i - 1, j] += 1.0
            grad[i + 1, j] += 1.0
            grad[i, j - 1] += 1.0
    np.testing.assert_allclose(out.numpy(), want)
    np.testing.assert_allclose(u.grad.numpy(), grad)


def test_a_guard_that_does_not_prove_the_index_leaves_the_check(backend, kernel_module):
    """``i >= 0`` does not make ``i - 1`` an index, nor ``i < nx`` ``i + 1``: both are
    checked, and i = 0 fails (before the checks numba read u[-1, j], the last row)."""
    m = kernel_module(STENCIL)
    src = ad.source(m.off_by_one, "forward")
    assert src.count(">= u.shape[0]:") == 2           # u[i - 1, j] and u[i + 1, j]
    with pytest.raises(ad.BoundsError) as err:
        ad.launch(m.off_by_one, (3, 2), inputs=[ad.array(np.ones((3, 2)))],
                  outputs=[ad.zeros((3, 2))])
        ad.synchronize()    # (on CUDA, where the fault is reported)
    assert err.value.index in (-1, 3) and err.value.array == "u" and err.value.shape == (3, 2)


PERIODIC = '''
@ad.kernel
def ring(u: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    n1 = u.shape[1]
    ip = i + 1
    if ip == n0:
        ip = 0
    im = i - 1
    if im < 0:
        im = n0 - 1
    jm = j - 1
    if jm < 0:
        jm = n1 - 1
    c = u[i, j]
    out[i, j] = c * c + u[ip, j] - 2.0 * u[im, j] + 3.0 * u[i, jm]


@ad.kernel
def ring_off_by_one(u: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    ip = i + 1
    if ip > n0:
        ip = 0
    out[i, j] = u[i, j] + u[ip, j]
'''


def test_wrapped_neighbours_of_a_periodic_stencil_need_no_check(backend, kernel_module):
    """``ip = i + 1; if ip == n0: ip = 0`` is 0 in one branch and at most n0 - 1 in the
    other (i < n0, i + 1 != n0); ``im = i - 1; if im < 0: im = n0 - 1`` likewise: no check
    is made, and values and gradients are numpy's (np.roll, d sum(out) / du by hand)."""
    m = kernel_module(PERIODIC)
    for stage in ("forward", "backward"):
        assert "rt.fault" not in ad.source(m.ring, stage)
    u0 = np.arange(20.0).reshape(4, 5) ** 1.5
    u = ad.array(u0, requires_grad=True)
    out = ad.zeros((4, 5), requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.ring, (4, 5), inputs=[u], outputs=[out])
    tape.backward(grads={out: np.ones((4, 5))})
    want = u0 * u0 + np.roll(u0, -1, 0) - 2.0 * np.roll(u0, 1, 0) + 3.0 * np.roll(u0, 1, 1)
    np.testing.assert_allclose(out.numpy(), want)
    np.testing.assert_allclose(u.grad.numpy(), 2.0 * u0 + 1.0 - 2.0 + 3.0)


def test_a_wrap_that_misses_the_edge_leaves_the_check(backend, kernel_module):
    """``if ip > n0: ip = 0`` leaves ip = n0 for the last row: checked, and it fails."""
    m = kernel_module(PERIODIC)
    assert ad.source(m.ring_off_by_one, "forward").count(">= u.shape[0]:") == 1
    with pytest.raises(ad.BoundsError) as err:
        ad.launch(m.ring_off_by_one, (3, 2), inputs=[ad.array(np.ones((3, 2)))],
                  outputs=[ad.zeros((3, 2))])
        ad.synchronize()    # (on CUDA, where the fault is reported)
    assert err.value.index == 3 and err.value.array == "u"
