"""REFERENCE-CASES.md §1, §3, §4, §6 and §8 as regression tests.

Expected values are the exact numbers of the reference document, or come from
an independent computation: a closed form in numpy, or central finite
differences through forward launches. None is taken from adjoint's output. The kernels
of §1 and §6 are the corpus's (tests/corpus.py), which every tier runs.
"""

import numpy as np
import pytest
from tests import corpus
from tests.conftest import central_fd

import adjoint as ad

RTOL, ATOL = 1e-6, 1e-8


_modules = {}


def load(kernel_module, src):
    """Import ``src`` once per test session, so numba compiles each kernel once per backend."""
    if src not in _modules:
        _modules[src] = kernel_module(src)
    return _modules[src]


def launch_forward(kernel, dim, inputs, outputs):
    """Forward run outside any tape (for finite differences)."""
    ad.launch(kernel, dim, inputs=inputs, outputs=outputs, record_tape=False)


# -- §1: aliasing stops gradient flow ------------------------------------------------

@pytest.mark.parametrize("kernel", [corpus.aliasing, corpus.alias_in_func],
                         ids=["kernel", "func"])
def test_s1_aliasing_then_rebinding_in_a_branch(backend, kernel):
    a = ad.array([-1.0, 2.0, 3.0], requires_grad=True)
    b = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, 3, inputs=[a], outputs=[b])
    np.testing.assert_array_equal(b.numpy(), [-1.0, 4.0, 9.0])
    tape.backward(grads={b: np.ones(3)})
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 4.0, 6.0])


# -- §3: several outputs of one kernel, seeded one at a time -------------------------

CHAIN = '''
@ad.kernel
def chain(x: ad.array(dtype=float), y: ad.array(dtype=float),
          z: ad.array(dtype=float), s: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i]
    z[i] = y[i]
    s[i] = z[i]
'''


def _chain_setup(kernel_module):
    m = load(kernel_module, CHAIN)
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    y, z, s = (ad.zeros(3, requires_grad=True) for _ in range(3))
    tape = ad.Tape()
    with tape:
        ad.launch(m.chain, 3, inputs=[x], outputs=[y, z, s])
    np.testing.assert_array_equal(s.numpy(), [1.0, 2.0, 3.0])
    return tape, x, (y, z, s)


def test_s3_seed_one_output_at_a_time(backend, kernel_module):
    tape, x, outs = _chain_setup(kernel_module)
    for name, out in zip("yzs", outs):
        seed = np.ones(3)
        tape.backward(grads={out: seed})
        np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0], err_msg=f"seeded {name}")
        np.testing.assert_array_equal(seed, np.ones(3), err_msg="backward modified the seed")
        tape.zero()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros(3))
        np.testing.assert_array_equal(out.grad.numpy(), np.zeros(3),
                                      err_msg=f"zero() left the seed of {name}")


def test_s3_different_seeds_after_zero(backend, kernel_module):
    tape, x, (y, z, s) = _chain_setup(kernel_module)
    for seed in ([1.0, 2.0, 3.0], [-4.0, 0.5, 7.0], [1.0, 1.0, 1.0]):
        tape.backward(grads={z: np.array(seed)})
        np.testing.assert_array_equal(x.grad.numpy(), seed)
        tape.zero()


@pytest.mark.parametrize("which", [0, 1, 2], ids=["y", "z", "s"])
def test_s3_backward_twice_without_zero_accumulates(backend, kernel_module, which):
    tape, x, outs = _chain_setup(kernel_module)
    seed = ad.ones(3)
    tape.backward(grads={outs[which]: seed})
    tape.backward(grads={outs[which]: seed})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(seed.numpy(), np.ones(3), err_msg="backward modified the seed")


def test_s3_overwritten_output_grad_reads_zero_after_backward(backend, kernel_module):
    # DESIGN.md: "After backward, an overwritten output's .grad reads 0."
    tape, x, (y, z, s) = _chain_setup(kernel_module)
    tape.backward(grads={s: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])
    for out in (y, z, s):
        np.testing.assert_array_equal(out.grad.numpy(), np.zeros(3))


# -- §4: explicit adjoint launches with scalar arguments ----------------------------

INTEGRATE = '''
@ad.kernel
def integrate(m: ad.array(dtype=float), v: ad.array(dtype=float), gravity: float, dt: float,
              v_out: ad.array(dtype=float)):
    i = ad.tid()
    v_out[i] = v[i] * v[i] * 0.5 + dt * gravity / m[i] + math.sin(v[i] * m[i])
'''


def _integrate_closed_form(m, v, gravity, dt, w):
    d_m = w * (-dt * gravity / m ** 2 + np.cos(v * m) * v)
    d_v = w * (v + np.cos(v * m) * m)
    return d_m, d_v


@pytest.mark.parametrize("adj_type", ["Array", "ndarray"])
def test_s4_explicit_adjoint_launch_accumulates(backend, kernel_module, adj_type):
    mod = load(kernel_module, INTEGRATE)
    n, gravity, dt = 5, -9.81, 0.01
    rng = np.random.default_rng(4)
    m0, v0 = rng.uniform(0.5, 2.0, n), rng.uniform(-1.0, 1.0, n)
    w = rng.uniform(0.5, 1.5, n)
    pre_m, pre_v = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    wrap = ad.array if adj_type == "Array" else np.array

    m, v, v_out = ad.array(m0), ad.array(v0), ad.zeros(n)
    ad.launch(mod.integrate, n, inputs=[m, v, gravity, dt], outputs=[v_out])
    adj_m, adj_v, adj_v_out = wrap(pre_m), wrap(pre_v), wrap(w)
    ad.launch(mod.integrate, n, inputs=[m, v, gravity, dt], outputs=[v_out], adjoint=True,
              adj_inputs=[adj_m, adj_v, None, None], adj_outputs=[adj_v_out])
    got_m = adj_m.numpy() if adj_type == "Array" else adj_m
    got_v = adj_v.numpy() if adj_type == "Array" else adj_v

    def f(mm, vv):
        out = ad.zeros(n)
        launch_forward(mod.integrate, n, [ad.array(mm), ad.array(vv), gravity, dt], [out])
        return float(np.dot(w, out.numpy()))

    fd_m = central_fd(lambda mm: f(mm, v0), m0)
    fd_v = central_fd(lambda vv: f(m0, vv), v0)
    np.testing.assert_allclose(got_m - pre_m, fd_m, rtol=RTOL, atol=1e-7)
    np.testing.assert_allclose(got_v - pre_v, fd_v, rtol=RTOL, atol=1e-7)
    cf_m, cf_v = _integrate_closed_form(m0, v0, gravity, dt, w)
    np.testing.assert_allclose(got_m, pre_m + cf_m, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_v, pre_v + cf_v, rtol=1e-12, atol=1e-12)
    # the forward inputs are left alone
    np.testing.assert_array_equal(m.numpy(), m0)
    np.testing.assert_array_equal(v.numpy(), v0)


def test_s4_none_adjoint_for_an_array_argument(backend, kernel_module):
    mod = load(kernel_module, INTEGRATE)
    n, gravity, dt = 4, 9.81, 0.5
    m0, v0, w = np.array([0.5, 1.0, 1.5, 2.0]), np.array([-1.0, 0.2, 0.4, 1.0]), np.ones(4)
    m, v, v_out = ad.array(m0), ad.array(v0), ad.zeros(n)
    adj_v = ad.zeros(n)
    ad.launch(mod.integrate, n, inputs=[m, v, gravity, dt], outputs=[v_out], adjoint=True,
              adj_inputs=[None, adj_v, None, None], adj_outputs=[ad.array(w)])
    _, cf_v = _integrate_closed_form(m0, v0, gravity, dt, w)
    np.testing.assert_allclose(adj_v.numpy(), cf_v, rtol=1e-12)


# -- §6: dynamic loops with loop-carried variables -----------------------------------

def test_s6_dynamic_loop_mult(backend):
    x = ad.array([2.0, 2.0, 2.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(corpus.dynamic_loop_mult, 3, inputs=[2, x], outputs=[out])
    np.testing.assert_array_equal(out.numpy(), [4.0, 4.0, 4.0])
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0, 4.0])


def test_s6_dynamic_loop_mult_other_trip_counts(backend):
    x0 = np.array([0.5, -1.5, 2.0])
    for n in (0, 1, 5):
        x = ad.array(x0, requires_grad=True)
        out = ad.zeros(3, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(corpus.dynamic_loop_mult, 3, inputs=[n, x], outputs=[out])
        tape.backward(grads={out: np.ones(3)})
        expected = n * x0 ** (n - 1) if n > 0 else np.zeros(3)
        np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-14, err_msg=f"n={n}")


def _branching_loop_grad(x0, n):
    """Closed form: iteration k sees x0 * 0.9**k and adds x*x or 2x."""
    g = 0.0
    for k in range(n):
        xk = x0 * 0.9 ** k
        g += (2.0 * xk if xk > 1.0 else 2.0) * 0.9 ** k
    return g


def test_s6_loop_whose_body_branches_on_a_carried_value(backend):
    x0 = np.array([1.5, 1.2, 0.5, 3.0])   # 1.2 switches branch in the third iteration
    xs = ad.array(x0, requires_grad=True)
    out = ad.zeros(4, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(corpus.loop_branch, 4, inputs=[4, xs], outputs=[out])
    tape.backward(grads={out: np.ones(4)})
    grad = xs.grad.numpy()
    assert abs(grad[0] - 8.992623) < 1e-6          # the reference value (wrong answer: 7.873)
    expected = [_branching_loop_grad(v, 4) for v in x0]
    np.testing.assert_allclose(grad, expected, rtol=1e-12)


LOOP_FUNCS = '''
@ad.func
def while_data_dependent(n: int, x: float) -> float:
    y = x
    while y < 10.0:
        y = y * (1.0 + 0.5 * x * x) + 0.1
    return y

@ad.func
def while_counter(n: int, x: float) -> float:
    y = 1.0
    c = 0
    while c < n:
        y = y * x + math.sin(y)
        c += 1
    return y

@ad.func
def for_break(n: int, x: float) -> float:
    y = 1.0
    for t in range(n):
        y = y * x + 1.0
        if y > 5.0:
            break
        y = y * 0.5 + x
    return y

@ad.func
def for_continue(n: int, x: float) -> float:
    y = 0.5
    for t in range(n):
        y = y * x
        if t == 1:
            continue
        y = y + math.cos(y * x)
    return y

@ad.func
def nested(n: int, x: float) -> float:
    y = 1.0
    for a in range(n):
        z = y
        for b in range(a + 1):
            z = z * x * 0.5 + math.sin(z)
        y = y + z * x
    return y

@ad.func
def negative_step(n: int, x: float) -> float:
    y = 0.25
    for t in range(n, 0, -2):
        y = y * x + float(t) * x * x
    return y

@ad.kernel
def loops(n: int, xs: ad.array(dtype=float), out: ad.array(dtype=float, ndim=2)):
    i = ad.tid()
    x = xs[i]
    out[0, i] = while_data_dependent(n, x)
    out[1, i] = while_counter(n, x)
    out[2, i] = for_break(n, x)
    out[3, i] = for_continue(n, x)
    out[4, i] = nested(n, x)
    out[5, i] = negative_step(n, x)
'''
LOOP_NAMES = ["while_data_dependent", "while_counter", "for_break", "for_continue", "nested",
              "negative_step"]
# "nested" grows fast in x: keep x small enough for finite differences to be accurate
LOOP_X = [1.3, 1.7, 0.7, 0.9]


@pytest.mark.parametrize("row,name", list(enumerate(LOOP_NAMES)), ids=LOOP_NAMES)
def test_s6_loop_patterns_match_finite_differences(backend, kernel_module, row, name):
    """while, break, continue, nested and negative-step loops (each in a func; one kernel
    calls them all, so numba compiles once). One output row is seeded at a time."""
    m = load(kernel_module, LOOP_FUNCS)
    n = 5
    x0 = np.array(LOOP_X)
    w = np.zeros((len(LOOP_NAMES), 4))
    w[row] = [1.0, 0.7, 1.3, 0.4]
    xs = ad.array(x0, requires_grad=True)
    out = ad.zeros((len(LOOP_NAMES), 4), requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.loops, 4, inputs=[n, xs], outputs=[out])
    # the user's func run by CPython, untouched by adjoint, is the forward reference
    ref = [getattr(m, name).pyfunc(n, v) for v in x0]
    np.testing.assert_allclose(out.numpy()[row], ref, rtol=1e-13)
    tape.backward(grads={out: w})

    def f(x):
        o = ad.zeros((len(LOOP_NAMES), 4))
        launch_forward(m.loops, 4, [n, ad.array(x)], [o])
        return float(np.sum(w * o.numpy()))
    np.testing.assert_allclose(xs.grad.numpy(), central_fd(f, x0), rtol=RTOL, atol=1e-6)


# -- §8: ternary gathers, component writes, atomics ----------------------------------

GATHER = '''
@ad.kernel
def gather(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    j = x.shape[0] - 1 - i
    c = i % 2 == 0
    v = x[i] if c else x[j]
    y[i] = v * v
'''


def test_s8_ternary_gather(backend, kernel_module):
    m = load(kernel_module, GATHER)
    n = 6                                   # threads 0/5, 1/4 and 2/3 read the same element
    x0 = np.array([0.5, -1.0, 1.5, 2.0, -0.3, 0.8])
    w = np.arange(1.0, n + 1.0)
    x = ad.array(x0, requires_grad=True)
    y = ad.zeros(n, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.gather, n, inputs=[x], outputs=[y])
    tape.backward(grads={y: w})
    src = [i if i % 2 == 0 else n - 1 - i for i in range(n)]
    expected = np.zeros(n)
    for i, s in enumerate(src):
        expected[s] += 2.0 * x0[s] * w[i]
    np.testing.assert_allclose(y.numpy(), x0[src] ** 2, rtol=1e-15)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-14)


ACCUMULATE = '''
@ad.kernel
def store_then_add(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i] * 2.0
    y[i] += math.sin(x[i])
    y[i] += x[i] * x[i]

@ad.kernel
def add_into(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] += 3.0 * x[i] * x[i]

@ad.kernel
def scatter_add(idx: ad.array(dtype=ad.int64), x: ad.array(dtype=float),
                hist: ad.array(dtype=float)):
    i = ad.tid()
    hist[idx[i]] += x[i] * x[i]
'''


def test_s8_store_then_accumulate_in_one_kernel(backend, kernel_module):
    m = load(kernel_module, ACCUMULATE)
    x0 = np.array([-1.0, 0.25, 2.0])
    w = np.array([1.0, -2.0, 0.5])
    x, y = ad.array(x0, requires_grad=True), ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.store_then_add, 3, inputs=[x], outputs=[y])
    np.testing.assert_allclose(y.numpy(), 2 * x0 + np.sin(x0) + x0 ** 2, rtol=1e-15)
    tape.backward(grads={y: w})
    np.testing.assert_allclose(x.grad.numpy(), w * (2 + np.cos(x0) + 2 * x0), rtol=1e-14)


def test_s8_store_later_accumulated_into_by_another_launch(backend, kernel_module):
    m = load(kernel_module, ACCUMULATE)
    x0 = np.array([-1.0, 0.25, 2.0])
    w = np.array([1.0, -2.0, 0.5])
    x, y = ad.array(x0, requires_grad=True), ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.store_then_add, 3, inputs=[x], outputs=[y])   # y = 2x + sin x + x^2
        ad.launch(m.add_into, 3, inputs=[x], outputs=[y])         # y += 3x^2
    np.testing.assert_allclose(y.numpy(), 2 * x0 + np.sin(x0) + 4 * x0 ** 2, rtol=1e-15)
    tape.backward(grads={y: w})
    np.testing.assert_allclose(x.grad.numpy(), w * (2 + np.cos(x0) + 8 * x0), rtol=1e-14)


def test_s8_add_into_a_prefilled_array(backend, kernel_module):
    m = load(kernel_module, ACCUMULATE)
    x0 = np.array([-1.0, 0.25, 2.0])
    x, y = ad.array(x0, requires_grad=True), ad.full(3, 10.0, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.add_into, 3, inputs=[x], outputs=[y])
    np.testing.assert_allclose(y.numpy(), 10.0 + 3 * x0 ** 2, rtol=1e-15)
    tape.backward(grads={y: np.ones(3)})
    np.testing.assert_allclose(x.grad.numpy(), 6 * x0, rtol=1e-14)


def test_s8_scatter_add_with_collisions(backend, kernel_module):
    m = load(kernel_module, ACCUMULATE)
    idx0 = np.array([0, 2, 0, 1, 2, 0], dtype=np.int64)
    x0 = np.array([0.5, -1.0, 1.5, 2.0, -0.3, 0.8])
    w = np.array([1.0, -2.0, 3.0])
    x, hist = ad.array(x0, requires_grad=True), ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.scatter_add, 6, inputs=[ad.array(idx0), x], outputs=[hist])
    np.testing.assert_allclose(hist.numpy(), np.bincount(idx0, x0 ** 2, 3), rtol=1e-15)
    tape.backward(grads={hist: w})
    np.testing.assert_allclose(x.grad.numpy(), 2 * x0 * w[idx0], rtol=1e-14)


ATOMICS = '''
@ad.kernel
def atomics(x: ad.array(dtype=float), s: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(s, 0, x[i] * x[i])
    ad.atomic_sub(s, 0, math.sin(x[i]))
'''


def test_s8_atomic_add_and_sub_into_a_scalar_accumulator(backend, kernel_module):
    m = load(kernel_module, ATOMICS)
    x0 = np.array([0.5, -1.0, 1.5, 2.0, -0.3])
    x, s = ad.array(x0, requires_grad=True), ad.zeros(1, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.atomics, 5, inputs=[x], outputs=[s])
    np.testing.assert_allclose(s.numpy(), [np.sum(x0 ** 2 - np.sin(x0))], rtol=1e-14)
    tape.backward(loss=s)
    np.testing.assert_allclose(x.grad.numpy(), 2 * x0 - np.cos(x0), rtol=1e-14)

    def f(xx):
        acc = ad.zeros(1)
        launch_forward(m.atomics, 5, [ad.array(xx)], [acc])
        return float(acc.numpy()[0])
    np.testing.assert_allclose(x.grad.numpy(), central_fd(f, x0), rtol=RTOL, atol=1e-7)
