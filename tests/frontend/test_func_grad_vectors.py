"""``@ad.func_grad`` of funcs that take and return vectors (issue 38): the rule is written
with the func's vector parameters and an ``adj_ret`` of the func's return type, and
returns the adjoints of the parameters (a vector for a vector); adjoint/build/modules.py
scalarizes it as the func is (frontend/scalarize.py), so it takes and returns components.

A correct rule against central differences in float64 on every backend (python, numba,
the CUDA simulator); a rule that is *not* the derivative (a clipped straight-through
gradient) gives exactly its own values, so the test sees that the rule runs; the same
under ``import adjoint.warp as wp`` (float32); a vector func with ``@ad.func_jvp`` stays
refused, naming the line.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import TransformError
from tests.conftest import central_fd

SRC = '''
@ad.func
def softlen(a: ad.vec3, s: float) -> float:
    return math.sqrt(ad.dot(a, a) + s * s)


@ad.func_grad(softlen)
def softlen_grad(a: ad.vec3, s: float, adj_ret: float):
    r = math.sqrt(ad.dot(a, a) + s * s)
    return a * (adj_ret / r), s * adj_ret / r


@ad.func
def passthrough(v: ad.vec3, w: float) -> ad.vec3:
    return v * w


@ad.func_grad(passthrough)
def passthrough_grad(v: ad.vec3, w: float, adj_ret: ad.vec3):
    g = ad.vec3(ad.clamp(adj_ret[0], -1.0, 1.0), ad.clamp(adj_ret[1], -1.0, 1.0),
                ad.clamp(adj_ret[2], -1.0, 1.0))
    return g, 0.0


@ad.kernel
def energy(x: ad.array(dtype=ad.vec3), s: ad.array(dtype=float), y: ad.array(dtype=float),
           z: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    y[i] = softlen(x[i] * 2.0, s[i]) * s[i]
    z[i] = passthrough(x[i], s[i])
'''

X = np.array([[0.3, -0.7, 0.9], [0.1, -1.2, 0.4], [1.1, 0.2, -0.3], [0.0, 0.0, 0.0]])
S = np.array([0.5, -1.5, 2.0, 0.8])
N = len(S)


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _run(m, x, s, tape=None):
    dev = _device()
    args = [ad.array(x, dtype=ad.vec3, requires_grad=True, device=dev),
            ad.array(s, requires_grad=True, device=dev),
            ad.zeros(N, requires_grad=True, device=dev),
            ad.zeros(N, dtype=ad.vec3, requires_grad=True, device=dev)]
    if tape is None:
        ad.launch(m.energy, N, inputs=args[:2], outputs=args[2:])
    else:
        with tape:
            ad.launch(m.energy, N, inputs=args[:2], outputs=args[2:])
    return args


def test_a_vector_rule_matches_central_differences(backend, kernel_module):
    m = kernel_module(SRC)
    tape = ad.Tape()
    x, s, y, z = _run(m, X, S, tape)
    r = np.sqrt(((2 * X) ** 2).sum(1) + S * S)
    np.testing.assert_allclose(y.numpy(), r * S, rtol=1e-14)
    np.testing.assert_allclose(z.numpy(), X * S[:, None], rtol=1e-14)
    seed = np.array([0.7, -1.3, 0.4, 1.1])
    tape.backward(grads={y: ad.array(seed, device=_device())})
    np.testing.assert_allclose(
        x.grad.numpy(), central_fd(lambda v: float(np.dot(seed, _run(m, v, S)[2].numpy())), X),
        rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(
        s.grad.numpy(), central_fd(lambda v: float(np.dot(seed, _run(m, X, v)[2].numpy())), S),
        rtol=1e-7, atol=1e-8)


def test_the_rule_runs_not_the_derivative(backend, kernel_module):
    m = kernel_module(SRC)
    tape = ad.Tape()
    x, s, y, z = _run(m, X, S, tape)
    seed = np.array([[3.0, -0.5, 0.25], [-2.0, 1.5, 0.0], [0.5, 0.5, -4.0], [1.0, 2.0, 3.0]])
    tape.backward(grads={z: ad.array(seed, dtype=ad.vec3, device=_device())})
    np.testing.assert_array_equal(x.grad.numpy(), np.clip(seed, -1.0, 1.0))
    np.testing.assert_array_equal(s.grad.numpy(), np.zeros(N))


WARP_PROGRAM = '''
@wp.func
def softlen(a: wp.vec3, s: float) -> float:
    return wp.sqrt(wp.dot(a, a) + s * s)


@wp.func_grad(softlen)
def softlen_grad(a: wp.vec3, s: float, adj_ret: float):
    r = wp.sqrt(wp.dot(a, a) + s * s)
    return a * (adj_ret / r), s * adj_ret / r


@wp.kernel
def energy(x: wp.array(dtype=wp.vec3), s: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = softlen(x[i], s[i])


def run(x, s):
    xa = wp.array(x, dtype=wp.vec3, requires_grad=True)
    sa = wp.array(s, dtype=float, requires_grad=True)
    y = wp.zeros(len(s), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(energy, len(s), inputs=[xa, sa], outputs=[y])
    tape.backward(grads={y: wp.array(np.ones(len(s)), dtype=float)})
    return y.numpy(), xa.grad.numpy(), sa.grad.numpy()
'''


def test_under_adjoint_warp_in_float32(kernel_module):
    m = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    x, s = X[:3], S[:3]
    y, gx, gs = m.run(x, s)
    r = np.sqrt((x * x).sum(1) + s * s)
    assert gx.dtype == np.float32
    np.testing.assert_allclose(y, r, rtol=1e-6)
    np.testing.assert_allclose(gx, x / r[:, None], rtol=1e-6)
    np.testing.assert_allclose(gs, s / r, rtol=1e-6)


def test_a_vector_func_with_a_hand_written_jvp_is_refused(kernel_module):
    m = kernel_module('''
@ad.func
def f(a: ad.vec3) -> float:
    return ad.dot(a, a)


@ad.func_jvp(f)
def f_jvp(a: ad.vec3, dot_a: ad.vec3):
    return ad.dot(a, a), 2.0 * ad.dot(a, dot_a)


@ad.kernel
def k(x: ad.array(dtype=ad.vec3), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = f(x[i])
''')
    with pytest.raises(TransformError, match=r"hand-written JVP \(ad.func_jvp\)") as err:
        ad.launch(m.k, 1, inputs=[ad.zeros(1, dtype=ad.vec3)], outputs=[ad.zeros(1)])
    assert f"{m.__file__}:19" in str(err.value)
