"""float16 arrays (issue 38): stored as float16, computed in float32, gradients stored as
float16, as Warp does (runtime/half.py: a launch runs on float32 copies, rounded back).

Values against NumPy computing in float32 then rounding to float16; gradients through a
float16 intermediate against central differences of a float64 copy of the kernels
(float16 tolerances); on the python and numba backends; struct fields; a recorded step
keeps the float32 values its backward reads; ``launch(adjoint=True)`` on float16
adjoints; on CUDA (proxies widened and rounded on the device) the CPU's values and
gradients; the Warp spelling, and NVIDIA Warp 1.19's CPU device where it is installed
(skipped otherwise); what is refused (forward mode, a checkpointed segment, a capture,
float16 scalars) names why, and the user's line.
"""
import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from tests.conftest import central_fd

SRC = '''
@ad.kernel
def step(x: ad.array(dtype=DT), w: ad.array(dtype=DT), y: ad.array(dtype=DT)):
    i = ad.tid()
    y[i] = ad.sin(x[i]) * w[i] + x[i] * x[i]


@ad.kernel
def total(y: ad.array(dtype=DT), loss: ad.array(dtype=DT)):
    i = ad.tid()
    ad.atomic_add(loss, 0, y[i] * y[i])
'''

X = np.linspace(-1.3, 1.7, 7)
W = np.linspace(0.5, -0.8, 7)
F16 = np.float16
BACKENDS = ["python", "numba"]


@pytest.fixture(params=BACKENDS)
def cpu_backend(request):
    with ad.backend_scope(request.param):
        yield request.param


def _kernels(kernel_module, dtype):
    return kernel_module(SRC.replace("DT", dtype))


def _forward(m, x, w, dtype, tape=None):
    xa = ad.array(x, dtype=dtype, requires_grad=True)
    wa = ad.array(w, dtype=dtype, requires_grad=True)
    y = ad.zeros(len(x), dtype=dtype, requires_grad=True)
    loss = ad.zeros(1, dtype=dtype, requires_grad=True)
    with tape or ad.Tape():
        ad.launch(m.step, len(x), inputs=[xa, wa], outputs=[y])
        ad.launch(m.total, len(x), inputs=[y], outputs=[loss])
    return xa, wa, y, loss


def test_values_are_float32_rounded_to_float16(cpu_backend, kernel_module):
    m = _kernels(kernel_module, "ad.float16")
    _, _, y, loss = _forward(m, X, W, F16)
    x32, w32 = X.astype(F16).astype(np.float32), W.astype(F16).astype(np.float32)
    want = (np.sin(x32) * w32 + x32 * x32).astype(F16)
    assert y.dtype == F16 and y.numpy().dtype == F16 and loss.dtype == F16
    np.testing.assert_allclose(y.numpy().astype(float), want.astype(float), rtol=2**-10)
    y32 = want.astype(np.float32)
    np.testing.assert_allclose(float(loss.numpy()[0]), float(np.sum(y32 * y32)), rtol=2e-3)
    # a numpy float16 array is accepted too, and written back
    out = np.zeros(len(X), F16)
    ad.launch(m.step, len(X), inputs=[X.astype(F16), W.astype(F16)], outputs=[out])
    np.testing.assert_array_equal(out, y.numpy())


def test_gradients_against_float64_central_differences(cpu_backend, kernel_module):
    m16 = _kernels(kernel_module, "ad.float16")
    m64 = _kernels(kernel_module, "float")
    tape = ad.Tape()
    xa, wa, y, loss = _forward(m16, X, W, F16, tape)
    tape.backward(loss)
    assert xa.grad.dtype == F16 and wa.grad.dtype == F16 and y.grad.dtype == F16
    x, w = X.astype(F16).astype(float), W.astype(F16).astype(float)
    for grad, fd in ((xa.grad, central_fd(lambda v: _loss64(m64, v, w), x)),
                     (wa.grad, central_fd(lambda v: _loss64(m64, x, v), w))):
        np.testing.assert_allclose(grad.numpy().astype(float), fd, rtol=1e-2,
                                   atol=1e-2 * np.abs(fd).max())
    assert not np.any(y.grad.numpy())       # (an output's gradient is handed back)


def _loss64(m, x, w):
    return float(_forward(m, x, w, np.float64)[3].numpy()[0])


def test_a_recorded_step_keeps_its_float32_values(cpu_backend, kernel_module):
    m = _kernels(kernel_module, "ad.float16")
    tape = ad.Tape()
    xa, wa, _, loss = _forward(m, X, W, F16, tape)
    tape.backward(loss)
    want = xa.grad.numpy().copy()
    tape.zero()
    xa.numpy()[:] = 0           # (the step holds its own float32 copy of x)
    tape.backward(loss)
    np.testing.assert_array_equal(xa.grad.numpy(), want)


def test_the_backward_launch_on_float16_adjoints(cpu_backend, kernel_module):
    m = _kernels(kernel_module, "ad.float16")
    xa = ad.array(X, dtype=F16)
    wa = ad.array(W, dtype=F16)
    y = ad.zeros(len(X), dtype=F16)
    adj_x, adj_w = ad.zeros(len(X), dtype=F16), ad.zeros(len(X), dtype=F16)
    seed = ad.array(np.ones(len(X)), dtype=F16)
    ad.launch(m.step, len(X), inputs=[xa, wa], outputs=[y], adjoint=True,
              adj_inputs=[adj_x, adj_w], adj_outputs=[seed])
    x, w = X.astype(F16).astype(np.float32), W.astype(F16).astype(np.float32)
    np.testing.assert_allclose(adj_x.numpy().astype(float),
                               (np.cos(x) * w + 2 * x).astype(F16).astype(float), rtol=2**-9)
    np.testing.assert_allclose(adj_w.numpy().astype(float),
                               np.sin(x).astype(F16).astype(float), rtol=2**-9)
    assert not np.any(seed.numpy())         # (handed back, then cleared)


def _on(device, m):
    """A taped forward and backward, and a ``launch(adjoint=True)``, on ``device``."""
    xa = ad.array(X, dtype=F16, requires_grad=True, device=device)
    wa = ad.array(W, dtype=F16, requires_grad=True, device=device)
    y = ad.zeros(len(X), dtype=F16, requires_grad=True, device=device)
    loss = ad.zeros(1, dtype=F16, requires_grad=True, device=device)
    with ad.Tape() as tape:
        ad.launch(m.step, len(X), inputs=[xa, wa], outputs=[y])
        ad.launch(m.total, len(X), inputs=[y], outputs=[loss])
    tape.backward(grads={loss: np.ones(1, F16)})
    adj_x = ad.zeros(len(X), dtype=F16, device=device)
    seed = ad.array(np.linspace(1.0, 2.0, len(X)), dtype=F16, device=device)
    ad.launch(m.step, len(X), inputs=[xa, wa], outputs=[ad.zeros(len(X), dtype=F16,
                                                                   device=device)],
              adjoint=True, adj_inputs=[adj_x, None], adj_outputs=[seed])
    return [a.numpy() for a in (y, loss, xa.grad, wa.grad, adj_x, seed)]


def test_on_cuda_the_cpu_values_and_gradients(kernel_module):
    """On CUDA the float32 proxies live on the device (the copy kernel widens and rounds
    them, to nearest, ties to even, as NumPy does): the CPU's float16 results, bit for bit
    in the simulator; on a GPU a fused multiply-add may move a float32 value by an ulp,
    and its float16 rounding by one float16 ulp."""
    from tests.gpu_tolerance import real_gpu
    m = _kernels(kernel_module, "ad.float16")
    with ad.backend_scope("numba"):
        want = _on("cpu", m)
    with ad.backend_scope("cuda"):
        got = _on("cuda", m)
        gpu = real_gpu()
    for g, w in zip(got, want):
        assert g.dtype == F16
        if gpu:
            np.testing.assert_allclose(g.astype(float), w.astype(float), rtol=2**-10,
                                       atol=2**-24)
        else:
            np.testing.assert_array_equal(g, w)
    assert np.any(want[2]) and not np.any(want[5])   # (gradients; the seed handed back)


def test_float16_fields_of_a_struct(cpu_backend, kernel_module):
    m = kernel_module('''
@ad.struct
class Pair:
    a: ad.array(dtype=ad.float16)
    b: ad.array(dtype=ad.float16)


@ad.kernel
def scale(s: Pair, k: float):
    i = ad.tid()
    s.b[i] = s.a[i] * k
''')
    s = m.Pair()
    s.a = ad.array(X, dtype=F16, requires_grad=True)
    s.b = ad.zeros(len(X), dtype=F16, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.scale, len(X), inputs=[s, 3.0])
    np.testing.assert_array_equal(s.b.numpy(), (X.astype(F16).astype(np.float32) * 3).astype(F16))
    tape.backward(grads={s.b: np.linspace(1, 2, len(X))})
    np.testing.assert_array_equal(s.a.grad.numpy(), (3 * np.linspace(1, 2, len(X))).astype(F16))


def test_what_float16_refuses(kernel_module):
    m = _kernels(kernel_module, "ad.float16")
    args = dict(inputs=[ad.zeros(3, dtype=F16), ad.zeros(3, dtype=F16)],
                outputs=[ad.zeros(3, dtype=F16)])
    with pytest.raises(ad.LaunchError, match="forward mode"):
        ad.launch(m.step, 3, tangents={}, **args)
    segment = ad.checkpoint(lambda: ad.launch(m.step, 3, **args))
    with pytest.raises(ad.LaunchError, match="float16 arrays in a checkpointed segment"):
        with ad.Tape():
            segment()
    bad = kernel_module('''
@ad.kernel
def scale(x: ad.array(dtype=ad.float16), s: ad.float16):
    i = ad.tid()
    x[i] = x[i] * s
''')
    with pytest.raises(ad.TransformError, match="float16 is an array dtype only") as err:
        ad.launch(bad.scale, 1, inputs=[ad.zeros(1, dtype=F16), 1.0])
    assert f"{bad.__file__}:7" in str(err.value)


WARP_PROGRAM = '''
@wp.kernel
def step(x: wp.array(dtype=wp.float16), w: wp.array(dtype=wp.float16),
         y: wp.array(dtype=wp.float16)):
    i = wp.tid()
    y[i] = wp.sin(x[i]) * w[i] + x[i] * x[i]


@wp.kernel
def total(y: wp.array(dtype=wp.float16), loss: wp.array(dtype=wp.float16)):
    i = wp.tid()
    wp.atomic_add(loss, 0, y[i] * y[i])


def run(xs, ws):
    x = wp.array(xs, dtype=wp.float16, requires_grad=True)
    w = wp.array(ws, dtype=wp.float16, requires_grad=True)
    y = wp.zeros(len(xs), dtype=wp.float16, requires_grad=True)
    loss = wp.zeros(1, dtype=wp.float16, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(step, len(xs), inputs=[x, w], outputs=[y])
        wp.launch(total, len(xs), inputs=[y], outputs=[loss])
    tape.backward(loss)
    return y.numpy(), loss.numpy(), x.grad.numpy(), w.grad.numpy()
'''


def test_warp_spelling(kernel_module):
    m = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    y, loss, gx, gw = m.run(X, W)
    assert {a.dtype for a in (y, loss, gx, gw)} == {np.dtype(F16)}
    x, w = X.astype(F16).astype(np.float32), W.astype(F16).astype(np.float32)
    np.testing.assert_allclose(y.astype(float), (np.sin(x) * w + x * x).astype(F16), rtol=2**-10)
    yy = y.astype(np.float32)
    np.testing.assert_allclose(gw.astype(float), 2 * yy * np.sin(x), rtol=1e-2, atol=1e-3)


def test_nvidia_warp_computes_the_same(kernel_module):
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    real = kernel_module("import warp as wp\nwp.config.quiet = True\n" + WARP_PROGRAM)
    ours = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    # Warp rounds each float16 intermediate; adjoint's are float32: a few float16 ulps
    for a, b in zip(ours.run(X, W), real.run(X, W)):
        assert a.dtype == b.dtype == F16
        np.testing.assert_allclose(a.astype(float), b.astype(float), rtol=4e-3,
                                   atol=4e-3 * np.abs(b.astype(float)).max())


def test_a_capture_refuses_float16_launches(kernel_module):
    m = _kernels(kernel_module, "ad.float16")
    tape = ad.Tape()
    _forward(m, X, W, F16, tape)
    with pytest.raises(ad.CaptureError, match="float16 gradients of kernel 'step'"):
        tape.capture()
