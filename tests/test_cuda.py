"""CUDA-only behaviour (numba's simulator in CI; real hardware with NUMBA_ENABLE_CUDASIM=0)."""
import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_cuda

pytestmark = pytest.mark.skipif(not backend_cuda.available(), reason="no CUDA device or simulator")

LOOPS = '''
@ad.kernel(loop_capacity=4)
def powers(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    p = 1.0
    for k in range(n):
        p = p * x[i] + 0.5
    out[i] = p

@ad.kernel
def scatter(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int32), out: ad.array(dtype=float)):
    i = ad.tid()
    out[idx[i]] += x[i] * x[i]
'''


def test_loop_past_capacity_is_a_clear_error(kernel_module):
    m = kernel_module(LOOPS)
    x = ad.array([1.1, 0.9], requires_grad=True, device="cuda")
    out = ad.zeros(2, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(m.powers, 2, inputs=[10, x], outputs=[out])
    with pytest.raises(ad.AdjointError) as err:
        tape.backward(grads={out: np.ones(2)})
    msg = str(err.value)
    line = open(m.__file__).read().splitlines().index("    for k in range(n):") + 1
    assert f"line {line}" in msg and "loop_capacity" in msg and "powers" in msg


def test_loop_within_capacity_matches_cpu(kernel_module):
    m = kernel_module(LOOPS)
    grads = {}
    for device in ("cpu", "cuda"):
        x = ad.array([1.1, 0.9, -0.4], requires_grad=True, device=device)
        out = ad.zeros(3, requires_grad=True, device=device)
        with ad.Tape() as tape:
            ad.launch(m.powers, 3, inputs=[4, x], outputs=[out])
        tape.backward(grads={out: np.array([1.0, 2.0, 3.0])})
        grads[device] = (out.numpy(), x.grad.numpy())
    np.testing.assert_allclose(grads["cuda"][0], grads["cpu"][0], rtol=1e-12)
    np.testing.assert_allclose(grads["cuda"][1], grads["cpu"][1], rtol=1e-12)
    xs = np.array([1.1, 0.9, -0.4])
    # closed form: p4 = x^4 + .5(x^3 + x^2 + x + 1); dp4/dx = 4x^3 + .5(3x^2 + 2x + 1)
    np.testing.assert_allclose(grads["cpu"][1], np.array([1.0, 2.0, 3.0]) *
                               (4 * xs ** 3 + 0.5 * (3 * xs ** 2 + 2 * xs + 1)), rtol=1e-12)


def test_colliding_accumulation_uses_atomics(kernel_module):
    m = kernel_module(LOOPS)
    source = m.scatter.spec_for("cuda") and open(m.scatter.modules["cuda"].__file__).read()
    assert "cuda.atomic.add(out, t" in source or "cuda.atomic.add(out," in source
    x = ad.array(np.arange(1.0, 9.0), requires_grad=True, device="cuda")
    idx = ad.array(np.array([0, 1, 0, 1, 0, 1, 0, 1], np.int32), device="cuda")
    out = ad.zeros(2, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(m.scatter, 8, inputs=[x, idx], outputs=[out])
    tape.backward(grads={out: np.array([1.0, 10.0])})
    xs = np.arange(1.0, 9.0)
    np.testing.assert_allclose(out.numpy(), [(xs[0::2] ** 2).sum(), (xs[1::2] ** 2).sum()])
    np.testing.assert_allclose(x.grad.numpy(), 2 * xs * np.array([1.0, 10.0] * 4))


def test_colliding_store_has_no_cuda_backward(kernel_module):
    m = kernel_module('''
        @ad.kernel
        def last_writer(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int32),
                        out: ad.array(dtype=float)):
            i = ad.tid()
            out[idx[i]] = x[i]
        ''')
    x = ad.array([1.0, 2.0], requires_grad=True, device="cuda")
    idx = ad.array(np.array([0, 0], np.int32), device="cuda")
    out = ad.zeros(1, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(m.last_writer, 2, inputs=[x, idx], outputs=[out])
    with pytest.raises(ad.AdjointError, match="no CUDA backward"):
        tape.backward(grads={out: np.ones(1)})


def test_arrays_live_on_the_device():
    a = ad.array([1.0, 2.0], requires_grad=True, device="cuda")
    assert a.device == "cuda" and a.grad.device == "cuda"
    assert hasattr(a.data, "copy_to_host")
    host = a.numpy()
    host[0] = 99.0                                  # a copy: the device array is unchanged
    assert a.numpy()[0] == 1.0


def test_device_arrays_are_wrapped_without_a_copy(kernel_module):
    from numba import cuda
    m = kernel_module(LOOPS)
    d = cuda.to_device(np.array([1.0, 2.0, 3.0]))
    x = ad.Array(d, requires_grad=True, device="cuda")
    assert x.data is d
    out = ad.zeros(3, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(m.powers, 3, inputs=[1, x], outputs=[out])
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_allclose(out.numpy(), [1.5, 2.5, 3.5])
    x.fill_(5.0)                                   # writes through to the caller's array
    np.testing.assert_allclose(d.copy_to_host(), [5.0, 5.0, 5.0])
