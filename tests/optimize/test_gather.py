"""A stencil's backward gathers (pass gather, issue 14): each gradient element sums what
the threads that read it add, in one parallel pass, instead of every thread scattering
into its neighbours in even/odd row blocks.

Every variant (borders copied, interior only, periodic with each ring pattern, 1-D and
2-D, offsets of 1 and 2, a nonlinear stencil whose partials read the neighbours, two
gathered arrays, a launch smaller than its arrays, float64 and float32) is checked
against float64 central differences on every backend: at a size that runs numba's
parallel grid, and on the Python backend under the race checker (which runs the
parallel grid whatever the size and raises at the first element two concurrently
running units touch). Kernels the rewrite cannot prove (indexed neighbours, a neighbour
chosen by a value, a loop, an adjoint the thread reads after writing it) keep their
plan, and are checked the same way.
"""
import importlib.util
import sys

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime.racecheck import racecheck
from tests.conftest import central_fd

KERNELS = '''
@ad.kernel
def heat(a: DT, u: ad.array(dtype=DT, ndim=2), v: ad.array(dtype=DT, ndim=2)):
    i, j = ad.tid()
    nx = u.shape[0]
    ny = u.shape[1]
    c = u[i, j]
    if i > 0 and i < nx - 1 and j > 0 and j < ny - 1:
        v[i, j] = c + a * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * c)
    else:
        v[i, j] = c

@ad.kernel
def interior(a: DT, u: ad.array(dtype=DT, ndim=2), v: ad.array(dtype=DT, ndim=2)):
    i, j = ad.tid()
    if i >= 2 and i < u.shape[0] - 2 and j >= 1 and j < u.shape[1] - 1:
        v[i, j] = a * u[i - 2, j] - u[i + 2, j] * u[i, j - 1] + u[i, j + 1]

@ad.kernel
def nonlinear(a: DT, u: ad.array(dtype=DT, ndim=2), v: ad.array(dtype=DT, ndim=2)):
    i, j = ad.tid()
    nx = u.shape[0]
    ny = u.shape[1]
    c = u[i, j]
    if i > 0 and i < nx - 1 and j > 0 and j < ny - 1:
        v[i, j] = c * math.sin(u[i + 1, j] * u[i - 1, j]) + \\
            a * math.exp(-u[i, j + 1] * u[i, j + 1]) * u[i, j - 1]
    else:
        v[i, j] = 0.5 * c * c

@ad.kernel
def periodic(a: DT, u: ad.array(dtype=DT, ndim=2), v: ad.array(dtype=DT, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    n1 = u.shape[1]
    ip = i + 1
    if ip == n0:
        ip = 0
    im = i - 1
    if im < 0:
        im = n0 - 1
    jp = j + 1
    if jp == n1:
        jp = 0
    jm = j - 1
    if jm < 0:
        jm = n1 - 1
    c = u[i, j]
    v[i, j] = c + a * (u[ip, j] * u[im, j] + u[i, jp] + u[i, jm] - 4.0 * c * c)

@ad.kernel
def ring_wide(a: DT, u: ad.array(dtype=DT, ndim=2), v: ad.array(dtype=DT, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    n1 = u.shape[1]
    ip = i + 2
    if ip >= n0:
        ip = ip - n0
    jm = j - 2
    if jm < 0:
        jm = jm + n1
    jp = j + 1
    if jp >= n1:
        jp = 0
    im = i - 2
    if im < 0:
        im = n0 - 1
    v[i, j] = u[ip, j] * u[i, jm] + a * u[i, jp] - u[im, j] * u[im, j]

@ad.kernel
def line(a: DT, u: ad.array(dtype=DT), v: ad.array(dtype=DT)):
    i = ad.tid()
    n = u.shape[0]
    if i >= 2 and i < n - 2:
        v[i] = u[i - 2] + a * u[i - 1] * u[i + 1] - u[i + 2]
    else:
        v[i] = u[i]

@ad.kernel
def line_ring(a: DT, u: ad.array(dtype=DT), v: ad.array(dtype=DT)):
    i = ad.tid()
    n = u.shape[0]
    v[i] = u[(i + 2) % n] * u[(i - 1) % n] + a * u[i]

@ad.kernel
def two_fields(a: DT, u: ad.array(dtype=DT, ndim=2), w: ad.array(dtype=DT, ndim=2),
               v: ad.array(dtype=DT, ndim=2)):
    i, j = ad.tid()
    if i > 0 and j > 0:
        v[i, j] = u[i - 1, j] * w[i, j - 1] + a * w[i, j]
    else:
        v[i, j] = u[i, j]

@ad.kernel
def shifted(a: DT, u: ad.array(dtype=DT), v: ad.array(dtype=DT)):
    i = ad.tid()
    v[i] = u[i + 1] * u[i] + a * u[i + 1]

@ad.kernel
def dead_load(a: DT, u: ad.array(dtype=DT), w: ad.array(dtype=DT), v: ad.array(dtype=DT)):
    i = ad.tid()
    b = w[(i + 1) % w.shape[0]]
    b = a * u[(i + 1) % u.shape[0]]
    v[i] = b * u[i]

@ad.kernel
def with_loss(a: DT, u: ad.array(dtype=DT), loss: ad.array(dtype=DT)):
    i = ad.tid()
    if i > 0:
        ad.atomic_add(loss, 0, a * u[i - 1] * u[i])
'''

FALLBACKS = '''
@ad.kernel
def indexed(a: DT, u: ad.array(dtype=DT), idx: ad.array(dtype=ad.int64), v: ad.array(dtype=DT)):
    i = ad.tid()
    v[i] = u[idx[i]] * u[i] + a

@ad.kernel
def chosen(a: DT, u: ad.array(dtype=DT), v: ad.array(dtype=DT)):
    i = ad.tid()
    n = u.shape[0]
    k = i - 1
    if u[i] > 0.0:
        k = i + 1
    if i > 0 and i < n - 1:
        v[i] = a * u[k] * u[k]

@ad.kernel
def looped(a: DT, u: ad.array(dtype=DT), v: ad.array(dtype=DT)):
    i = ad.tid()
    s = 0.0
    if i > 0:
        for k in range(3):
            s += u[i - 1] * a * float(k + 1)
    v[i] = s

@ad.kernel
def reread(a: DT, u: ad.array(dtype=DT), w: ad.array(dtype=DT), v: ad.array(dtype=DT)):
    i = ad.tid()
    if i > 0:
        w[i] = u[i - 1] * a
        b = w[i]
        v[i] = b * b
'''

F64, F32 = "float", "ad.float32"

# kernel -> (array shapes for a small and for a large launch; None: the launch's shape)
CASES = {
    "heat": ([(9, 7)], [(48, 50)]),
    "interior": ([(9, 6)], [(48, 50)]),
    "nonlinear": ([(7, 6)], [(48, 50)]),
    "periodic": ([(7, 6)], [(48, 50)]),
    "ring_wide": ([(7, 6)], [(48, 50)]),
    "line": ([(11,)], [(3000,)]),
    "line_ring": ([(9,)], [(3000,)]),
    "two_fields": ([(7, 6), (7, 6)], [(48, 50), (48, 50)]),
}


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    """``modules(source, dtype)``: the kernels of ``source`` in ``dtype``, imported once for
    the whole file (numba then compiles each kernel once per backend)."""
    folder, loaded = tmp_path_factory.mktemp("stencil_gather"), {}

    def load(source, dtype):
        key = (source, dtype)
        if key not in loaded:
            name = f"stencil_gather_kernels_{len(loaded)}"
            path = folder / f"{name}.py"
            path.write_text("import math\nimport numpy as np\nimport adjoint as ad\n\n" +
                            source.replace("DT", dtype))
            spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            loaded[key] = mod
        return loaded[key]
    return load


def _module(modules, source, dtype):
    return modules(source, dtype)


def _launch(kernel, arrays, out_shape, a=0.3, dim=None, record=True):
    """(v, [grad of each array]) after backward with a fixed random seed of v."""
    dt = arrays[0].dtype
    xs = [ad.array(x, requires_grad=True) for x in arrays]
    v = ad.zeros(out_shape, dtype=dt, requires_grad=True)
    seed = np.random.default_rng(99).normal(size=out_shape).astype(dt)
    dim = dim or out_shape
    if not record:
        ad.launch(kernel, dim=dim, inputs=[a, *xs], outputs=[v])
        return float(np.sum(np.asarray(seed, np.float64) * v.numpy())), None
    with ad.Tape() as tape:
        ad.launch(kernel, dim=dim, inputs=[a, *xs], outputs=[v])
    tape.backward(grads={v: seed})
    return v.numpy().copy(), [x.grad.numpy().copy() for x in xs]


def _loss(kernel64, shape, dim=None):
    def loss(arrays):
        return _launch(kernel64, list(arrays), shape, dim=dim, record=False)[0]
    return loss


def _check_directions(kernel, kernel64, arrays, shape, rtol, dim=None, dtype=np.float64):
    """<grad, d> against the float64 central difference of sum(seed * v) along random d
    (``kernel64``: the same kernel in float64; ``dtype``: the one ``kernel`` runs in)."""
    _, grads = _launch(kernel, [x.astype(dtype) for x in arrays], shape, dim=dim)
    loss = _loss(kernel64, shape, dim)
    rng = np.random.default_rng(7)
    for _ in range(3):
        d = [rng.normal(size=x.shape) for x in arrays]
        eps = 1e-6
        fd = (loss([x + eps * e for x, e in zip(arrays, d)]) -
              loss([x - eps * e for x, e in zip(arrays, d)])) / (2 * eps)
        got = sum(float(np.sum(np.asarray(g, np.float64) * e)) for g, e in zip(grads, d))
        assert abs(got - fd) <= rtol * max(1.0, abs(fd)), (got, fd)


def _inputs(name, shapes, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=s) for s in shapes]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_backward_gathers(modules, name):
    m = _module(modules, KERNELS, F64)
    bwd = ad.source(getattr(m, name), "backward")
    assert "gathers the sum" in bwd and f"def {name}_backward_gather_u_thread(" in bwd
    # each gradient element is written once, by its own receiver (owner computes)
    assert "adj_u[e0, e1] += adj_u_sum" in bwd or "adj_u[e0] += adj_u_sum" in bwd


@pytest.mark.parametrize("dtype", [F64, F32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_gathered_gradients_against_central_differences(backend, modules, name, dtype):
    """Large enough for numba's parallel grid (the Python backend and the CUDA simulator:
    small); float32 within 1e-4 of the float64 central difference."""
    m, m64 = _module(modules, KERNELS, dtype), _module(modules, KERNELS, F64)
    small, large = CASES[name]
    shapes = large if backend == "numba" else small
    arrays = _inputs(name, shapes)
    _check_directions(getattr(m, name), getattr(m64, name), arrays, shapes[0],
                      1e-6 if dtype == F64 else 2e-4,
                      dtype=np.float64 if dtype == F64 else np.float32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gathered_gradients_element_by_element_under_the_race_checker(modules, name):
    m = _module(modules, KERNELS, F64)
    kernel = getattr(m, name)
    shapes = CASES[name][0]
    arrays = _inputs(name, shapes, seed=11)
    with ad.backend_scope("python"), racecheck():
        _, grads = _launch(kernel, arrays, shapes[0])
        for k in range(len(arrays)):
            def loss(x, k=k):
                xs = list(arrays)
                xs[k] = x
                return _loss(kernel, shapes[0])(xs)
            np.testing.assert_allclose(grads[k], central_fd(loss, arrays[k]), rtol=1e-6,
                                       atol=1e-8)


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_tiny_grids_and_rings(modules, name, size):
    """Rings of 1, 2 and 3 values, where one thread is reached by several candidate
    expressions (``i - 1`` and ``n0 - 1``...) and must add its share once."""
    if name == "ring_wide" and size == 1:
        pytest.skip("i + 2 wrapped once by i + 2 - n0 is out of a ring of 1")
    m = _module(modules, KERNELS, F64)
    kernel = getattr(m, name)
    shapes = [(size,) * len(s) for s in CASES[name][0]]
    if len(shapes[0]) == 2:
        shapes = [(size, size + 1)] * len(shapes)
    arrays = _inputs(name, shapes, seed=size)
    with ad.backend_scope("python"), racecheck():
        _, grads = _launch(kernel, arrays, shapes[0])
        for k in range(len(arrays)):
            def loss(x, k=k):
                xs = list(arrays)
                xs[k] = x
                return _loss(kernel, shapes[0])(xs)
            np.testing.assert_allclose(grads[k], central_fd(loss, arrays[k]), rtol=1e-6,
                                       atol=1e-8)


def test_a_gathered_load_that_reaches_no_output(backend, modules):
    """``w[i + 1]``'s value is overwritten unused (fuzz seed 6): no gradient to gather
    for it; ``u``'s still gathers."""
    m = _module(modules, KERNELS, F64)
    assert "gather_u_thread" in ad.source(m.dead_load, "backward")
    n = 3000 if backend == "numba" else 9
    arrays = _inputs("dead_load", [(n,), (n,)], seed=9)
    _check_directions(m.dead_load, m.dead_load, arrays, (n,), 1e-6)
    if backend == "python":
        with racecheck():
            _check_directions(m.dead_load, m.dead_load, arrays, (n,), 1e-6)


def test_a_neighbour_whose_index_is_checked(backend, modules):
    """``u[i + 1]`` with no test proving it: the launch (one thread fewer than elements)
    checks it, and the receivers replay the check of each sender."""
    m = _module(modules, KERNELS, F64)
    bwd = ad.source(m.shifted, "backward")
    assert "gathers the sum" in bwd
    n = 3000 if backend == "numba" else 9
    arrays = _inputs("shifted", [(n,)], seed=8)
    _check_directions(m.shifted, m.shifted, arrays, (n,), 1e-6, dim=(n - 1,))
    if backend == "python":
        with racecheck():
            _check_directions(m.shifted, m.shifted, arrays, (n,), 1e-6, dim=(n - 1,))


@pytest.mark.parametrize("name", ["heat", "interior", "periodic", "line", "two_fields"])
def test_a_launch_smaller_than_its_arrays(backend, modules, name):
    """Elements outside the launch's grid still receive what the threads add there."""
    m = _module(modules, KERNELS, F64)
    kernel = getattr(m, name)
    shapes = CASES[name][1 if backend == "numba" else 0]
    dim = tuple(s - 1 for s in shapes[0][:-1]) + (shapes[0][-1] - (2 if len(shapes[0]) > 1
                                                                   else 1),)
    arrays = _inputs(name, shapes, seed=5)
    _check_directions(kernel, kernel, arrays, shapes[0], 1e-6, dim=dim)
    if backend == "python":
        with racecheck():
            _check_directions(kernel, kernel, arrays, shapes[0], 1e-6, dim=dim)


def test_a_loss_accumulated_by_every_thread(backend, modules):
    """``ad.atomic_add(loss, 0, ...)`` beside a stencil's loads: the loss's adjoint is only
    read, the stencil's gradient gathers."""
    m = _module(modules, KERNELS, F64)
    assert "gathers the sum" in ad.source(m.with_loss, "backward")
    n = 3000 if backend == "numba" else 9
    u0 = np.random.default_rng(2).normal(size=n)

    def run(x, record=True):
        u = ad.array(x, requires_grad=True)
        loss = ad.zeros(1, requires_grad=True)
        if not record:
            ad.launch(m.with_loss, dim=n, inputs=[0.3, u], outputs=[loss])
            return float(loss.numpy()[0])
        with ad.Tape() as tape:
            ad.launch(m.with_loss, dim=n, inputs=[0.3, u], outputs=[loss])
        tape.backward(loss=loss)
        return u.grad.numpy().copy()
    grad = run(u0)
    expected = np.zeros(n)                  # d/du of 0.3 * sum u[i-1] u[i], by hand
    expected[:-1] += 0.3 * u0[1:]
    expected[1:] += 0.3 * u0[:-1]
    np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-12)
    if backend == "python":
        with racecheck():
            np.testing.assert_allclose(run(u0), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["indexed", "chosen", "looped", "reread"])
def test_what_cannot_be_proven_keeps_its_plan(backend, modules, name):
    m = _module(modules, FALLBACKS, F64)
    kernel = getattr(m, name)
    assert "gathers the sum" not in ad.source(kernel, "backward")
    n = 3000 if backend == "numba" else 9
    rng = np.random.default_rng(4)
    u0 = rng.normal(size=n)
    extra = {"indexed": [rng.integers(0, n, n)], "reread": [np.zeros(n)]}.get(name, [])

    def run(x, record=True):
        u = ad.array(x, requires_grad=True)
        v = ad.zeros(n, requires_grad=True)
        inputs = [0.3, u, *[ad.array(e) for e in extra]]
        if not record:
            ad.launch(kernel, dim=n, inputs=inputs, outputs=[v])
            return float(np.sum(v.numpy() * np.arange(1.0, n + 1.0)))
        with ad.Tape() as tape:
            ad.launch(kernel, dim=n, inputs=inputs, outputs=[v])
        tape.backward(grads={v: np.arange(1.0, n + 1.0)})
        return u.grad.numpy().copy()
    grad = run(u0)
    d = rng.normal(size=n)
    fd = (run(u0 + 1e-6 * d, False) - run(u0 - 1e-6 * d, False)) / 2e-6
    assert abs(float(np.sum(grad * d)) - fd) <= 1e-6 * max(1.0, abs(fd))
