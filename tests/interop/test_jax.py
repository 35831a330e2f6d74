"""adjoint.jax: kernels as JAX functions, under jax.grad, jax.jit, jax.vmap and jax.jvp.

References: central finite differences in float64, the same math written in jax.numpy
(differentiated by JAX itself), and adjoint's own tape.
"""
import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

import adjoint as ad  # noqa: E402
import adjoint.jax as aj  # noqa: E402
from tests.conftest import central_fd  # noqa: E402

KERNELS = '''
@ad.kernel
def wave(x: ad.array(dtype=float), k: float, out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = k * x[i] * math.sin(x[i]) + x[i] * x[i] * x[i]

@ad.kernel
def polar(r: ad.array(dtype=float), t: ad.array(dtype=float),
          px: ad.array(dtype=float), py: ad.array(dtype=float)):
    i = ad.tid()
    px[i] = r[i] * math.cos(t[i])
    py[i] = r[i] * math.sin(t[i])

@ad.kernel
def springs(p: ad.array(dtype=float), a: ad.array(dtype=ad.int64),
            b: ad.array(dtype=ad.int64), rest: float, e: ad.array(dtype=float)):
    s = ad.tid()
    d = p[b[s]] - p[a[s]]
    ad.atomic_add(e, 0, (d - rest) * (d - rest))

@ad.kernel
def grid(a: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    out[i, j] = a[i, j] * a[i, j] * float(j + 1)

@ad.kernel
def shift(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i + 1]

@ad.kernel(enable_backward=False)
def forward_only(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = 2.0 * x[i]

@ad.kernel
def wave32(x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    out[i] = x[i] * math.sin(x[i])
'''

X = np.array([-1.2, -0.4, 0.3, 0.9, 1.7])


@pytest.fixture(params=["python", "numba"])
def cpu(request):
    """The CPU backends (the wrapper launches on the CPU)."""
    with ad.backend_scope(request.param):
        yield request.param


@pytest.fixture
def x64():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


@pytest.fixture
def k(kernel_module):
    return kernel_module(KERNELS)


def wave_jnp(x, k):
    return k * x * jnp.sin(x) + x ** 3


def test_forward_values(cpu, x64, k):
    (out,) = aj.jax_kernel(k.wave)(jnp.asarray(X), 2.0)
    assert out.dtype == jnp.float64 and out.shape == (5,)
    np.testing.assert_allclose(out, wave_jnp(X, 2.0), rtol=1e-14)


def test_grad_against_fd_jnp_and_tape(cpu, x64, k):
    f = aj.jax_kernel(k.wave)

    def loss(x):
        (out,) = f(x, 2.0)
        return jnp.sum(out ** 2)

    g = np.asarray(jax.grad(loss)(jnp.asarray(X)))
    fd = central_fd(lambda x: float(loss(jnp.asarray(x))), X)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    ref = jax.grad(lambda x: jnp.sum(wave_jnp(x, 2.0) ** 2))(jnp.asarray(X))
    np.testing.assert_allclose(g, ref, rtol=1e-12)
    # adjoint's own tape, seeded with d loss / d out = 2 out
    x = ad.array(X, requires_grad=True)
    out = ad.zeros(5, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(k.wave, 5, inputs=[x, 2.0], outputs=[out])
    tape.backward(grads={out: 2 * out.numpy()})
    np.testing.assert_array_equal(g, x.grad.numpy())


def test_grad_under_jit(cpu, x64, k):
    f = aj.jax_kernel(k.wave)
    loss = jax.jit(jax.value_and_grad(lambda x: jnp.sum(jnp.cos(f(x, 2.0)[0]))))
    ref = jax.value_and_grad(lambda x: jnp.sum(jnp.cos(wave_jnp(x, 2.0))))
    for scale in (1.0, 0.5):            # the second call runs the compiled program again
        xs = jnp.asarray(scale * X)
        (v, g), (v_ref, g_ref) = loss(xs), ref(xs)
        np.testing.assert_allclose(v, v_ref, rtol=1e-13)
        np.testing.assert_allclose(g, g_ref, rtol=1e-12)


def test_two_outputs(cpu, x64, k):
    f = aj.jax_kernel(k.polar, num_outputs=2)
    r, t = jnp.asarray(X ** 2 + 0.5), jnp.asarray(X)

    def loss(r, t):
        px, py = f(r, t)
        return jnp.sum(px * py) + jnp.sum(px ** 3)

    def loss_jnp(r, t):
        px, py = r * jnp.cos(t), r * jnp.sin(t)
        return jnp.sum(px * py) + jnp.sum(px ** 3)

    got, ref = jax.grad(loss, argnums=(0, 1))(r, t), jax.grad(loss_jnp, argnums=(0, 1))(r, t)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    # an output the loss does not use gets a zero cotangent (a symbolic zero in JAX)
    g = jax.grad(lambda t: jnp.sum(f(r, t)[1]))(t)
    np.testing.assert_allclose(g, r * jnp.cos(t), rtol=1e-13)


def test_scalar_argument_python_and_jax(cpu, x64, k):
    f = aj.jax_kernel(k.wave)
    xs = jnp.asarray(X)
    # a JAX scalar for a scalar parameter is traced: one compiled program for every k
    run = jax.jit(lambda x, kk: f(x, kk)[0])
    for kk in (2.0, -3.0):
        np.testing.assert_allclose(run(xs, jnp.float64(kk)), wave_jnp(X, kk), rtol=1e-14)
    g = jax.grad(lambda x, kk: jnp.sum(f(x, kk)[0]))(xs, jnp.float64(-3.0))
    np.testing.assert_allclose(g, jax.grad(lambda x: jnp.sum(wave_jnp(x, -3.0)))(xs),
                               rtol=1e-12)
    # a scalar parameter gets no derivative: asked for one, the wrapper refuses
    with pytest.raises(ad.AdjointError, match="scalar parameter 'k'"):
        jax.grad(lambda x, kk: jnp.sum(f(x, kk)[0]), argnums=1)(xs, jnp.float64(2.0))


def test_integer_inputs_and_output_dims(cpu, x64, k):
    f = aj.jax_kernel(k.springs, output_dims=1)        # launch dims: p's shape... given
    a, b = jnp.asarray([0, 1, 2, 3]), jnp.asarray([1, 2, 3, 4])
    p = jnp.asarray(np.cumsum(X))

    def energy(p):
        (e,) = f(p, a, b, 0.5, launch_dims=4)
        return e[0]

    def energy_jnp(p):
        return jnp.sum((p[b] - p[a] - 0.5) ** 2)

    np.testing.assert_allclose(energy(p), energy_jnp(p), rtol=1e-14)
    np.testing.assert_allclose(jax.grad(energy)(p), jax.grad(energy_jnp)(p), rtol=1e-12)
    # integer arrays get float0 cotangents, as JAX expects
    ga = jax.grad(lambda p, a: f(p, a, b, 0.5, launch_dims=4)[0][0], argnums=1,
                  allow_int=True)(p, a)
    assert ga.dtype == jax.dtypes.float0


def test_float32(cpu, k):
    f = aj.jax_kernel(k.wave32)
    x = jnp.asarray(X, dtype=jnp.float32)
    (out,) = f(x)
    assert out.dtype == jnp.float32
    g = jax.grad(lambda x: jnp.sum(f(x)[0] ** 2))(x)
    ref = jax.grad(lambda x: jnp.sum((x * jnp.sin(x)) ** 2))(x)
    assert g.dtype == jnp.float32
    np.testing.assert_allclose(g, ref, rtol=1e-5)
    with pytest.raises(ad.AdjointError, match="dtype float32.*nothing is cast"):
        aj.jax_kernel(k.wave)(x, 1.0)


def test_vmap_runs_sequentially(cpu, x64, k):
    f = aj.jax_kernel(k.wave)
    batch = jnp.asarray(np.stack([X, 2 * X, -X]))
    out = jax.vmap(lambda x: f(x, 2.0)[0])(batch)
    np.testing.assert_allclose(out, wave_jnp(batch, 2.0), rtol=1e-14)
    g = jax.vmap(jax.grad(lambda x: jnp.sum(f(x, 2.0)[0])))(batch)
    np.testing.assert_allclose(g, jax.vmap(jax.grad(lambda x: jnp.sum(wave_jnp(x, 2.0))))(batch),
                               rtol=1e-12)


def test_jvp_mode(cpu, x64, k):
    f = aj.jax_kernel(k.wave, differentiable="jvp")
    xs, v = jnp.asarray(X), jnp.asarray(np.linspace(1.0, 2.0, 5))
    out, dot = jax.jvp(lambda x: f(x, 2.0)[0], (xs,), (v,))
    ref_out, ref_dot = jax.jvp(lambda x: wave_jnp(x, 2.0), (xs,), (v,))
    np.testing.assert_allclose(out, ref_out, rtol=1e-14)
    np.testing.assert_allclose(dot, ref_dot, rtol=1e-12)
    jac = jax.jit(jax.jacfwd(lambda x: f(x, 2.0)[0]))(xs)
    fd = central_fd(lambda x: float(jnp.sum(f(jnp.asarray(x), 2.0)[0] * v)), X)
    np.testing.assert_allclose(v @ jac, fd, rtol=1e-6, atol=1e-8)
    # integer arrays carry no tangent; the atomics' tangents add up as their values do
    springs = aj.jax_kernel(k.springs, output_dims=1, differentiable="jvp")
    a, b, p = jnp.asarray([0, 1, 2, 3]), jnp.asarray([1, 2, 3, 4]), jnp.asarray(np.cumsum(X))
    e, de = jax.jvp(lambda p: springs(p, a, b, 0.5, launch_dims=4)[0], (p,), (v,))
    _, de_ref = jax.jvp(lambda p: jnp.sum((p[b] - p[a] - 0.5) ** 2)[None], (p,), (v,))
    np.testing.assert_allclose(de, de_ref, rtol=1e-12)
    # the default (VJP) wrapper is refused forward mode by JAX, with JAX's own message
    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(lambda x: aj.jax_kernel(k.wave)(x, 2.0)[0], (xs,), (v,))


def test_wrong_arguments(cpu, x64, k):
    f = aj.jax_kernel(k.wave)
    with pytest.raises(ad.AdjointError, match=r"takes 2 inputs \(x, k; outputs out"):
        f(jnp.asarray(X))
    with pytest.raises(ad.AdjointError, match=r"takes 2 inputs"):
        f(jnp.asarray(X), 1.0, jnp.asarray(X))
    with pytest.raises(ad.AdjointError, match="parameter 'x'.*got the scalar"):
        f(1.0, 2.0)
    with pytest.raises(ad.AdjointError, match="output_dims names"):
        f(jnp.asarray(X), 1.0, output_dims={"nope": 3})
    with pytest.raises(ad.AdjointError, match="num_outputs=3"):
        aj.jax_kernel(k.wave, num_outputs=3)
    with pytest.raises(ad.AdjointError, match="differentiable"):
        aj.jax_kernel(k.wave, differentiable="both")


def test_two_dimensional_launch(cpu, x64, k):
    a = jnp.asarray(np.arange(6.0).reshape(2, 3) - 2.5)
    f = aj.jax_kernel(k.grid)                   # launch dims (2, 3): a's shape
    (out,) = f(a)
    np.testing.assert_allclose(out, a * a * jnp.arange(1.0, 4.0), rtol=1e-15)
    g = jax.grad(lambda a: jnp.sum(jnp.sin(f(a)[0])))(a)
    ref = jax.grad(lambda a: jnp.sum(jnp.sin(a * a * jnp.arange(1.0, 4.0))))(a)
    np.testing.assert_allclose(g, ref, rtol=1e-12)


def test_faults_and_missing_derivatives(cpu, x64, k):
    xs = jnp.asarray(X)
    # a fault inside the kernel reaches the caller (JAX wraps what its callback raised)
    with pytest.raises(Exception, match="index 5 is out of bounds"):
        jax.block_until_ready(aj.jax_kernel(k.shift)(xs))
    f = aj.jax_kernel(k.forward_only)
    np.testing.assert_allclose(f(xs)[0], 2 * X, rtol=1e-15)
    with pytest.raises(ad.AdjointError, match="'forward_only' has no generated backward"):
        jax.grad(lambda x: jnp.sum(f(x)[0]))(xs)
