"""Structs built inside kernels and funcs (issue 38): ``b = Body()`` (zeroed, as Warp's),
then its fields assigned (``b.mass = m``, a vector field ``b.pos = v`` and its component
``b.pos.y = s``, a nested struct's ``b.inner.k = s``, ``+=``), read, and ``b`` passed whole
to a func taking a ``Body``. frontend/structs.py ``construct`` makes the fields locals of
the leaf names a struct parameter's would have (``b_pos``, ``b_inner_k``), each zero.

Values and gradients against NumPy and central differences in float64 on every backend
(python, numba, the CUDA simulator); Warp's spelling in float32, and against NVIDIA Warp's
CPU device where it is installed (skipped otherwise); the refusals name the line.
"""
import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from adjoint.errors import TransformError
from tests.conftest import central_fd

SRC = '''
@ad.struct
class Inner:
    k: float
    n: int


@ad.struct
class Body:
    pos: ad.vec3
    mass: float
    inner: Inner


@ad.func
def energy(b: Body, g: float) -> float:
    return b.mass * g * b.pos.z + b.inner.k * ad.dot(b.pos, b.pos) * float(b.inner.n)


@ad.kernel
def bodies(x: ad.array(dtype=ad.vec3), m: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    b = Body()
    y0 = b.mass + b.pos.x + b.inner.k      # zero before any field is set
    b.pos = x[i] * 2.0
    b.mass = m[i]
    b.inner.k = math.sin(m[i])
    b.inner.n = i + 1
    b.pos.y = b.pos.y + 1.0
    if m[i] > 0.0:
        b.mass += 1.0
    y[i] = energy(b, 9.8) + b.mass + y0
'''

X = np.array([[0.3, -0.7, 0.9], [0.1, -1.2, 0.4], [1.1, 0.2, -0.3]])
M = np.array([0.5, -2.0, 1.5])
N = len(M)


def _reference(x, m):
    pos = 2.0 * x
    pos[:, 1] += 1.0
    mass = m + (m > 0)
    k, n = np.sin(m), np.arange(1, N + 1)
    return mass * 9.8 * pos[:, 2] + k * (pos * pos).sum(1) * n + mass


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _run(mod, x, m, tape=None):
    dev = _device()
    args = [ad.array(x, dtype=ad.vec3, requires_grad=True, device=dev),
            ad.array(m, requires_grad=True, device=dev), ad.zeros(N, requires_grad=True,
                                                                 device=dev)]
    if tape is None:
        ad.launch(mod.bodies, N, inputs=args[:2], outputs=args[2:])
    else:
        with tape:
            ad.launch(mod.bodies, N, inputs=args[:2], outputs=args[2:])
    return args


def test_a_struct_built_in_a_kernel(backend, kernel_module):
    mod = kernel_module(SRC)
    tape = ad.Tape()
    x, m, y = _run(mod, X, M, tape)
    np.testing.assert_allclose(y.numpy(), _reference(X, M), rtol=1e-14)
    seed = np.array([0.7, -1.3, 0.4])
    tape.backward(grads={y: ad.array(seed, device=_device())})
    np.testing.assert_allclose(
        x.grad.numpy(), central_fd(lambda v: float(np.dot(seed, _run(mod, v, M)[2].numpy())), X),
        rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(
        m.grad.numpy(), central_fd(lambda v: float(np.dot(seed, _run(mod, X, v)[2].numpy())), M),
        rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("body, message", [
    ("b = Body(1.0)", r"Body\(\) takes no arguments in a kernel or func"),
    ("b = Bag()", "cannot hold arrays"),
    ("b = Body()\n    c = b", r"'b' is a struct \(Body\)"),
    ("s = Body()", "'s' is a struct parameter; it cannot be assigned"),
    ("s.mass = 1.0", "fields of struct parameter 's' cannot be assigned"),
])
def test_what_struct_locals_refuse_names_the_line(kernel_module, body, message):
    mod = kernel_module(SRC + f'''

@ad.struct
class Bag:
    a: ad.array(dtype=float)


@ad.kernel
def bad(s: Body, y: ad.array(dtype=float)):
    i = ad.tid()
    {body}
''')
    with pytest.raises(TransformError, match=message) as err:
        ad.source(mod.bad, stage="parse")
    line = SRC.count("\n") + 15 + body.count("\n")
    assert f"{mod.__file__}:{line}" in str(err.value)


WARP_PROGRAM = '''
@wp.struct
class Body:
    pos: wp.vec3
    mass: float


@wp.func
def energy(b: Body, g: float) -> float:
    return b.mass * g * b.pos[2] + wp.dot(b.pos, b.pos)


@wp.kernel
def bodies(x: wp.array(dtype=wp.vec3), m: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    b = Body()
    b.pos = x[i] * 2.0
    b.mass = m[i]
    y[i] = energy(b, 9.8) + b.mass


def run(x, m):
    xa = wp.array(x, dtype=wp.vec3, requires_grad=True)
    ma = wp.array(m, dtype=float, requires_grad=True)
    y = wp.zeros(len(m), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(bodies, len(m), inputs=[xa, ma], outputs=[y])
    tape.backward(grads={y: wp.array(np.ones(len(m)), dtype=float)})
    return y.numpy(), xa.grad.numpy().reshape(-1, 3), ma.grad.numpy()
'''


def test_warp_spelling(kernel_module):
    mod = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    y, gx, gm = mod.run(X, M)
    pos = 2.0 * X
    np.testing.assert_allclose(y, M * 9.8 * pos[:, 2] + (pos * pos).sum(1) + M, rtol=1e-6)
    np.testing.assert_allclose(gm, 9.8 * pos[:, 2] + 1.0, rtol=1e-6)
    want = 8.0 * X
    want[:, 2] += 2.0 * 9.8 * M
    np.testing.assert_allclose(gx, want, rtol=1e-6)


def test_nvidia_warp_computes_the_same(kernel_module):
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    real = kernel_module("import warp as wp\nwp.config.quiet = True\n" + WARP_PROGRAM)
    ours = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    for got, want in zip(ours.run(X, M), real.run(X, M)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
