"""Regressions for silent wrong gradients found by other projects' tests and a fuzzer.

Each test failed before its fix, and runs on every backend. Sizes large enough
for numba's parallel plans (more than PARALLEL_MIN_THREADS threads) are used
where the plan is what went wrong; the CUDA simulator runs smaller grids.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import TransformError


def _size(backend, big, small):
    return big if backend == "numba" else small


PERIODIC = '''
@ad.kernel
def periodic(a: float, n0: int, u: ad.array(dtype=float, ndim=2), v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    im = i - 1
    if im < 0:
        im = n0 - 1
    ip = i + 1
    if ip == n0:
        ip = 0
    v[i, j] = u[i, j] + a * (u[ip, j] + u[im, j] - 2.0 * u[i, j])

@ad.kernel
def merged_index(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    j = i
    if x[i] > 0.5:
        j = 0
    out[j] += x[i] * x[i]
'''


def test_a_wrapped_index_is_not_a_row_offset(backend, kernel_module):
    """``ip = i + 1; if ip == n0: ip = 0`` is not "the thread's row + 1": the even/odd
    row-block plan raced on rows 0 and n0-1 (gradient 0.9 instead of 1)."""
    m = kernel_module(PERIODIC)
    assert "rt.block_count" not in ad.source(m.periodic, "backward")
    n0, n1 = 6, _size(backend, 40000, 16)
    u = ad.array(np.random.default_rng(0).random((n0, n1)), requires_grad=True)
    v = ad.zeros((n0, n1), requires_grad=True)
    for _ in range(3):
        with ad.Tape() as tape:
            ad.launch(m.periodic, dim=(n0, n1), inputs=[0.1, n0, u], outputs=[v])
        tape.backward(grads={v: np.ones((n0, n1))})
        np.testing.assert_array_equal(u.grad.numpy(), np.ones((n0, n1)))  # d sum(v)/du = 1
        tape.zero()


def test_a_merge_of_the_thread_index_with_another_value_is_not_exclusive(backend, kernel_module):
    """``j = i; if c: j = 0`` may collide at 0: accumulations into out[j] must be
    privatized (CPU) or atomic (CUDA), never plain parallel updates."""
    m = kernel_module(PERIODIC)
    assert "rt.private_copies(out" in ad.source(m.merged_index, "forward")
    assert "atomic.add(out" in ad.source(m.merged_index, "forward", target="cuda")
    n = _size(backend, 50000, 64)
    x0 = np.random.default_rng(1).random(n)
    x = ad.array(x0, requires_grad=True)
    out = ad.zeros(n, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.merged_index, dim=n, inputs=[x], outputs=[out])
    expected = np.where(x0 > 0.5, 0.0, x0 * x0)
    expected[0] += np.sum(np.where(x0 > 0.5, x0 * x0, 0.0))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)
    seed = np.random.default_rng(2).random(n)
    tape.backward(grads={out: seed})
    np.testing.assert_allclose(x.grad.numpy(), 2 * x0 * np.where(x0 > 0.5, seed[0], seed),
                               rtol=1e-12)


ALIASED = '''
@ad.kernel
def two_reads(u0: ad.array(dtype=float, ndim=2), u1: ad.array(dtype=float, ndim=2),
              o: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    o[i, j] = u0[i + 1, j] * u1[i + 1, j] + u1[i, j]

@ad.kernel
def two_reads_1d(u0: ad.array(dtype=float), u1: ad.array(dtype=float), o: ad.array(dtype=float)):
    i = ad.tid()
    o[i] = u0[i + 1] * u1[i + 1] + u1[i]
'''


def _two_reads_grad(x, seed):
    """d/dx of sum(seed * o), o[r] = x[r + 1]^2 + x[r] (rows r < n - 1), by hand."""
    g = np.zeros_like(x)
    g[1:] += 2.0 * x[1:] * seed
    g[:-1] += seed
    return g


@pytest.mark.parametrize("adjoint_launch", [False, True])
def test_one_array_passed_for_two_read_parameters(backend, kernel_module, adjoint_launch):
    """Both parameters' adjoints land in x.grad: the backward gets separate adjoint
    buffers (summed afterwards), so neither plan nor compiler can lose an update."""
    m = kernel_module(ALIASED)
    n = _size(backend, 64, 8)
    rng = np.random.default_rng(3)
    x0 = rng.random((n, n))
    seed = rng.random((n - 1, n))
    x = ad.array(x0, requires_grad=True)
    o = ad.zeros((n - 1, n), requires_grad=True)
    if adjoint_launch:
        ad.launch(m.two_reads, dim=(n - 1, n), inputs=[x, x], outputs=[o])
        ad.launch(m.two_reads, dim=(n - 1, n), inputs=[x, x], outputs=[o], adjoint=True,
                  adj_inputs=[x.grad, x.grad], adj_outputs=[ad.array(seed)])
    else:
        with ad.Tape() as tape:
            ad.launch(m.two_reads, dim=(n - 1, n), inputs=[x, x], outputs=[o])
        tape.backward(grads={o: seed})
    np.testing.assert_allclose(o.numpy(), x0[1:] ** 2 + x0[:-1], rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), _two_reads_grad(x0, seed), rtol=1e-12)

    n1 = _size(backend, 5000, 9)
    x0 = rng.random(n1)
    seed = rng.random(n1 - 1)
    x = ad.array(x0, requires_grad=True)
    o = ad.zeros(n1 - 1, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.two_reads_1d, dim=n1 - 1, inputs=[x, x], outputs=[o])
    tape.backward(grads={o: seed})
    np.testing.assert_allclose(x.grad.numpy(), _two_reads_grad(x0, seed), rtol=1e-12)


# Each expression of x is printed into a kernel and compared with Python's own
# evaluation of the same text (values) and with central differences (gradients).
PRECEDENCE = [
    "SIGN ** 2 * x + (-2) ** 2 * x",
    "(-0.5) ** 2 * x",
    "-x ** 2",
    "(-x) ** 2",
    "-SIGN ** 2 * x",
    "2.0 ** -x",
    "x ** -2.0",
    "(-1.0) ** 3 * x",
    "x - -1.5 * x",
    "x * -SIGN",
    "x / -0.25 - -x",
    "-(x - 3.0) ** 3",
    "(x if not x < 1.0 else -x) ** 2",
    "-x if -x < -1.0 else x * -0.0",
]


def _precedence_source():
    lines = ["SIGN = -1.5", "", "@ad.kernel",
             "def signs(x: ad.array(dtype=float), out: ad.array(dtype=float, ndim=2)):",
             "    i = ad.tid()"]
    for k, e in enumerate(PRECEDENCE):
        lines.append(f"    out[i, {k}] = {e.replace('x', 'x[i]')}")
    return "\n".join(lines) + "\n"


def test_printer_keeps_the_meaning_of_negative_numbers_and_precedence(backend, kernel_module):
    m = kernel_module(_precedence_source())
    x0 = np.array([0.4, 0.9, 1.3, 1.7])
    n, k = len(x0), len(PRECEDENCE)
    expected = np.array([[eval(e, {"SIGN": -1.5, "x": float(v)}) for e in PRECEDENCE] for v in x0])

    def forward(xs):
        out = ad.zeros((n, k))
        ad.launch(m.signs, dim=n, inputs=[ad.array(xs)], outputs=[out])
        return out.numpy()

    np.testing.assert_allclose(forward(x0), expected, rtol=1e-13)
    eps = 1e-6
    fd = (np.array([forward(x0 + eps)]) - np.array([forward(x0 - eps)]))[0] / (2 * eps)
    for col in range(k):
        x = ad.array(x0, requires_grad=True)
        out = ad.zeros((n, k), requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(m.signs, dim=n, inputs=[x], outputs=[out])
        seed = np.zeros((n, k))
        seed[:, col] = 1.0
        tape.backward(grads={out: seed})
        np.testing.assert_allclose(x.grad.numpy(), fd[:, col], rtol=1e-6, atol=1e-7,
                                   err_msg=PRECEDENCE[col])


MAYBE_UNASSIGNED = {
    "one_branch": '''
    if x[i] > 0.0:
        y = x[i]
    out[i] = y
''',
    "loop_may_not_run": '''
    for k in range(n):
        y = x[i] * float(k)
    out[i] = y
''',
    "break_before_assignment": '''
    for k in range(3):
        if x[i] > 0.5:
            break
        y = x[i]
    out[i] = y
''',
    "read_before_first_assignment_in_loop": '''
    s = 0.0
    for k in range(3):
        s = s + y
        y = x[i]
    out[i] = s
''',
}

DEFINITELY_ASSIGNED = {
    "both_branches": '''
    if x[i] > 0.0:
        y = x[i] * x[i]
    else:
        y = -x[i]
    out[i] = y
''',
    "constant_trip_count": '''
    for k in range(3):
        y = x[i] * float(k + 1)
    out[i] = y
''',
    "while_true_with_break": '''
    k = 0
    while True:
        y = x[i] * float(k + 2)
        k += 1
        if k > n:
            break
    out[i] = y
''',
    "return_on_the_other_path": '''
    if x[i] > 10.0:
        return
    else:
        y = x[i] * 3.0
    out[i] = y
''',
}


def _kernel(name, body):
    return (f"@ad.kernel\ndef {name}(n: int, x: ad.array(dtype=float), "
            f"out: ad.array(dtype=float)):\n    i = ad.tid()\n" + body)


@pytest.mark.parametrize("case", sorted(MAYBE_UNASSIGNED))
def test_a_read_of_a_maybe_unassigned_variable_is_refused_at_the_read(case, kernel_module):
    """It used to read an invented 0.0 ([1, 0, 2, 0]); Python raises UnboundLocalError."""
    m = kernel_module(_kernel(case, MAYBE_UNASSIGNED[case]))
    with pytest.raises(TransformError, match=r"'y' may be used before it is assigned") as err:
        ad.source(getattr(m, case), "forward")
    assert "y" in err.value.source_line and err.value.filename.endswith(".py")


@pytest.mark.parametrize("case", sorted(DEFINITELY_ASSIGNED))
def test_definitely_assigned_variables_are_accepted(case, backend, kernel_module):
    m = kernel_module(_kernel(case, DEFINITELY_ASSIGNED[case]))
    k = getattr(m, case)
    x0 = np.array([-0.7, 0.3, 0.9, 1.4])
    ref = {"both_branches": lambda v: v * v if v > 0 else -v,
           "constant_trip_count": lambda v: 3.0 * v,
           "while_true_with_break": lambda v: 4.0 * v,       # n = 2: k = 0, 1, 2
           "return_on_the_other_path": lambda v: 3.0 * v}[case]
    dref = {"both_branches": lambda v: 2 * v if v > 0 else -1.0,
            "constant_trip_count": lambda v: 3.0, "while_true_with_break": lambda v: 4.0,
            "return_on_the_other_path": lambda v: 3.0}[case]
    x = ad.array(x0, requires_grad=True)
    out = ad.zeros(4, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k, dim=4, inputs=[2, x], outputs=[out])
    np.testing.assert_allclose(out.numpy(), [ref(v) for v in x0], rtol=1e-12)
    tape.backward(grads={out: np.ones(4)})
    np.testing.assert_allclose(x.grad.numpy(), [dref(v) for v in x0], rtol=1e-12)


PIECEWISE = '''
@ad.kernel
def clamped(x: ad.array(dtype=float), lo: ad.array(dtype=float), hi: ad.array(dtype=float),
            out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = ad.clamp(x[i], lo[i], hi[i])

@ad.kernel
def smaller(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = min(x[i], y[i])

@ad.kernel
def larger(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = max(x[i], y[i])

@ad.kernel
def clamped_constant_bounds(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = ad.clamp(x[i], -0.5, 0.5) + min(x[i], 0.25)
'''

NAN = float("nan")


def _grads(kernel, operands):
    arrays = [ad.array(np.array(v, dtype=float), requires_grad=True) for v in operands]
    out = ad.zeros(len(operands[0]), requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, dim=len(operands[0]), inputs=arrays, outputs=[out])
    tape.backward(grads={out: np.ones(len(operands[0]))})
    return out.numpy(), [a.grad.numpy() for a in arrays]


def _chosen(values, pick):
    """One-hot gradients: 1 for the operand whose value the primal returned."""
    k = pick(*values)
    return [1.0 if j == k else 0.0 for j in range(len(values))]


def test_clamp_min_max_send_the_gradient_where_the_value_came_from_also_under_nan(
        backend, kernel_module):
    """The rules used to test other comparisons than the primal: under NaN no branch
    held and the gradient vanished (4 of 8 NaN placements of clamp)."""
    m = kernel_module(PIECEWISE)
    cases = [(x, lo, hi) for x in (0.3, 2.0, -2.0, NAN) for lo in (-1.0, NAN)
             for hi in (1.0, NAN)] + [(0.5, 1.0, -1.0), (1.0, 1.0, 1.0)]
    x, lo, hi = (np.array(c) for c in zip(*cases))
    # rt.clamp: lo if x < lo, else hi if x > hi, else x (operand 0 = x, 1 = lo, 2 = hi)
    pick = lambda x, lo, hi: 1 if x < lo else (2 if x > hi else 0)  # noqa: E731
    out, grads = _grads(m.clamped, [x, lo, hi])
    expected = np.array([_chosen(c, pick) for c in cases]).T
    np.testing.assert_array_equal(np.array(grads), expected)
    np.testing.assert_array_equal(out, [c[pick(*c)] for c in cases])

    pairs = [(a, b) for a in (0.5, 1.0, NAN) for b in (1.0, NAN)] + [(-0.0, 0.0), (0.0, -0.0)]
    a, b = (np.array(c) for c in zip(*pairs))
    for kernel, py, beats in ((m.smaller, min, lambda a, b: b < a),
                              (m.larger, max, lambda a, b: b > a)):
        out, grads = _grads(kernel, [a, b])
        expected = np.array([[0.0, 1.0] if beats(*p) else [1.0, 0.0] for p in pairs]).T
        np.testing.assert_array_equal(np.array(grads), expected)
        np.testing.assert_array_equal(np.copysign(1, out), [np.copysign(1, py(*p)) for p in pairs])


def test_piecewise_rules_with_constant_operands_keep_the_variable_operand(backend, kernel_module):
    """With constant bounds only the updates of the variable operand remain, inside
    the branches (a rule is not dropped whole because one operand is constant)."""
    m = kernel_module(PIECEWISE)
    x0 = np.array([-0.9, -0.1, 0.4, 0.8])
    out, (g,) = _grads(m.clamped_constant_bounds, [x0])
    np.testing.assert_allclose(out, np.clip(x0, -0.5, 0.5) + np.minimum(x0, 0.25))
    np.testing.assert_array_equal(g, (np.abs(x0) <= 0.5) * 1.0 + (x0 <= 0.25) * 1.0)


NO_BACKWARD_WORK = '''
@ad.kernel
def bump(x: ad.array(dtype=float)):
    i = ad.tid()
    x[i] += 1.0

@ad.kernel
def histogram(bins: ad.array(dtype=ad.int64), counts: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(counts, bins[i], 1.0)

@ad.kernel
def count_up(n: ad.array(dtype=ad.int64)):
    i = ad.tid()
    n[i] += 1
'''


def test_a_backward_with_nothing_to_do_is_valid_code(backend, kernel_module):
    """Its body was only comments: an IndentationError broke even the forward launch."""
    m = kernel_module(NO_BACKWARD_WORK)
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    counts = ad.zeros(3, requires_grad=True)
    n = ad.array(np.array([5, 6, 7]))
    with ad.Tape() as tape:
        ad.launch(m.bump, dim=3, inputs=[], outputs=[x])
        ad.launch(m.histogram, dim=4, inputs=[ad.array(np.array([0, 2, 2, 1]))], outputs=[counts])
        ad.launch(m.count_up, dim=3, inputs=[], outputs=[n])
    np.testing.assert_array_equal(x.numpy(), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(counts.numpy(), [1.0, 1.0, 2.0])
    np.testing.assert_array_equal(n.numpy(), [6, 7, 8])
    tape.backward(grads={x: np.array([0.5, 1.5, 2.5]), counts: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), [0.5, 1.5, 2.5])    # x + 1: d/dx = 1
    assert "pass" in ad.source(m.histogram, "backward")


STORE_THEN_LOAD = '''
@ad.kernel
def after_return(x: ad.array(dtype=float), out: ad.array(dtype=float), sq: ad.array(dtype=float)):
    i = ad.tid()
    if x[i] > 5.0:
        return
    out[i] = x[i] * 2.0
    y = out[i]
    sq[i] = y * y

@ad.kernel
def stored_in_a_loop(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float),
                     sq: ad.array(dtype=float)):
    i = ad.tid()
    for k in range(n):
        out[i] = x[i] * float(k)
    sq[i] = out[i] * out[i]

@ad.kernel
def stored_at_a_shared_index(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int64),
                             out: ad.array(dtype=float), sq: ad.array(dtype=float)):
    i = ad.tid()
    out[idx[i]] = x[i]
    sq[i] = out[idx[i]] * out[idx[i]]
'''


def test_store_then_load_of_the_same_element_after_an_early_return(backend, kernel_module):
    """Refused as 'both read and written' once an early return had put the store under
    a guard; the same kernel without the return ran."""
    m = kernel_module(STORE_THEN_LOAD)
    x0 = np.array([0.5, 7.0, -1.5])
    x = ad.array(x0, requires_grad=True)
    out, sq = ad.zeros(3, requires_grad=True), ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.after_return, dim=3, inputs=[x], outputs=[out, sq])
    live = x0 <= 5.0
    np.testing.assert_allclose(sq.numpy(), np.where(live, 4 * x0 * x0, 0.0))
    tape.backward(grads={sq: np.ones(3), out: np.full(3, 0.5)})
    np.testing.assert_allclose(x.grad.numpy(), np.where(live, 8 * x0 + 1.0, 0.0))


@pytest.mark.parametrize("name", ["stored_in_a_loop", "stored_at_a_shared_index"])
def test_store_then_load_stays_refused_where_the_replay_would_read_another_value(
        name, kernel_module):
    m = kernel_module(STORE_THEN_LOAD)
    with pytest.raises(TransformError, match="both read and written"):
        ad.source(getattr(m, name), "backward")


RECURSION = '''
@ad.func
def halve(x: float, n: int) -> float:
    if n == 0:
        return x
    return halve(x, n - 1) * 0.5

@ad.func
def ping(x: float, n: int) -> float:
    if n <= 0:
        return x
    return pong(x, n - 1)

@ad.func
def pong(x: float, n: int) -> float:
    return ping(x * 2.0, n)

@ad.kernel
def uses_halve(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = halve(x[i], 3)

@ad.kernel
def uses_ping(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = ping(x[i], 3)
'''


@pytest.mark.parametrize("kernel, call", [("uses_halve", "halve(x, n - 1)"),
                                          ("uses_ping", "ping(x * 2.0, n)")])
def test_recursion_is_refused_at_the_recursive_call(kernel, call, kernel_module):
    """It ended in a 2,471-line RecursionError from inside gast."""
    m = kernel_module(RECURSION)
    with pytest.raises(TransformError, match="recursion is not supported") as err:
        ad.launch(getattr(m, kernel), dim=2, inputs=[ad.zeros(2)], outputs=[ad.zeros(2)])
    assert call in err.value.source_line and err.value.filename.endswith(".py")


CONSTANT_TEST = '''
@ad.func
def folded(x: float, n: int) -> float:
    s = x
    for k in range(n):
        if 1 > 0:
            s = s * x
        else:
            s = s + (x if x > 0.0 else -x)
    return s

@ad.kernel
def uses_folded(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = folded(x[i], n)
'''


def test_a_constant_test_in_a_func_loop_with_a_ternary_in_the_dead_branch(backend, kernel_module):
    """numba folded ``if 1 > 0`` and pruned the replay's else, the only assignment of the
    ternary's test; the reverse pass's mirrored else still read it: TypingError."""
    m = kernel_module(CONSTANT_TEST)
    x0 = np.array([0.7, 1.2, -0.4])
    x = ad.array(x0, requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.uses_folded, dim=3, inputs=[3, x], outputs=[out])
    np.testing.assert_allclose(out.numpy(), x0 ** 4, rtol=1e-12)       # s = x * x^3
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_allclose(x.grad.numpy(), 4 * x0 ** 3, rtol=1e-12)
