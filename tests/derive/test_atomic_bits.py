"""``ad.atomic_and`` / ``atomic_or`` / ``atomic_xor`` (Warp's, issue 38) on arrays of ints:
``arr[i] op= v`` in one atomic step (IR ``AtomicBits``; ``old = ad.atomic_or(...)``, the
element's old value as Warp returns it: ``AtomicFetch``, refused where the backward
would need that value; emit/cuda.py writes
``cuda.atomic.and_``/``or_``/``xor``; a colliding one runs serially on the CPU: pass
parallel). Checked against NumPy on every backend (python, numba, the CUDA simulator),
int32, int64 and uint32 (Warp's flags: the value wrapped to 32 bits), 2-D indices; a
kernel that also computes a float output keeps its gradient (central differences in
float64); the old value a kernel takes, and Python calls, are Warp's; refusals name the
line; and against NVIDIA
Warp's CPU device where it is installed (skipped otherwise).
"""
import os

import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from adjoint.errors import TransformError
from tests.conftest import central_fd

SRC = '''
@ad.kernel
def flags(b: ad.array(dtype=ad.int32), a: ad.array(dtype=ad.int32),
          w: ad.array(dtype=ad.int64, ndim=2), u: ad.array(dtype=ad.uint32),
          x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_or(a, i % 2, b[i])
    ad.atomic_and(a, 2, b[i] | 16)
    ad.atomic_xor(a, 3, b[i])
    ad.atomic_or(w, i % 2, 1, ad.lshift(b[i], 40))
    ad.atomic_xor(w, 0, 0, b[i] * 77)
    ad.atomic_or(u, 0, -1 - b[i])
    ad.atomic_xor(u, 1, b[i] * 1000003)
    ad.atomic_and(u, 2, ~b[i])
    if b[i] & 2:
        y[i] = x[i] * x[i] * float(b[i])
    else:
        y[i] = math.sin(x[i])
'''

B = np.array([1, 2, 6, 12, 7], np.int32)
X = np.array([0.3, -0.7, 0.9, 0.1, -1.2])
N = len(B)


def _expected():
    a = np.array([0, 0, -1, 5], np.int64)
    w = np.zeros((2, 2), np.int64)
    u = np.array([0, 0, 2**32 - 1], np.int64)
    for i, b in enumerate(B.astype(np.int64)):
        a[i % 2] |= b
        a[2] &= b | 16
        a[3] ^= b
        w[i % 2, 1] |= b << 40
        w[0, 0] ^= b * 77
        u[0] |= (-1 - b) % 2**32
        u[1] ^= (b * 1000003) % 2**32
        u[2] &= (~b) % 2**32
    return a.astype(np.int32), w, u.astype(np.uint32)


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _run(m, x, tape=None):
    dev = _device()
    ints = [ad.array(B, dtype=ad.int32, device=dev),
            ad.array(np.array([0, 0, -1, 5], np.int32), dtype=ad.int32, device=dev),
            ad.zeros((2, 2), dtype=ad.int64, device=dev),
            ad.array(np.array([0, 0, 2**32 - 1], np.uint32), dtype=ad.uint32, device=dev)]
    xa = ad.array(x, requires_grad=True, device=dev)
    y = ad.zeros(N, requires_grad=True, device=dev)
    if tape is None:
        ad.launch(m.flags, N, inputs=ints[:1], outputs=ints[1:] + [xa, y])
    else:
        with tape:
            ad.launch(m.flags, N, inputs=ints[:1], outputs=ints[1:] + [xa, y])
    return ints[1:], xa, y


def test_bit_atomics_match_numpy(backend, kernel_module):
    m = kernel_module(SRC)
    (a, w, u), _, _ = _run(m, X)
    want_a, want_w, want_u = _expected()
    np.testing.assert_array_equal(a.numpy(), want_a)
    np.testing.assert_array_equal(w.numpy(), want_w)
    np.testing.assert_array_equal(u.numpy(), want_u)
    assert u.numpy().dtype == np.uint32


def test_a_kernel_with_bit_atomics_keeps_its_gradient(backend, kernel_module):
    m = kernel_module(SRC)
    tape = ad.Tape()
    _, xa, y = _run(m, X, tape)
    seed = np.linspace(0.5, 1.5, N)
    tape.backward(grads={y: ad.array(seed, device=_device())})

    def loss(x):
        return float(np.dot(seed, _run(m, x)[2].numpy()))
    np.testing.assert_allclose(xa.grad.numpy(), central_fd(loss, X), rtol=1e-7, atol=1e-9)


def test_python_calls_return_the_old_value():
    a = np.array([6, 3], np.int32)
    assert ad.atomic_or(a, 0, 1) == 6 and a[0] == 7
    assert ad.atomic_and(a, 1, 5) == 3 and a[1] == 1
    assert ad.atomic_xor(a, 1, 3) == 1 and a[1] == 2


OLD = '''
@ad.kernel
def claim(flags: ad.array(dtype=ad.int32), first: ad.array(dtype=ad.int32),
          seen: ad.array(dtype=ad.uint32), bits: ad.array(dtype=ad.int32),
          x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    old = ad.atomic_or(flags, i % 2, ad.lshift(1, i // 2))
    first[i] = old
    s = ad.atomic_xor(seen, 0, i * 3)
    f = ad.atomic_and(flags, 2, ~i)
    bits[i] = (s & 7) + f
    y[i] = x[i] * x[i] * 1.5
'''


def test_the_old_value_is_warps(backend, kernel_module):
    """``old = ad.atomic_or(...)``: the element before this thread's update (the threads
    of a colliding one run in order on the CPU and in the simulator); the backward
    does not need it here, so the kernel keeps its gradient."""
    m = kernel_module(OLD)
    dev = _device()
    n = 6
    flags = ad.array(np.array([0, 0, -1], np.int32), dtype=ad.int32, device=dev)
    first, bits = (ad.zeros(n, dtype=ad.int32, device=dev) for _ in range(2))
    seen = ad.zeros(1, dtype=ad.uint32, device=dev)
    x = ad.array(np.linspace(-1.0, 1.0, n), requires_grad=True, device=dev)
    y = ad.zeros(n, requires_grad=True, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(m.claim, n, inputs=[flags, first, seen, bits, x, y])
    want_flags, want_first, want_bits, acc, f2 = [0, 0], [], [], 0, -1
    for i in range(n):
        want_first.append(want_flags[i % 2])
        want_flags[i % 2] |= 1 << (i // 2)
        want_bits.append((acc & 7) + f2)
        acc ^= i * 3
        f2 &= ~i
    np.testing.assert_array_equal(flags.numpy(), want_flags + [f2])
    np.testing.assert_array_equal(first.numpy(), want_first)
    np.testing.assert_array_equal(bits.numpy(), want_bits)
    assert seen.numpy()[0] == acc
    tape.backward(grads={y: ad.array(np.ones(n), device=dev)})
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * np.linspace(-1.0, 1.0, n), rtol=1e-15)


BRANCH_ON_OLD = '''
@ad.kernel
def k(a: ad.array(dtype=ad.int32), x: ad.array(dtype=float), s: ad.array(dtype=ad.uint8)):
    i = ad.tid()
    old = ad.atomic_or(a, i, 1)
    if old == 0:
        x[i] = 2.0
'''


def test_a_branch_on_an_old_value_runs_forward_and_refuses_its_backward(kernel_module):
    m = kernel_module(BRANCH_ON_OLD)
    a, x = ad.zeros(2, dtype=ad.int32), ad.zeros(2, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.k, 2, inputs=[a, x, ad.zeros(2, dtype=ad.uint8)])
    np.testing.assert_array_equal(x.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(a.numpy(), [1, 1])
    with pytest.raises(ad.LaunchError, match="the old value this atomic returns decides what "
                                             "the backward computes") as err:
        tape.backward(grads={x: ad.array(np.ones(2))})
    assert f"{os.path.basename(m.__file__)}:9: " in str(err.value)


@pytest.mark.parametrize("body, message", [
    ("ad.atomic_xor(x, i, 1)", "atomic_xor needs an array of ints; 'x' is an array of "
                               "float64"),
    ("ad.atomic_and(s, i, 1)", "'s' is an array of uint8: it is stored into"),
])
def test_what_bit_atomics_refuse_names_the_line(kernel_module, body, message):
    m = kernel_module(f'''
@ad.kernel
def k(a: ad.array(dtype=ad.int32), x: ad.array(dtype=float), s: ad.array(dtype=ad.uint8)):
    i = ad.tid()
    {body}
''')
    with pytest.raises(TransformError, match=message) as err:
        ad.launch(m.k, 2, inputs=[ad.zeros(2, dtype=ad.int32), ad.zeros(2),
                                  ad.zeros(2, dtype=ad.uint8)])
    assert f"{m.__file__}:9" in str(err.value)


WARP_PROGRAM = '''
@wp.kernel
def bits(b: wp.array(dtype=int), a: wp.array(dtype=int), u: wp.array(dtype=wp.uint32),
         o: wp.array(dtype=int)):
    i = wp.tid()
    wp.atomic_or(a, i % 2, b[i])
    wp.atomic_and(a, 2, b[i] | 16)
    old = wp.atomic_xor(a, 3, b[i])
    o[i] = old
    wp.atomic_or(u, 0, wp.uint32(1) << wp.uint32(b[i] & 31))
    wp.atomic_xor(u, 1, wp.uint32(b[i] * 1000003))


def run(b):
    a = wp.array(np.array([0, 0, -1, 5]), dtype=int)
    u = wp.zeros(2, dtype=wp.uint32)
    o = wp.zeros(len(b), dtype=int)
    wp.launch(bits, dim=len(b), inputs=[wp.array(b, dtype=int)], outputs=[a, u, o])
    return a.numpy(), u.numpy(), o.numpy()
'''


def test_warp_spellings(kernel_module):
    m = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    a, u, o = m.run(B)
    want_a = _expected()[0]
    np.testing.assert_array_equal(o, np.bitwise_xor.accumulate(np.r_[5, B[:-1]]))
    np.testing.assert_array_equal(a, want_a)
    want_u = [np.bitwise_or.reduce(1 << (B.astype(np.int64) & 31)),
              np.bitwise_xor.reduce(B.astype(np.int64) * 1000003 % 2**32)]
    np.testing.assert_array_equal(u, want_u)


def test_nvidia_warp_computes_the_same(kernel_module):
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    real = kernel_module("import warp as wp\nwp.config.quiet = True\n" + WARP_PROGRAM)
    ours = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    for got, want in zip(ours.run(B), real.run(B)):
        np.testing.assert_array_equal(got, want)
