"""Control flow, funcs, grids, dtypes and indexing: AD against central finite differences.

Every kernel here takes its inputs first and one output array last. ``check``
records one launch, seeds the output with random weights ``w`` and compares each
float input's gradient with the central difference of ``sum(w * out)`` taken
through forward launches. Where a closed form or a plain-Python reference is
cheap, the forward values are checked against it too, so a wrong forward cannot
hide behind a self-consistent gradient.
"""
import math

import numpy as np
import pytest
from tests.conftest import central_fd

import adjoint as ad
from adjoint.errors import TransformError


def _to_array(a, requires_grad):
    if isinstance(a, np.ndarray):
        return ad.array(a, requires_grad=requires_grad and a.dtype.kind == "f")
    return a


def forward(kernel, dim, inputs, out_shape, out_dtype=np.float64):
    ins = [_to_array(a, False) for a in inputs]
    out = ad.zeros(out_shape, dtype=out_dtype)
    ad.launch(kernel, dim, inputs=ins, outputs=[out], record_tape=False)
    return out.numpy().copy()


def check(kernel, dim, inputs, out_shape, ref=None, rtol=1e-5, atol=1e-6, seed=0,
          out_dtype=np.float64):
    """Forward vs ``ref(*inputs)`` (when given) and AD vs central FD for every float input.

    Returns the AD gradients (a list with ``None`` for non-float inputs)."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.5, 1.5, out_shape)
    ins = [_to_array(a, True) for a in inputs]
    out = ad.zeros(out_shape, dtype=out_dtype, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, dim, inputs=ins, outputs=[out])
    if ref is not None:
        np.testing.assert_allclose(out.numpy(), ref(*inputs), rtol=1e-12, atol=1e-12)
    tape.backward(grads={out: w.astype(out_dtype)})
    grads = []
    for k, a in enumerate(inputs):
        if not (isinstance(a, np.ndarray) and a.dtype.kind == "f"):
            grads.append(None)
            continue

        def f(xk, k=k):
            args = list(inputs)
            args[k] = xk
            return float(np.sum(w * forward(kernel, dim, args, out_shape)))
        fd = central_fd(f, a)
        got = ins[k].grad.numpy()
        np.testing.assert_allclose(got, fd, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {k}")
        grads.append(got.copy())
    return grads


# --------------------------------------------------------------------------- branches

BRANCHES = '''
@ad.kernel
def branches(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    if v < -1.0:
        y = v * v
    elif v < 0.0:
        if v < -0.5:
            y = math.sin(v)
        else:
            y = 3.0 * v
    elif v < 1.0:
        y = math.exp(v)
    else:
        y = v * v * v
    out[i] = y * v
'''


def _branches_ref(x):
    out = []
    for v in x:
        if v < -1.0:
            y = v * v
        elif v < 0.0:
            y = math.sin(v) if v < -0.5 else 3.0 * v
        elif v < 1.0:
            y = math.exp(v)
        else:
            y = v ** 3
        out.append(y * v)
    return np.array(out)


def test_if_elif_else_nested(backend, kernel_module):
    m = kernel_module(BRANCHES)
    x = np.array([-2.0, -1.3, -0.7, -0.2, 0.3, 0.8, 1.5, 2.5])
    check(m.branches, 8, [x], 8, ref=_branches_ref)


PARTIAL = '''
    @ad.kernel
    def partial(x: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        v = x[i]
        flag = 0
        {init}
        if v > 0.0:
            t = v * v
            flag = 1
        if flag == 1:
            y = t * 2.0
        else:
            y = -v
        out[i] = y + v
    '''


def test_variable_defined_in_some_branches_only(backend, kernel_module):
    """``t`` is assigned only when ``flag == 1``; no static rule sees that correlation, so
    the read is refused at its line (it used to read an invented 0.0 on other paths);
    assigned first, the kernel is differentiated."""
    bad = kernel_module(PARTIAL.format(init="pass"))
    with pytest.raises(TransformError, match=r"'t' may be used before it is assigned") as err:
        ad.launch(bad.partial, 4, inputs=[ad.zeros(4)], outputs=[ad.zeros(4)])
    assert err.value.source_line.strip() == "y = t * 2.0"
    m = kernel_module(PARTIAL.format(init="t = 0.0"))
    x = np.array([-1.5, -0.3, 0.4, 1.7])
    ref = lambda x: np.where(x > 0, 2 * x * x, -x) + x  # noqa: E731
    check(m.partial, 4, [x], 4, ref=ref)


def test_rebinding_in_branch_keeps_alias_gradient(backend, kernel_module):
    """reference case 1 (the project's list of other systems' failures), exact values."""
    m = kernel_module('''
        @ad.kernel
        def aliasing(a: ad.array(dtype=float), b: ad.array(dtype=float)):
            i = ad.tid()
            x = a[i]
            y = x
            if y > 0.0:
                y = x * x
            else:
                y = x * x * x
            b[i] = y
        ''')
    a = ad.array([-1.0, 2.0, 3.0], requires_grad=True)
    b = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.aliasing, 3, inputs=[a], outputs=[b])
    tape.backward(grads={b: np.ones(3)})
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 4.0, 6.0])


# --------------------------------------------------------------------------- for loops

RANGE_LOOP = '''
@ad.kernel
def ranged(a: int, b: int, s: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y = 0.5
    for k in range(a, b, s):
        y = math.sin(y * v) + 0.1 * float(k)
    out[i] = y
'''


def _ranged_ref(a, b, s, x):
    out = []
    for v in x:
        y = 0.5
        for k in range(a, b, s):
            y = math.sin(y * v) + 0.1 * k
        out.append(y)
    return np.array(out)


def test_range_with_runtime_bounds_and_step(backend, kernel_module):
    """One compiled kernel, many (start, stop, step): negative steps and zero-trip loops."""
    m = kernel_module(RANGE_LOOP)
    x = np.array([0.3, 0.9, 1.4, -0.6])
    for a, b, s in [(0, 4, 1), (1, 8, 3), (5, -2, -2), (3, 0, -1), (2, 2, 1), (4, 1, 1),
                    (0, 3, -1)]:
        grads = check(m.ranged, 4, [a, b, s, x], 4, ref=_ranged_ref)
        if len(range(a, b, s)) == 0:
            np.testing.assert_array_equal(grads[3], 0.0)
        else:
            assert np.all(grads[3] != 0.0)


def test_dynamic_loop_mult_reference_case(backend, kernel_module):
    """reference case 6 (the project's list of other systems' failures): x.grad == [4, 4, 4], not [32, 8, 2]."""
    m = kernel_module('''
        @ad.kernel
        def dynamic_loop_mult(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            prod = 1.0
            for k in range(n):
                prod = prod * x[i]
            out[i] = prod
        ''')
    x = ad.array([2.0, 2.0, 2.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.dynamic_loop_mult, 3, inputs=[2, x], outputs=[out])
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0, 4.0])
    check(m.dynamic_loop_mult, 3, [5, np.array([0.7, -1.2, 1.1])], 3,
          ref=lambda n, x: x ** n)


LOOP_BRANCH_ON_CARRIED = '''
@ad.kernel
def loop_branch(n: int, xs: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    x = xs[i]
    y = 0.0
    for k in range(n):
        if x > 1.0:
            y = y + x * x
        else:
            y = y + 2.0 * x
        x = x * 0.9
    out[i] = y
'''


def test_loop_branching_on_carried_value(backend, kernel_module):
    """reference case 6 (the project's list of other systems' failures): x = 1.5, n = 4 gives dy/dx = 8.992623..."""
    m = kernel_module(LOOP_BRANCH_ON_CARRIED)
    # closed form: iterations 0..2 have x*0.9^k > 1 (1.5, 1.35, 1.215), iteration 3 has 1.0935 > 1
    # so every term is (0.9^k x)^2, dy/dx = 2x * sum(0.81^k) -- unless a term falls below 1.
    x0, n = 1.5, 4
    expect = 0.0
    for k in range(n):
        xk = x0 * 0.9 ** k
        expect += 2 * xk * 0.9 ** k if xk > 1.0 else 2.0 * 0.9 ** k
    xs = ad.array([x0], requires_grad=True)
    out = ad.zeros(1, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.loop_branch, 1, inputs=[n, xs], outputs=[out])
    tape.backward(grads={out: np.ones(1)})
    assert abs(xs.grad.numpy()[0] - expect) < 1e-12
    assert abs(xs.grad.numpy()[0] - 8.992623) < 1e-6
    check(m.loop_branch, 3, [7, np.array([1.5, 0.4, 1.9])], 3)


def test_while_loop(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def whiles(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            v = x[i]
            y = 1.0
            k = 0
            while k < n:
                y = y * v + math.cos(y)
                k += 1
            z = 0.1
            while z < 5.0:
                z = z * (1.5 + v * v)
            out[i] = y + z
        ''')

    def ref(n, x):
        res = []
        for v in x:
            y = 1.0
            for _ in range(n):
                y = y * v + math.cos(y)
            z = 0.1
            while z < 5.0:
                z = z * (1.5 + v * v)
            res.append(y + z)
        return np.array(res)
    check(m.whiles, 4, [3, np.array([0.3, 0.8, -0.45, 1.3])], 4, ref=ref)
    check(m.whiles, 2, [0, np.array([0.2, 0.7])], 2, ref=ref)


def test_break_and_continue(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def brk(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            v = x[i]
            y = 1.0
            for k in range(n):
                if k % 3 == 1:
                    continue
                y = y * v + 0.25
                if y > 4.0:
                    break
            s = 0.0
            k = 0
            while True:
                k += 1
                if k > n:
                    break
                if k % 2 == 0:
                    continue
                s = s + math.sin(v * float(k))
            out[i] = y + s
        ''')

    def ref(n, x):
        res = []
        for v in x:
            y = 1.0
            for k in range(n):
                if k % 3 == 1:
                    continue
                y = y * v + 0.25
                if y > 4.0:
                    break
            s = sum(math.sin(v * k) for k in range(1, n + 1, 2))
            res.append(y + s)
        return np.array(res)
    x = np.array([0.5, 1.1, 1.6, 2.3])
    check(m.brk, 4, [9, x], 4, ref=ref)


def test_nested_loops_inner_trip_depends_on_outer(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def nested(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            v = x[i]
            y = 0.3
            for k in range(n):
                for j in range(k, 0, -1):
                    y = y * v + 0.1 * float(j)
                y = math.tanh(y) + v
            out[i] = y
        ''')

    def ref(n, x):
        res = []
        for v in x:
            y = 0.3
            for k in range(n):
                for j in range(k, 0, -1):
                    y = y * v + 0.1 * j
                y = math.tanh(y) + v
            res.append(y)
        return np.array(res)
    check(m.nested, 3, [5, np.array([0.4, -0.7, 0.95])], 3, ref=ref)


def test_several_carried_values_and_swaps(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def carried(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            v = x[i]
            a = v
            b = 1.0
            c = 0.0
            for k in range(n):
                a, b = b, a
                c = c + a * b
                a = a * v
                b = b + c * 0.1
            out[i] = a + 2.0 * b + 3.0 * c
        ''')

    def ref(n, x):
        res = []
        for v in x:
            a, b, c = v, 1.0, 0.0
            for _ in range(n):
                a, b = b, a
                c = c + a * b
                a = a * v
                b = b + c * 0.1
            res.append(a + 2 * b + 3 * c)
        return np.array(res)
    check(m.carried, 3, [6, np.array([0.6, -0.9, 1.2])], 3, ref=ref)


def test_fibonacci_tuple_assignment(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def fib(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            a = 1.0
            b = x[i]
            for k in range(n):
                a, b = b, a + b
            out[i] = b
        ''')
    # b_n = F(n-1) + F(n) x, linear in x: gradient is the Fibonacci number F(n+1)
    n = 7
    fibs = [0, 1]
    while len(fibs) < n + 3:
        fibs.append(fibs[-1] + fibs[-2])
    grads = check(m.fib, 2, [n, np.array([0.5, 2.0])], 2)
    w = np.random.default_rng(0).uniform(0.5, 1.5, 2)
    np.testing.assert_allclose(grads[1], w * fibs[n + 1], rtol=1e-14)


# --------------------------------------------------------------------------- expressions

def test_ternary_chained_comparison_and_augmented_assignment(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def exprs(x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            v = x[i]
            y = v * v if v > 0.5 else 2.0 * v
            if 0.0 < v < 1.0:
                y = y + math.sin(v)
            s = v
            s += y
            s *= v
            s -= 0.5 * v
            s /= 1.0 + v * v
            s **= 2.0
            out[i] = s
        ''')

    def ref(x):
        res = []
        for v in x:
            y = v * v if v > 0.5 else 2.0 * v
            if 0.0 < v < 1.0:
                y = y + math.sin(v)
            s = v
            s += y
            s *= v
            s -= 0.5 * v
            s /= 1.0 + v * v
            s **= 2.0
            res.append(s)
        return np.array(res)
    check(m.exprs, 6, [np.array([-0.8, 0.2, 0.45, 0.7, 1.3, 2.1])], 6, ref=ref)


def test_ternary_choosing_between_array_elements(backend, kernel_module):
    """reference case 8 (the project's list of other systems' failures): y = x[i] if c else x[j]."""
    m = kernel_module('''
        @ad.kernel
        def pick(c: ad.array(dtype=ad.int32), x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            j = x.shape[0] - 1 - i
            y = x[i] if c[i] > 0 else x[j]
            out[i] = y * y
        ''')
    c = np.array([1, 0, 1, 0, 0], dtype=np.int32)
    x = np.array([0.5, -1.0, 2.0, 1.5, 3.0])
    ref = lambda c, x: np.where(c > 0, x, x[::-1]) ** 2  # noqa: E731
    check(m.pick, 5, [c, x], 5, ref=ref)


def test_short_circuit_guards_out_of_bounds_reads(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def guarded(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            y = 0.0
            if i < n and x[i] > 0.0:
                y = x[i] * x[i]
            if i >= n or x[i] < -1.0:
                y = y + 1.0
            if not (i < n):
                y = y + 2.0
            out[i] = y
        ''')
    x = np.array([0.5, -2.0, 1.5, -0.3])
    # the grid is larger than x: threads 4..6 must never read x
    ref = lambda n, x: np.array([0.25, 1.0, 2.25, 0.0, 3.0, 3.0, 3.0])  # noqa: E731
    check(m.guarded, 7, [4, x], 7, ref=ref)


def test_global_numeric_constants(backend, kernel_module):
    m = kernel_module('''
        SCALE = 2.5
        STEPS = 3

        @ad.kernel
        def consts(x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            y = x[i]
            for k in range(STEPS):
                y = y * SCALE + math.pi
            out[i] = y
        ''')

    def ref(x):
        y = x.copy()
        for _ in range(3):
            y = y * 2.5 + math.pi
        return y
    grads = check(m.consts, 3, [np.array([0.1, -1.0, 2.0])], 3, ref=ref)
    w = np.random.default_rng(0).uniform(0.5, 1.5, 3)
    np.testing.assert_allclose(grads[0], w * 2.5 ** 3, rtol=1e-14)


# --------------------------------------------------------------------------- funcs

FUNCS = '''
@ad.func
def sq(x: float) -> float:
    return x * x


@ad.func
def poly(x: float, y: float) -> float:
    return sq(x) * y + sq(y)


@ad.func
def polar(x: float, y: float):
    r = math.sqrt(x * x + y * y)
    t = math.atan2(y, x)
    return r, t


@ad.func
def first_above(x: float, n: int, lim: float) -> float:
    y = x
    for k in range(n):
        y = y * 1.5 + x
        if y > lim:
            return y * 2.0
    return y


@ad.func
def sign_sqrt(x: float) -> float:
    if x < 0.0:
        return -math.sqrt(-x)
    return math.sqrt(x)


@ad.kernel
def use_funcs(n: int, x: ad.array(dtype=float), y: ad.array(dtype=float),
              out: ad.array(dtype=float)):
    i = ad.tid()
    a = x[i]
    b = y[i]
    r, t = polar(a, b)
    s = 0.0
    for k in range(n):
        s = s + poly(a, b * float(k)) + sign_sqrt(a - float(k))
    out[i] = r * t + s + first_above(a, n, 3.0)
'''


def _funcs_ref(n, x, y):
    def first_above(x, n, lim):
        v = x
        for _ in range(n):
            v = v * 1.5 + x
            if v > lim:
                return v * 2.0
        return v

    def sign_sqrt(v):
        return -math.sqrt(-v) if v < 0 else math.sqrt(v)
    res = []
    for a, b in zip(x, y):
        r, t = math.hypot(a, b), math.atan2(b, a)
        s = 0.0
        for k in range(n):
            s += a * a * b * k + (b * k) ** 2 + sign_sqrt(a - k)
        res.append(r * t + s + first_above(a, n, 3.0))
    return np.array(res)


def test_funcs_nested_calls_tuples_early_return_in_loop(backend, kernel_module):
    m = kernel_module(FUNCS)
    x = np.array([0.45, 1.1, -0.7, 2.2])
    y = np.array([0.8, -0.3, 1.1, 0.6])
    check(m.use_funcs, 4, [4, x, y], 4, ref=_funcs_ref)


def test_funcs_callable_from_plain_python(kernel_module):
    m = kernel_module(FUNCS)
    assert m.sq(3.0) == 9.0
    assert m.poly(2.0, 3.0) == 4.0 * 3.0 + 9.0
    r, t = m.polar(3.0, 4.0)
    assert r == 5.0 and t == math.atan2(4.0, 3.0)
    assert m.first_above(1.0, 10, 3.0) == 2.0 * 4.75   # 1 -> 2.5 -> 4.75 > 3
    assert m.first_above(0.1, 2, 3.0) == (0.1 * 1.5 + 0.1) * 1.5 + 0.1
    assert m.sign_sqrt(-4.0) == -2.0


@pytest.mark.parametrize("adj_name", [
    "g",
    "adj_ret",
])
def test_func_grad_hand_written_adjoint_is_used(backend, kernel_module, adj_name):
    """DESIGN.md: ``def g(<f's params>, adj_ret)``; each rule here is twice the truth."""
    m = kernel_module('''
        @ad.func
        def cube(x: float) -> float:
            return x * x * x


        @ad.func_grad(cube)
        def cube_grad(x: float, ADJ: float):
            return 2.0 * (3.0 * x * x * ADJ)   # deliberately twice the true adjoint


        @ad.func
        def mix(a: float, b: float) -> float:
            return a * b + a


        @ad.func_grad(mix)
        def mix_grad(a: float, b: float, ADJ: float):
            return 2.0 * ADJ * (b + 1.0), 2.0 * ADJ * a


        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = cube(x[i]) + mix(x[i], y[i])
        '''.replace("ADJ", adj_name))
    xs = np.array([0.5, -1.0, 2.0])
    ys = np.array([1.5, 0.25, -3.0])
    x = ad.array(xs, requires_grad=True)
    y = ad.array(ys, requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.k, 3, inputs=[x, y], outputs=[out])
    np.testing.assert_allclose(out.numpy(), xs ** 3 + xs * ys + xs, rtol=1e-14)
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * (3 * xs ** 2 + ys + 1.0), rtol=1e-14)
    np.testing.assert_allclose(y.grad.numpy(), 2.0 * xs, rtol=1e-14)


def test_alias_inside_func(backend, kernel_module):
    """reference case 1 (the project's list of other systems' failures) inside an @ad.func."""
    m = kernel_module('''
        @ad.func
        def branchy(x: float) -> float:
            y = x
            if y > 0.0:
                y = x * x
            else:
                y = x * x * x
            return y + x


        @ad.kernel
        def k(a: ad.array(dtype=float), b: ad.array(dtype=float)):
            i = ad.tid()
            b[i] = branchy(a[i])
        ''')
    a = ad.array([-1.0, 2.0, 3.0], requires_grad=True)
    b = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.k, 3, inputs=[a], outputs=[b])
    tape.backward(grads={b: np.ones(3)})
    np.testing.assert_array_equal(a.grad.numpy(), [4.0, 5.0, 7.0])


# --------------------------------------------------------------------------- grids, dtypes

def test_2d_grid_and_shape(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def grid2(x: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
            i, j = ad.tid()
            jn = (j + 1) % x.shape[1]
            out[i, j] = x[i, j] * x[i, jn] + math.sin(x[i, j]) * float(x.shape[0])
        ''')
    x = np.random.default_rng(1).uniform(-1, 1, (3, 4))
    ref = lambda x: x * np.roll(x, -1, axis=1) + np.sin(x) * 3.0  # noqa: E731
    check(m.grid2, (3, 4), [x], (3, 4), ref=ref)


def test_3d_grid(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def grid3(x: ad.array(dtype=float, ndim=3), w: ad.array(dtype=float),
                  out: ad.array(dtype=float, ndim=3)):
            i, j, k = ad.tid()
            out[i, j, k] = x[i, j, k] * x[i, j, k] * w[k] + float(i + 2 * j)
        ''')
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (2, 3, 2))
    w = rng.uniform(-1, 1, 2)
    i, j = np.meshgrid(np.arange(2), np.arange(3), indexing="ij")
    ref = lambda x, w: x * x * w + (i + 2 * j)[:, :, None]  # noqa: E731
    check(m.grid3, (2, 3, 2), [x, w], (2, 3, 2), ref=ref)


def test_float32_arrays(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def f32(x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
            i = ad.tid()
            v = x[i]
            out[i] = math.sin(v) * v + v * v
        ''')
    xs = np.array([0.5, -1.0, 2.0, 0.1], dtype=np.float32)
    x = ad.array(xs, requires_grad=True)
    out = ad.zeros(4, dtype=ad.float32, requires_grad=True)
    assert x.dtype == np.float32 and out.grad.dtype == np.float32
    tape = ad.Tape()
    with tape:
        ad.launch(m.f32, 4, inputs=[x], outputs=[out])
    x64 = xs.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), np.sin(x64) * x64 + x64 * x64, rtol=1e-5)
    tape.backward(grads={out: np.ones(4, dtype=np.float32)})
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x64) * x64 + np.sin(x64) + 2 * x64,
                               rtol=1e-5, atol=1e-6)


def test_gather_scatter_with_collisions(backend, kernel_module):
    """Scatter through an int32 index array, gather through an int64 one; indices collide."""
    m = kernel_module('''
        @ad.kernel
        def scatter(idx: ad.array(dtype=ad.int32), x: ad.array(dtype=float),
                    out: ad.array(dtype=float)):
            i = ad.tid()
            v = x[i]
            out[idx[i]] += v * v
            ad.atomic_add(out, idx[i], math.sin(v))
            ad.atomic_sub(out, idx[i], 0.5 * v)


        @ad.kernel
        def gather(idx: ad.array(dtype=ad.int64), x: ad.array(dtype=float),
                   out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = x[idx[i]] * x[idx[i]] + x[i]
        ''')
    idx = np.array([2, 0, 2, 1, 2, 0])
    x = np.array([0.3, -0.8, 1.1, 0.5, -1.4, 2.0])

    def scatter_ref(idx, x):
        out = np.zeros(3)
        np.add.at(out, idx, x * x + np.sin(x) - 0.5 * x)
        return out
    check(m.scatter, 6, [idx.astype(np.int32), x], 3, ref=scatter_ref)
    check(m.gather, 6, [idx.astype(np.int64), x], 6, ref=lambda idx, x: x[idx] ** 2 + x)


def test_scalar_accumulator_atomics(backend, kernel_module):
    """reference case 8 (the project's list of other systems' failures): atomics into one accumulator, then a store read later."""
    m = kernel_module('''
        @ad.kernel
        def acc(x: ad.array(dtype=float), s: ad.array(dtype=float)):
            i = ad.tid()
            ad.atomic_add(s, 0, x[i] * x[i])
            ad.atomic_sub(s, 0, math.exp(x[i]))
        ''')
    x = np.array([0.2, -0.5, 1.0, 0.7])
    check(m.acc, 4, [x], 1, ref=lambda x: np.array([np.sum(x * x - np.exp(x))]))
