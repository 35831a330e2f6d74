"""uint64 (Warp's ``wp.uint64``, issue 38): arrays and scalar parameters of uint64, held in a
kernel as an int64 of the same bits (``ad.uint64(a[i])`` as loaded, frontend/vecexpr.py;
runtime/intops.py ``to_uint64``; a scalar's bits at the launch, runtime/spec.py). So
``+``, ``-``, ``*``, bit operations and ``<<`` wrap modulo 2**64 as Warp's do, and a store
writes those bits; a comparison, division, ``>>`` or ``float()`` of a value from 2**63 on
reads it as negative (docs/from-warp.md).

Checked against Python's arbitrary-precision ints mod 2**64 on every backend (python,
numba, the CUDA simulator), bit for bit; a float output computed from uint64 values
keeps its gradient (central differences in float64); ``wp.uint64`` under
``adjoint.warp`` against NVIDIA Warp's CPU device where it is installed (skipped
otherwise); a scalar out of range and ``+=`` into a uint64 array are refused.
"""
import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from adjoint.errors import TransformError
from tests.conftest import central_fd

M = 2**64
MUL = 6364136223846793005

SRC = f'''
@ad.kernel
def hashes(a: ad.array(dtype=ad.uint64), n: ad.uint64, out: ad.array(dtype=ad.uint64, ndim=2),
           x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    h = a[i] * {MUL} + n
    out[i, 0] = h
    out[i, 1] = h ^ ad.lshift(h, 13)
    out[i, 2] = (a[i] | 1) - ad.uint64(-5)
    out[i, 3] = ~a[i] & n
    y[i] = x[i] * x[i] * float(a[i] & 255)
'''

A = np.array([1, 2**64 - 1, 2**63, 12345, 2**63 - 1], np.uint64)
N_ARG = 2**64 - 3
X = np.array([0.5, -1.5, 2.0, 0.25, 1.0])


def _expected(a, n):
    out = []
    for v in map(int, a):
        h = (v * MUL + n) % M
        out.append([h, (h ^ (h << 13)) % M, ((v | 1) - (M - 5)) % M, (~v & n) % M])
    return np.array(out, dtype=np.uint64)


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _run(m, x, tape=None):
    dev = _device()
    out = ad.zeros((len(A), 4), dtype=ad.uint64, device=dev)
    xa = ad.array(x, requires_grad=True, device=dev)
    y = ad.zeros(len(A), requires_grad=True, device=dev)
    args = dict(dim=len(A), inputs=[ad.array(A, dtype=ad.uint64, device=dev), N_ARG, out, xa],
                outputs=[y])
    if tape is None:
        ad.launch(m.hashes, **args)
    else:
        with tape:
            ad.launch(m.hashes, **args)
    return out, xa, y


def test_uint64_wraps_as_warp_does(backend, kernel_module):
    m = kernel_module(SRC)
    out, _, _ = _run(m, X)
    assert out.numpy().dtype == np.uint64
    np.testing.assert_array_equal(out.numpy(), _expected(A, N_ARG))


def test_a_float_computed_from_uint64_keeps_its_gradient(backend, kernel_module):
    m = kernel_module(SRC)
    tape = ad.Tape()
    _, xa, y = _run(m, X, tape)
    low = (A & np.uint64(255)).astype(float)
    np.testing.assert_allclose(y.numpy(), X * X * low, rtol=1e-15)
    seed = np.linspace(0.5, 1.5, len(A))
    tape.backward(grads={y: ad.array(seed, device=_device())})
    fd = central_fd(lambda v: float(np.dot(seed, _run(m, v)[2].numpy())), X)
    np.testing.assert_allclose(xa.grad.numpy(), fd, rtol=1e-7, atol=1e-8)


def test_what_uint64_refuses(kernel_module):
    m = kernel_module(SRC)
    with pytest.raises(OverflowError):
        ad.launch(m.hashes, 1, inputs=[ad.zeros(1, dtype=ad.uint64), -1,
                                       ad.zeros((1, 4), dtype=ad.uint64), ad.zeros(1)],
                  outputs=[ad.zeros(1)])
    bad = kernel_module('''
@ad.kernel
def bad(a: ad.array(dtype=ad.uint64)):
    i = ad.tid()
    a[i] += 1
''')
    with pytest.raises(TransformError, match="'a' is an array of uint64: it is stored into") \
            as err:
        ad.launch(bad.bad, 1, inputs=[ad.zeros(1, dtype=ad.uint64)])
    assert f"{bad.__file__}:9" in str(err.value)


WARP_PROGRAM = '''
@wp.kernel
def mix(a: wp.array(dtype=wp.uint64), n: wp.uint64, out: wp.array(dtype=wp.uint64)):
    i = wp.tid()
    h = a[i] * wp.uint64(6364136223846793005) + n
    out[i] = h ^ (a[i] << wp.uint64(7))


def run(a, n):
    out = wp.zeros(len(a), dtype=wp.uint64)
    wp.launch(mix, len(a), inputs=[wp.array(a, dtype=wp.uint64), wp.uint64(n)], outputs=[out])
    return out.numpy()
'''


def test_warp_spelling(kernel_module):
    m = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    want = [((v * MUL + N_ARG) % M) ^ ((v << 7) % M) for v in map(int, A)]
    np.testing.assert_array_equal(m.run(A, N_ARG), np.array(want, dtype=np.uint64))


def test_nvidia_warp_computes_the_same(kernel_module):
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    real = kernel_module("import warp as wp\nwp.config.quiet = True\n" + WARP_PROGRAM)
    ours = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    np.testing.assert_array_equal(ours.run(A, N_ARG), real.run(A, N_ARG))
