"""ad.grad, ad.value_and_grad, ad.jvp, ad.hessian for funcs; ad.autograd.hvp for kernels.

Every derivative is checked against central finite differences in float64: first
derivatives of the func itself, second derivatives against differences of the
(already checked) first derivatives, and Hessian-vector products of kernels
against differences of the kernel's gradient (rtol 1e-6).
"""
import importlib.util
import math
import sys

import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import AdjointError

EPS = 1e-6

FUNCS = '''
@ad.func
def branches(x, y):
    if x > 0.5:
        z = x * y
    elif x > 0.0:
        z = math.sin(x) + y
    else:
        z = y * y - x
    return z * x

@ad.func
def loop(x, y):
    s = 0.0
    for k in range(4):
        s = s * x + math.exp(-y * k)
    return s

@ad.func
def while_break(x, y):
    s = x
    n = 0
    while n < 20:
        s = s * 1.3 + y * 0.1
        n += 1
        if s > 3.0:
            break
    return s * y

@ad.func
def continue_(x, y):
    s = 0.0
    for k in range(5):
        if k % 2 == 1:
            continue
        s = s + x ** (k + 1) / (1.0 + y * y)
    return s

@ad.func
def early_return(x, y):
    if x * y > 0.3:
        return math.log(x + 2.0) * y
    t = x - y
    return t * t * t

@ad.func
def polar(r, t):
    return r * math.cos(t), r * math.sin(t)

@ad.func
def calls(x, y):
    a, b = polar(x, y)
    return a * b + math.atan2(b, a + 2.0)

@ad.func
def piecewise(x, y):
    return ad.clamp(x * y, -1.0, 0.8) * abs(x - 0.1) + min(x, y) * max(x * x, y)

@ad.func
def with_int(x, n: int, y):
    s = x
    for k in range(n):
        s = s * y + x
    return s

@ad.func
def one(x):
    return x * x * math.exp(x) + math.sqrt(x + 1.0)
'''

POINTS = {"branches": [(0.7, 1.3), (0.3, -0.4), (-0.6, 0.9)],
          "loop": [(0.7, 0.4), (-0.5, 1.1)],
          "while_break": [(0.4, 0.8), (2.9, 0.2)],
          "continue_": [(0.6, 0.9), (1.2, -0.3)],
          "early_return": [(0.9, 0.8), (0.2, 0.5)],
          "calls": [(0.9, 0.6), (1.4, -0.8)],
          "piecewise": [(0.7, 0.6), (-0.4, 1.3)]}


@pytest.fixture(params=["python", "numba"])
def cpu(request):
    """Funcs called from plain Python run on the CPU backends."""
    with ad.backend_scope(request.param):
        yield request.param


@pytest.fixture(scope="module")
def funcs(tmp_path_factory):
    return _module(tmp_path_factory, "derivative_funcs", FUNCS)


def _module(tmp_path_factory, name, source):
    """A module of kernels/funcs written to a real file (adjoint reads their source)."""
    path = tmp_path_factory.mktemp(name) / f"{name}.py"
    path.write_text("import math\nimport adjoint as ad\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def fd(f, args, k, eps=EPS):
    a, b = list(args), list(args)
    a[k] += eps
    b[k] -= eps
    return (f(*a) - f(*b)) / (2 * eps)


@pytest.mark.parametrize("name", sorted(POINTS))
def test_grad_value_and_grad_and_jvp_match_finite_differences(cpu, funcs, name):
    f = getattr(funcs, name)
    for point in POINTS[name]:
        g = ad.grad(f, (0, 1))(*point)
        want = [fd(f, point, k) for k in range(2)]
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)
        assert ad.grad(f)(*point) == g[0]
        value, g1 = ad.value_and_grad(f, 1)(*point)
        assert value == pytest.approx(f(*point), rel=1e-14) and g1 == g[1]
        value, tangent = ad.jvp(f, point, (0.3, -1.7))
        assert value == pytest.approx(f(*point), rel=1e-14)
        assert tangent == pytest.approx(0.3 * want[0] - 1.7 * want[1], rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("name", sorted(POINTS))
def test_hessian_matches_differences_of_the_gradient(cpu, funcs, name):
    f = getattr(funcs, name)
    for point in POINTS[name]:
        h = np.array(ad.hessian(f, (0, 1))(*point))             # forward over reverse
        g = ad.grad(f, (0, 1))
        want = np.array([fd(lambda *a: g(*a)[i], point, j, 1e-5) for i in range(2)
                         for j in range(2)]).reshape(2, 2)
        np.testing.assert_allclose(h, want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)
        # reverse over forward: the same Hessian by the other order
        np.testing.assert_allclose(ad.hessian(f, (0, 1), mode="rev-fwd")(*point), h,
                                   rtol=1e-12, atol=1e-12)


def test_grad_of_grad_of_a_scalar_func(cpu, funcs):
    f = funcs.one
    x = 0.7
    d1 = 2 * x * math.exp(x) + x * x * math.exp(x) + 0.5 / math.sqrt(x + 1.0)
    d2 = (2 + 4 * x + x * x) * math.exp(x) - 0.25 * (x + 1.0) ** -1.5
    d3 = (6 + 6 * x + x * x) * math.exp(x) + 0.375 * (x + 1.0) ** -2.5
    assert ad.grad(f)(x) == pytest.approx(d1, rel=1e-13)
    assert ad.grad(ad.grad(f))(x) == pytest.approx(d2, rel=1e-13)
    assert ad.grad(ad.grad(ad.grad(f)))(x) == pytest.approx(d3, rel=1e-12)
    assert ad.hessian(f)(x) == pytest.approx(d2, rel=1e-13)
    # second derivatives through loops and branches, against differences of the first
    g = ad.grad(funcs.loop)
    assert ad.grad(g)(0.7, 0.4) == pytest.approx(fd(g, (0.7, 0.4), 0, 1e-5), rel=1e-6)
    assert ad.grad(g, 1)(0.7, 0.4) == pytest.approx(fd(g, (0.7, 0.4), 1, 1e-5), rel=1e-6)


def test_int_parameters_and_errors(cpu, funcs):
    f = funcs.with_int
    assert ad.grad(f, (0, 2))(0.5, 3, 1.2) == pytest.approx(
        (fd(lambda x: f(x, 3, 1.2), [0.5], 0), fd(lambda y: f(0.5, 3, y), [1.2], 0)), rel=1e-6)
    value, tangent = ad.jvp(f, (0.5, 3, 1.2), (1.0, 0.0, 0.0))
    assert tangent == pytest.approx(fd(lambda x: f(x, 3, 1.2), [0.5], 0), rel=1e-6)
    with pytest.raises(ValueError, match="'n' of func 'with_int' is not a float"):
        ad.grad(f, 1)
    with pytest.raises(ValueError, match="not a parameter position"):
        ad.grad(f, 5)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        ad.grad(f)(0.5, 1.2)
    with pytest.raises(AdjointError, match="returning one float; 'polar' returns 2"):
        ad.grad(funcs.polar)(1.0, 0.5)
    with pytest.raises(AdjointError, match="single argnums"):
        ad.grad(ad.grad(funcs.loop, (0, 1)))
    assert ad.jvp(f)((0.5, 3, 1.2), (1.0, 0.0, 0.0)) == (value, tangent)
    with pytest.raises(TypeError, match=r"ad.jvp\(f\) of func 'with_int' takes two tuples, "
                                        r"the primals and the tangents .* got 6 arguments"):
        ad.jvp(f)(0.5, 3, 1.2, 1.0, 0.0, 0.0)
    with pytest.raises(TypeError, match="ad.jvp of func 'with_int': give the tangents too"):
        ad.jvp(f, (0.5, 3, 1.2))
    (a, b), (da, db) = ad.jvp(funcs.polar, (2.0, 0.5), (0.0, 1.0))
    assert (a, b) == pytest.approx((2 * math.cos(0.5), 2 * math.sin(0.5)), rel=1e-15)
    assert (da, db) == pytest.approx((-2 * math.sin(0.5), 2 * math.cos(0.5)), rel=1e-15)


def test_source_of_a_gradient_is_the_generated_adjoint(funcs):
    text = ad.source(ad.grad(funcs.one))
    assert text.startswith("def one_adjoint(x, adj_ret):")
    assert "adj_x" in text


def test_custom_gradient_has_no_forward_mode(kernel_module):
    m = kernel_module('''
        @ad.func
        def soft(x):
            return math.log(1.0 + math.exp(x))

        @ad.func_grad(soft)
        def soft_grad(x, adj_ret):
            return adj_ret / (1.0 + math.exp(-x))
    ''')
    assert ad.grad(m.soft)(0.3) == pytest.approx(1 / (1 + math.exp(-0.3)), rel=1e-15)
    with pytest.raises(AdjointError, match="custom gradient"):
        ad.jvp(m.soft, (0.3,), (1.0,))
    with pytest.raises(AdjointError, match="custom gradient"):
        ad.grad(ad.grad(m.soft))(0.3)


KERNELS = '''
@ad.kernel
def k_loop(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    s = x[i]
    for j in range(3):
        if s > 0.5:
            s = s * x[i] - 0.1 * j
        else:
            s = math.sin(s) + x[i] * x[i]
    y[i] = s

@ad.kernel
def k_while(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    s = x[i]
    n = 0
    while n < 10:
        s = s * 1.1 + x[i] * x[i] * 0.05
        n += 1
        if s > 2.0:
            break
    y[i] = s * s

@ad.kernel
def k_pairs(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    j = (i + 1) % x.shape[0]
    ad.atomic_add(y, j, x[i] * x[j] * math.exp(-x[i]))
    ad.atomic_add(y, i, x[j] / (1.0 + x[i] * x[i]))

@ad.func
def polar(r, t):
    return r * math.cos(t), r * math.sin(t)

@ad.kernel
def k_func(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    acc = 0.0
    for j in range(4):
        if j == 2:
            continue
        a, b = polar(x[i], x[i] * j)
        acc = acc + a * b
    y[i] = acc

@ad.func
def power_sum(a, n: int):
    s = 0.0
    p = a
    for k in range(n):
        s = s + p / (k + 1.0)
        p = p * a
    return s

@ad.kernel
def k_func_loop(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = power_sum(x[i], 4) * x[(i + 1) % x.shape[0]]

@ad.kernel
def k_nested(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    t = 0.0
    for a in range(2):
        for b in range(3):
            t = t + ad.clamp(x[i] * b - a, -0.5, 1.5) * abs(x[i] - 0.1) + max(x[i], t * 0.1)
    y[i] = t * x[i]
'''


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return _module(tmp_path_factory, "hvp_kernels", KERNELS)


@pytest.mark.parametrize("name", ["k_loop", "k_while", "k_pairs", "k_func", "k_func_loop",
                                  "k_nested"])
def test_kernel_hessian_vector_products_match_differences_of_the_gradient(backend, kernels,
                                                                          name):
    k = getattr(kernels, name)
    n = 6
    m = n
    rng = np.random.default_rng(7)
    x = rng.uniform(0.25, 1.2, n)
    v = rng.normal(size=n)
    w = rng.uniform(0.5, 1.5, m)
    device = "cuda" if backend == "cuda" else "cpu"

    def gradient(xs):
        xa = ad.array(xs, requires_grad=True, device=device)
        y = ad.zeros(m, requires_grad=True, device=device)
        tape = ad.Tape()
        with tape:
            ad.launch(k, n, inputs=[xa], outputs=[y])
        tape.backward(grads={y: ad.array(w, device=device)})
        return xa.grad.numpy().copy()

    def hvp(mode):
        return ad.autograd.hvp(k, n, [ad.array(x, device=device)], [ad.zeros(m, device=device)],
                               [v], [w], mode=mode)[0]
    hv = hvp("fwd-rev")                     # forward over reverse (the default)
    want = (gradient(x + 1e-5 * v) - gradient(x - 1e-5 * v)) / 2e-5
    np.testing.assert_allclose(hv, want, rtol=1e-6, atol=1e-8)
    assert np.abs(hv).max() > 1e-3          # a real second derivative, not zeros
    np.testing.assert_allclose(hvp("rev-fwd"), hv, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", ["k_loop", "k_func"])
def test_printed_backward_is_a_kernel_giving_the_same_gradient(backend, kernels, name):
    """The backward printed as user code (``adjoint show --stage backward_user``) is valid
    input again: transformed and launched, it gives the backward's own numbers."""
    from adjoint.printed import vjp_kernel
    k = getattr(kernels, name)
    text = ad.source(k, "backward_user")
    assert text.startswith(f"def {name}_vjp(") and "ad.tid()" in text
    assert text == ad.source(k, "backward_user")         # byte-identical
    kb = vjp_kernel(k)
    assert kb.pyfunc.__code__.co_filename == f"<adjoint generated {name}_vjp>"
    n, device = 6, "cuda" if backend == "cuda" else "cpu"
    x = np.linspace(0.3, 1.1, n)
    w = np.linspace(1.5, 0.5, n)
    xa = ad.array(x, requires_grad=True, device=device)
    y = ad.zeros(n, requires_grad=True, device=device)
    tape = ad.Tape()
    with tape:
        ad.launch(k, n, inputs=[xa], outputs=[y])
    tape.backward(grads={y: ad.array(w, device=device)})
    adj_x, adj_y = ad.zeros(n, device=device), ad.array(w, device=device)
    ad.launch(kb, n, inputs=[ad.array(x, device=device), y, adj_x, adj_y], record_tape=False)
    np.testing.assert_allclose(adj_x.numpy(), xa.grad.numpy(), rtol=1e-14, atol=0)
    assert not adj_y.numpy().any()          # a store's adjoint is handed back and cleared


def test_loop_stacks_are_refused_in_user_code(kernel_module):
    m = kernel_module('''
        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            s = ad.stack_float(4, x[i])
            y[i] = ad.stack_read(s, 0)
    ''')
    with pytest.raises(ad.TransformError, match=r"\.py:9:\d+: ad.stack_float is a loop stack "
                       r"of a backward printed by adjoint .* in 'k'"):
        m.k.transformed


def test_printed_backward_holds_loop_stacks_and_has_no_reverse(kernels):
    from adjoint.printed import vjp_func, vjp_kernel
    text = ad.source(kernels.k_loop, "backward_user")
    assert "= ad.stack_float(3, " in text and "ad.stack_push(" in text and \
        "ad.stack_read(" in text
    kb = vjp_kernel(kernels.k_loop)
    with pytest.raises(ValueError, match="has no backward"):
        ad.source(kb, "backward")
    with pytest.raises(ValueError, match="has no backward"):
        ad.source(kb, "backward_user")
    # a func's backward returns its parameters' adjoints, a func of its own
    polar_vjp = vjp_func(kernels.polar)
    assert ad.source(kernels.polar, "backward_user").startswith(
        "def polar_vjp(r: ad.float64, t: ad.float64, adj_ret0: ad.float64, adj_ret1: ad.float64)")
    r, t = 1.3, 0.4
    assert polar_vjp(r, t, 1.0, 0.0) == pytest.approx((math.cos(t), -r * math.sin(t)), rel=1e-15)


def test_custom_jvp_is_used_by_kernels_funcs_and_second_derivatives(backend, kernel_module):
    m = kernel_module('''
        @ad.func
        def soft(x):
            return math.log(1.0 + math.exp(x))

        @ad.func_grad(soft)
        def soft_grad(x, adj_ret):
            return adj_ret / (1.0 + math.exp(-x))

        @ad.func_jvp(soft)
        def soft_jvp(x, dot_x):
            return math.log(1.0 + math.exp(x)), dot_x / (1.0 + math.exp(-x))

        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = soft(x[i]) * x[i]
    ''')
    sig = lambda t: 1 / (1 + math.exp(-t))          # noqa: E731
    x = np.array([-0.5, 0.2, 1.1])
    dev = "cuda" if backend == "cuda" else "cpu"
    out = ad.launch(m.k, 3, inputs=[ad.array(x, device=dev)], outputs=[ad.zeros(3, device=dev)],
                    tangents={"x": ad.array(np.ones(3), device=dev)})
    want = [math.log(1 + math.exp(t)) + t * sig(t) for t in x]
    np.testing.assert_allclose(out["y"].numpy(), want, rtol=1e-14)
    if backend != "cuda":
        assert ad.jvp(m.soft, (0.3,), (2.0,))[1] == pytest.approx(2 * sig(0.3), rel=1e-15)
        assert ad.grad(ad.grad(m.soft))(0.3) == pytest.approx(sig(0.3) * (1 - sig(0.3)),
                                                              rel=1e-14)


def test_arrays_are_refused_by_name_and_late_rules_count(kernel_module):
    m = kernel_module('''
        @ad.func
        def g(x: float) -> float:
            return math.log(1.0 + math.exp(x))
    ''')
    with pytest.raises(TypeError, match=r"func 'g' \(.*\.py:\d+\): parameter 'x' takes a number"):
        ad.grad(m.g)(np.array([1.0, 2.0]))
    assert ad.jvp(m.g, (0.3,), (1.0,))[1] == pytest.approx(1 / (1 + math.exp(-0.3)), rel=1e-14)

    @ad.func_jvp(m.g)
    def g_jvp(x, dot_x):
        return math.log(1.0 + math.exp(x)), 2.0 * dot_x     # deliberately not the derivative
    assert ad.jvp(m.g, (0.3,), (1.0,))[1] == 2.0            # the rule given later is used


VECTOR_FUNCS = '''
@ad.func
def spin(p: ad.vec3, s: float) -> ad.vec3:
    q = p * s
    return ad.cross(q, p) + p


@ad.func
def size2(p: ad.vec3) -> float:
    return ad.dot(p, p) * p.x


@ad.kernel
def k_vec(xs: ad.array(dtype=ad.vec3), out: ad.array(dtype=float)):
    i = ad.tid()
    v = spin(xs[i], 0.5)
    out[i] = ad.dot(v, v) + size2(v)


@ad.func
def energy(a: float, b: float) -> float:
    v = spin(ad.vec3(a, b, a * b), 0.5)
    return size2(v)
'''


@pytest.fixture(scope="module")
def vector_funcs(tmp_path_factory):
    return _module(tmp_path_factory, "hvp_vector_funcs", VECTOR_FUNCS)


def test_second_derivatives_through_funcs_of_vectors(backend, vector_funcs):
    """Printed code is printed after pass scalarize: it calls a func of vectors with their
    components (``f_x, f_y, f_z = spin(p_x, p_y, p_z, s)``), which the func itself refused
    ("expected a vec3 here"), so no Hessian went through one (found by the fuzzer's
    Hessian-vector products). The printed code now calls the func's forward with its
    vectors split (printed.scalar_func)."""
    m = vector_funcs
    n = 5
    rng = np.random.default_rng(9)
    x, v = rng.uniform(-1.0, 1.0, (n, 3)), rng.normal(size=(n, 3))
    w = rng.uniform(0.5, 1.5, n)
    device = "cuda" if backend == "cuda" else "cpu"

    def gradient(xs):
        xa = ad.array(xs, dtype=ad.vec3, requires_grad=True, device=device)
        y = ad.zeros(n, requires_grad=True, device=device)
        tape = ad.Tape()
        with tape:
            ad.launch(m.k_vec, n, inputs=[xa], outputs=[y])
        tape.backward(grads={y: ad.array(w, device=device)})
        return xa.grad.numpy().copy()
    want = (gradient(x + 1e-5 * v) - gradient(x - 1e-5 * v)) / 2e-5
    for mode in ("fwd-rev", "rev-fwd"):
        hv = ad.autograd.hvp(m.k_vec, n, [ad.array(x, dtype=ad.vec3, device=device)],
                             [ad.zeros(n, device=device)], [v], [w], mode=mode)[0]
        np.testing.assert_allclose(np.asarray(hv).reshape(n, 3), want, rtol=1e-6, atol=1e-8)
    if backend == "cuda":
        return
    a, b = 0.3, -0.7
    g = ad.grad(m.energy, argnums=(0, 1))
    for mode in ("fwd-rev", "rev-fwd"):
        hess = np.array(ad.hessian(m.energy, argnums=(0, 1), mode=mode)(a, b))
        cols = [(np.array(g(a + 1e-5, b)) - np.array(g(a - 1e-5, b))) / 2e-5,
                (np.array(g(a, b + 1e-5)) - np.array(g(a, b - 1e-5))) / 2e-5]
        np.testing.assert_allclose(hess, np.array(cols).T, rtol=1e-6, atol=1e-8)
    assert np.abs(want).max() > 1e-2


def test_a_2d_kernel_whose_backward_has_nothing_to_do_prints_as_2d(backend, kernel_module):
    """Its printed backward was ``pass``: with no ``ad.tid()`` in it, the printed kernel
    read as 1-D, and ``hvp`` (which launches it on the kernel's grid) raised a LaunchError
    (found by the fuzzer's HVP check, seed 1000084). It now unpacks the thread index."""
    m = kernel_module('''
@ad.kernel
def counts(x: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    t = x[i, j] * 2.0
    out[i, j] += 1.0
''')
    assert "= ad.tid()" in ad.source(m.counts, stage="backward_user")
    device = "cuda" if backend == "cuda" else "cpu"
    x = np.linspace(0.0, 1.0, 6).reshape(2, 3)
    for mode in ("fwd-rev", "rev-fwd"):
        hv = ad.autograd.hvp(m.counts, (2, 3), [ad.array(x, device=device)],
                             [ad.zeros((2, 3), device=device)], [np.ones((2, 3))], mode=mode)
        np.testing.assert_array_equal(np.asarray(hv[0]), np.zeros((2, 3)))


PLAIN = '''
def plain(x, y):
    s = 0.0
    k = 0
    while k < 3:
        s += math.sin(x * y) + x ** 2
        k += 1
    return s
'''


def test_a_plain_function_is_differentiated_as_a_func(cpu, tmp_path_factory):
    """ad.grad, value_and_grad, jvp and hessian take a function defined with def (as
    Tangent's grad did): it is made an @ad.func once; a lambda is refused by name."""
    plain = _module(tmp_path_factory, "plain_funcs", PLAIN).plain
    args = (0.7, 1.3)
    dx = fd(plain, args, 0)
    assert ad.grad(plain)(*args) == pytest.approx(dx, rel=1e-7)
    assert ad.grad(plain, 1)(*args) == pytest.approx(fd(plain, args, 1), rel=1e-7)
    assert ad.value_and_grad(plain)(*args) == pytest.approx((plain(*args), dx), rel=1e-7)
    assert ad.jvp(plain, args, (1.0, 0.0)) == pytest.approx((plain(*args), dx), rel=1e-7)
    g = ad.grad(plain)
    assert ad.grad(ad.grad(plain))(*args) == pytest.approx(fd(g, args, 0, 1e-5), rel=1e-6)
    assert ad.hessian(plain)(*args) == pytest.approx(fd(g, args, 0, 1e-5), rel=1e-6)
    assert ad.grad(plain).f is g.f          # made once
    with pytest.raises(TypeError, match="a lambda's source is not a function adjoint can read"):
        ad.grad(lambda x: x * x)
    with pytest.raises(TypeError, match=r"ad.jvp expects an @ad.func \(or a function defined "
                                        r"with def\), got int"):
        ad.jvp(3, (1.0,), (1.0,))


ARRAY_FUNCS = '''
@ad.func
def energy(x: ad.array(dtype=float), a: float, n: int) -> float:
    s = 0.0
    k = 0
    while k < n:
        if x[k] > 0.0:
            s += a * x[k] * x[k]
        else:
            s += math.sin(a * x[k])
        k += 1
    return s

@ad.func
def squares(x: ad.array(dtype=float), a: float = 2.0, n: int = 2) -> float:
    s = 0.0
    for k in range(n):
        s += a * x[k] * x[k]
    return s

@ad.func
def pair(w: ad.array(dtype=float, ndim=2), v: ad.array(dtype=ad.float32)):
    return w[0, 1] * float(v[0]), w[1, 0] + w[0, 0] * w[0, 0]

@ad.func
def scratch(x: ad.array(dtype=float)) -> float:
    x[0] = x[0] * 3.0
    return x[0] + x[1]
'''


def test_funcs_taking_arrays_from_python(cpu, tmp_path_factory):
    """ad.grad, value_and_grad and jvp of a func with array parameters, on numpy arrays:
    its gradient is an array shaped as its argument (a float's a float), against central
    differences of the func itself run as Python; the caller's arrays are not changed."""
    m = _module(tmp_path_factory, "array_funcs", ARRAY_FUNCS)
    x0, a0 = np.array([0.5, -1.2, 0.8, 2.0]), 1.3
    args = (x0.copy(), a0, 3)

    def at(x=x0, a=a0):
        return m.energy.pyfunc(x.copy(), a, 3)
    dx = np.array([(at(x0 + 1e-6 * e) - at(x0 - 1e-6 * e)) / 2e-6 for e in np.eye(4)])
    da = (at(a=a0 + 1e-6) - at(a=a0 - 1e-6)) / 2e-6
    gx = ad.grad(m.energy)(*args)
    assert isinstance(gx, np.ndarray) and gx.shape == (4,) and gx[3] == 0.0
    np.testing.assert_allclose(gx, dx, rtol=1e-7, atol=1e-12)
    gx2, ga = ad.grad(m.energy, (0, 1))(*args)
    np.testing.assert_array_equal(gx2, gx)
    assert ga == pytest.approx(da, rel=1e-7)
    value, g = ad.value_and_grad(m.energy, 1)(*args)
    assert value == pytest.approx(at(), rel=1e-15) and g == ga
    t = np.array([0.3, -0.5, 1.0, 7.0])
    value, tangent = ad.jvp(m.energy, args, (t, 2.0, 0))
    assert tangent == pytest.approx(t @ dx + 2.0 * da, rel=1e-7)
    assert ad.jvp(m.energy, args, (None, 1.0, 0))[1] == pytest.approx(da, rel=1e-7)
    np.testing.assert_array_equal(args[0], x0)              # not written
    # two values, a 2-D array and a float32 one
    w, v = np.array([[0.5, 2.0], [3.0, 1.0]]), np.array([4.0], np.float32)
    (p, q), (dp, dq) = ad.jvp(m.pair, (w, v), (np.array([[1.0, 0.0], [0.0, 0.0]]), None))
    assert (p, q) == (8.0, 3.25) and (dp, dq) == (0.0, 1.0)
    # the Hessian of an array parameter: (n, n); with a float, blocks (n,) and a float
    (hxx, hxa), (hax, haa) = ad.hessian(m.energy, (0, 1))(*args)
    gx = ad.grad(m.energy)
    want = np.stack([(gx(x0 + 1e-5 * e, a0, 3) - gx(x0 - 1e-5 * e, a0, 3)) / 2e-5
                     for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(hxx, want, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(hxa, (gx(x0, a0 + 1e-5, 3) - gx(x0, a0 - 1e-5, 3)) / 2e-5,
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(hax, hxa, rtol=1e-12)
    assert haa == pytest.approx((ad.grad(m.energy, 1)(x0, a0 + 1e-5, 3) -
                                 ad.grad(m.energy, 1)(x0, a0 - 1e-5, 3)) / 2e-5, abs=1e-6)
    # defaults are filled in (a tangent left out is zero)
    sq = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ad.grad(m.squares)(sq), [4.0, 8.0, 0.0])
    assert ad.grad(m.squares, 1)(sq) == 5.0
    assert ad.jvp(m.squares, (sq,), (np.ones(3),)) == (10.0, 12.0)
    # a func that reads what it overwrites is refused, as in a kernel that calls it
    with pytest.raises(ad.TransformError, match="array 'x' is both read and written"):
        ad.grad(m.scratch)(np.array([1.0, 2.0]))


def test_funcs_taking_arrays_refused_where_unsupported(cpu, tmp_path_factory):
    m = _module(tmp_path_factory, "array_funcs_refused", ARRAY_FUNCS)
    x = np.array([0.5, -1.2, 0.8])
    with pytest.raises(AdjointError, match="ad.grad needs a func returning one float; 'pair'"):
        ad.grad(m.pair)(np.ones((2, 2)), np.ones(1, np.float32))
    with pytest.raises(TypeError, match="parameter .x. takes an array of 1 index dimension"):
        ad.grad(m.energy)(np.ones((2, 2)), 1.0, 2)
    with pytest.raises(TypeError, match="takes 3 arguments"):
        ad.grad(m.energy)(x, 1.0)
    with pytest.raises(AdjointError, match="ad.grad of ad.grad of func 'energy'"):
        ad.grad(ad.grad(m.energy, 1))
    with pytest.raises(TypeError, match="the tangent of 'x' has shape"):
        ad.jvp(m.energy, (x, 1.0, 2), (np.ones(2), 0.0, 0))


VEC_FROM_PYTHON = '''
@ad.func
def rot_energy(m: ad.mat33, v: ad.vec3, s: float) -> float:
    w = m @ v
    return s * ad.dot(w, w) + w[0] * v[2]
'''


def test_funcs_taking_vectors_from_python(cpu, tmp_path_factory):
    """A vector parameter takes a numpy array of its shape (an ad.vec3(...) is one) and its
    gradient is an array of that shape; against central differences of the func itself."""
    f = _module(tmp_path_factory, "vector_funcs", VEC_FROM_PYTHON).rot_energy
    m0 = np.array([[1.0, 0.2, 0.0], [0.0, 1.0, 0.1], [0.3, 0.0, 1.0]])
    v0, s0 = np.array([0.5, -1.0, 2.0]), 1.5

    def at(m=m0, v=v0, s=s0):
        return f.pyfunc(ad.mat33(*m.ravel()), ad.vec3(*v), s)
    gm, gv, gs = ad.grad(f, (0, 1, 2))(m0, ad.vec3(*v0), s0)
    assert gm.shape == (3, 3) and gv.shape == (3,)
    h = 1e-6
    np.testing.assert_allclose(gv, [(at(v=v0 + h * e) - at(v=v0 - h * e)) / (2 * h)
                                    for e in np.eye(3)], rtol=1e-7)
    np.testing.assert_allclose(gm.ravel(), [(at(m=m0 + h * e.reshape(3, 3)) -
                                             at(m=m0 - h * e.reshape(3, 3))) / (2 * h)
                                            for e in np.eye(9)], rtol=1e-7, atol=1e-9)
    assert gs == pytest.approx((at(s=s0 + h) - at(s=s0 - h)) / (2 * h), rel=1e-7)
    dv = np.array([0.3, 0.1, -0.2])
    value, tangent = ad.jvp(f, (m0, v0, s0), (None, dv, 0.0))
    assert value == pytest.approx(at(), rel=1e-14) and tangent == pytest.approx(gv @ dv, rel=1e-12)
    # the Hessian: one Hessian-vector product of the call kernel per component, both
    # modes, against differences of the gradient; blocks shaped as their parameters
    g = ad.grad(f, (1, 2))
    for mode in ("fwd-rev", "rev-fwd"):
        (hvv, hvs), (hsv, hss) = ad.hessian(f, (1, 2), mode=mode)(m0, v0, s0)
        assert hvv.shape == (3, 3) and hvs.shape == (3,) and hss == 0.0
        want = np.stack([(g(m0, v0 + 1e-5 * e, s0)[0] - g(m0, v0 - 1e-5 * e, s0)[0]) / 2e-5
                         for e in np.eye(3)], axis=1)
        np.testing.assert_allclose(hvv, want, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(hvs, (g(m0, v0, s0 + 1e-5)[0] - g(m0, v0, s0 - 1e-5)[0])
                                   / 2e-5, rtol=1e-6)
        np.testing.assert_allclose(hsv, hvs, rtol=1e-12)
    with pytest.raises(TypeError, match=r"parameter 'v' takes an ad.vec3 \(an array of shape "
                                        r"\(3,\)\), got an array of shape \(2,\)"):
        ad.grad(f, 1)(m0, np.ones(2), s0)
    with pytest.raises(ValueError, match="argnums 3 is not a parameter position of func "
                                         "'rot_energy' \\(3 parameters\\)"):
        ad.grad(f, 3)
