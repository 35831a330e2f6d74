"""Periodic stencils keep the even/odd row-block plan (issue 14), race-free.

A row index wrapped around the ring of ``n0 = u.shape[0]`` rows is within the
stencil's radius of the thread's row *on the ring*; with an even number of row
blocks the first and the last block (which meet across the seam) run in
different phases. Each kernel's plan is read from its generated backward; its
gradient is checked against float64 central differences (along random
directions, and element by element on a small grid) on every backend, at a size
that runs numba's parallel plan, and under the race checker (which runs the
parallel plan on the Python backend whatever the size, and raises at the first
element two concurrently running blocks touch).
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.build.pipeline import transform
from adjoint.runtime.backend_numba import PARALLEL_MIN_THREADS
from adjoint.runtime.racecheck import racecheck
from tests.conftest import central_fd

KERNELS = '''
@ad.kernel
def ring_eq(a: float, u: ad.array(dtype=float, ndim=2), v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    ip = i + 1
    if ip == n0:
        ip = 0
    im = i - 1
    if im < 0:
        im = n0 - 1
    c = u[i, j]
    v[i, j] = c * c + a * (u[ip, j] * u[im, j] - 2.0 * c)

@ad.kernel
def ring_ge(a: float, u: ad.array(dtype=float, ndim=2), v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    c = u[i, j]
    ip = i + 2
    if ip >= n0:
        ip = ip - n0
    im = i - 1
    if im < 0:
        im = im + n0
    v[i, j] = c + a * (u[ip, j] * u[ip, j] + math.sin(u[im, j]))

@ad.kernel
def ring_mod(a: float, u: ad.array(dtype=float, ndim=2), v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    c = u[i, j]
    ip = (i + 1) % n0
    im = (i - 1) % n0
    v[i, j] = c * u[ip, j] + a * u[im, j] * u[im, j]

@ad.kernel
def ring_stored(a: float, u: ad.array(dtype=float, ndim=2), v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = v.shape[0]
    ip = i + 1
    if ip == n0:
        ip = 0
    v[i, j] = a * u[ip, j] * u[ip, j]

@ad.kernel
def ring_of_another(a: float, u: ad.array(dtype=float, ndim=2), w: ad.array(dtype=float, ndim=2),
                    v: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    n0 = w.shape[0]
    ip = i + 1
    if ip == n0:
        ip = 0
    v[i, j] = w[0, 0] * u[ip, j] * u[ip, j]
'''

# (kernel, radius of its plan, float64 forward of one launch)
RINGS = {
    "ring_eq": (1, lambda a, u: u * u + a * (np.roll(u, -1, 0) * np.roll(u, 1, 0) - 2.0 * u)),
    "ring_ge": (2, lambda a, u: u + a * (np.roll(u, -2, 0) ** 2 + np.sin(np.roll(u, 1, 0)))),
    "ring_mod": (1, lambda a, u: u * np.roll(u, -1, 0) + a * np.roll(u, 1, 0) ** 2),
    "ring_stored": (1, lambda a, u: a * np.roll(u, -1, 0) ** 2),
}


def _grad(kernel, u0, seed, a=0.3):
    u = ad.array(u0, requires_grad=True)
    v = ad.zeros(u0.shape, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, dim=u0.shape, inputs=[a, u], outputs=[v])
    tape.backward(grads={v: seed})
    return v.numpy().copy(), u.grad.numpy().copy()


@pytest.mark.parametrize("name", sorted(RINGS))
def test_a_ring_keeps_the_even_odd_plan(kernel_module, name):
    """The plan is the even/odd one; the CPU backward gathers (tests/optimize/test_gather.py),
    the plan's grid stays for the CUDA target's and a saved backward's."""
    m = kernel_module(KERNELS)
    radius = RINGS[name][0]
    plan = transform(getattr(m, name).pyfunc, "kernel").plans[1]
    assert (plan.mode, plan.radius) == ("color", radius)
    bwd = ad.source(getattr(m, name), "backward")
    assert "gathers the sum" in bwd and "private_copies" not in bwd


def test_a_ring_of_an_array_no_thread_accesses_at_its_row_is_privatized(kernel_module):
    """n0 = w.shape[0] of an array no thread reads or stores at w[i, ...]: the launch
    does not check dim0 <= n0, so threads beyond n0 could reach any row; no ring."""
    m = kernel_module(KERNELS)
    bwd = ad.source(m.ring_of_another, "backward")
    assert "rt.private_copies(adj_u" in bwd and "block_count" not in bwd


def test_a_launch_beyond_the_ring_is_refused_before_any_thread_runs(kernel_module):
    """What the ring argument relies on: dim0 <= n0, checked once per launch."""
    m = kernel_module(KERNELS)
    u, v = ad.array(np.ones((6, 3))), ad.zeros((5, 3))
    with pytest.raises(ad.LaunchError, match="out of bounds"):
        ad.launch(m.ring_stored, dim=(6, 3), inputs=[0.3, u], outputs=[v])
    np.testing.assert_array_equal(v.numpy(), np.zeros((5, 3)))


@pytest.mark.parametrize("name", sorted(RINGS))
def test_ring_gradients_against_central_differences(backend, kernel_module, name):
    """Large enough for numba's parallel plan; <grad, d> against the central difference
    of sum(seed * v) along three random directions d."""
    m = kernel_module(KERNELS)
    kernel, (_, ref) = getattr(m, name), RINGS[name]
    rng = np.random.default_rng(5)
    n1 = 2 * PARALLEL_MIN_THREADS // 40 if backend == "numba" else 7
    u0 = rng.normal(size=(40, n1))
    seed = rng.normal(size=u0.shape)
    out, grad = _grad(kernel, u0, seed)
    np.testing.assert_allclose(out, ref(0.3, u0), rtol=1e-12, atol=1e-12)

    def loss(u):
        return float(np.sum(seed * ref(0.3, u)))
    for _ in range(3):
        d = rng.normal(size=u0.shape)
        eps = 1e-6
        fd = (loss(u0 + eps * d) - loss(u0 - eps * d)) / (2 * eps)
        assert abs(float(np.sum(grad * d)) - fd) <= 1e-6 * max(1.0, abs(fd)), (name, fd)


def test_ring_gradient_element_by_element(backend, kernel_module):
    m = kernel_module(KERNELS)
    rng = np.random.default_rng(6)
    u0 = rng.normal(size=(5, 3))
    seed = rng.normal(size=u0.shape)
    _, grad = _grad(m.ring_eq, u0, seed)

    def loss(u):
        v = ad.zeros(u.shape)
        ad.launch(m.ring_eq, dim=u.shape, inputs=[0.3, ad.array(u)], outputs=[v])
        return float(np.sum(seed * v.numpy()))
    np.testing.assert_allclose(grad, central_fd(loss, u0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(RINGS))
@pytest.mark.parametrize("rows, dim0", [(6, 6), (7, 7), (9, 9), (13, 13), (9, 8), (12, 5)])
def test_ring_plans_pass_the_race_checker(kernel_module, name, rows, dim0):
    """Every block split of rings of several sizes, the launch covering all the rows or
    fewer (dim0 <= n0), runs race-free and gives the float64 reference."""
    m = kernel_module(KERNELS)
    kernel, (_, ref) = getattr(m, name), RINGS[name]
    rng = np.random.default_rng(rows * 31 + dim0)
    u0 = rng.normal(size=(rows, 3))
    seed = np.zeros((rows, 3))
    seed[:dim0] = rng.normal(size=(dim0, 3))
    with ad.backend_scope("python"), racecheck():
        u = ad.array(u0, requires_grad=True)
        v = ad.zeros(u0.shape, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(kernel, dim=(dim0, 3), inputs=[0.3, u], outputs=[v])
        tape.backward(grads={v: seed})
    np.testing.assert_allclose(v.numpy()[:dim0], ref(0.3, u0)[:dim0], rtol=1e-12, atol=1e-12)

    def loss(x):
        return float(np.sum(seed[:dim0] * ref(0.3, x)[:dim0]))
    d = rng.normal(size=u0.shape)
    fd = (loss(u0 + 1e-6 * d) - loss(u0 - 1e-6 * d)) / 2e-6
    assert abs(float(np.sum(u.grad.numpy() * d)) - fd) <= 1e-6 * max(1.0, abs(fd))
