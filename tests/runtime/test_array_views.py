"""``Array.reshape``, ``flatten`` and ``view`` (runtime/array.py): views of one memory, their
gradients views of one gradient; Warp's ``Tape.gradients`` (runtime/tape.py); the
optimizers' ``reset_internal_state`` (adjoint/tapes/optim.py); a tuple for a vector parameter
in ``wp.launch`` (adjoint/warp/runtime.py). Per backend (python, numba, the CUDA
simulator) where a kernel runs.
"""
import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp
from tests.conftest import central_fd


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    import importlib.util
    import sys
    path = tmp_path_factory.mktemp("views") / "array_view_kernels.py"
    path.write_text('''
import adjoint as ad


@ad.kernel
def square2d(x: ad.array(dtype=float, ndim=2), y: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    y[i, j] = x[i, j] * x[i, j] * float(j + 1)


@ad.kernel
def total(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(loss, 0, ad.sin(x[i]) * x[i])


@ad.kernel
def double_bits(x: ad.array(dtype=ad.int64), y: ad.array(dtype=ad.int64)):
    i = ad.tid()
    y[i] = x[i] * 2
''')
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def test_a_kernel_writing_a_view_writes_the_array(backend, kernels):
    dev = _device()
    x = ad.array(np.arange(6.0), device=dev)
    y = ad.zeros(6, device=dev)
    xv, yv = x.reshape(2, 3), y.reshape((2, -1))
    assert xv.shape == (2, 3) and yv.shape == (2, 3) and y.flatten().shape == (6,)
    ad.launch(kernels.square2d, (2, 3), inputs=[xv], outputs=[yv])
    want = np.arange(6.0) ** 2 * np.tile([1.0, 2.0, 3.0], 2)
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(yv.numpy(), want.reshape(2, 3))
    x.fill_(2.0)                                        # and the other way round
    np.testing.assert_array_equal(xv.numpy(), np.full((2, 3), 2.0))


def test_the_gradient_of_a_view_is_a_view_of_the_gradient(backend, kernels):
    dev = _device()
    rng = np.random.default_rng(3)
    x0 = rng.normal(size=6)
    seed = rng.uniform(-1, 1, (2, 3))

    def run(values, seed=None):
        x = ad.array(values, requires_grad=True, device=dev)
        y = ad.zeros((2, 3), requires_grad=True, device=dev)
        xv = x.reshape((2, 3))
        assert xv.requires_grad and xv.grad.shape == (2, 3)
        tape = ad.Tape()
        with tape:
            ad.launch(kernels.square2d, (2, 3), inputs=[xv], outputs=[y])
        if seed is None:
            return y.numpy()
        tape.backward(grads={y: seed})
        assert tape.gradients[xv] is xv.grad and tape.gradients[y] is y.grad
        np.testing.assert_array_equal(xv.grad.numpy(), x.grad.numpy().reshape(2, 3))
        return x.grad.numpy()

    grad = run(x0, seed)
    np.testing.assert_allclose(grad, central_fd(lambda v: np.sum(seed * run(v)), x0),
                               rtol=1e-7, atol=1e-8)


def test_a_flattened_view_and_tape_gradients_after_backward(backend, kernels):
    dev = _device()
    x0 = np.linspace(-1.0, 1.0, 6).reshape(2, 3)

    def run(values, grad=False):
        x = ad.array(values, requires_grad=True, device=dev)
        loss = ad.zeros(1, requires_grad=True, device=dev)
        tape = ad.Tape()
        with tape:
            ad.launch(kernels.total, 6, inputs=[x.flatten()], outputs=[loss])
        if not grad:
            return loss.numpy()[0]
        tape.backward(loss=loss)
        assert x not in tape.gradients         # the view was launched, not x
        return x.grad.numpy()

    np.testing.assert_allclose(run(x0, True), central_fd(run, x0), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("through", ["view read, array overwritten",
                                     "array's view read, another view overwritten"])
def test_an_overwrite_through_another_view_keeps_what_the_tape_read(backend, kernels, through):
    """A recorded launch read the memory through one ``Array``; a write through another on
    the same memory (runtime/watch.py names memory by its allocation) lets the tape keep
    the values read, so the gradient is that at the values the launch saw."""
    dev = _device()
    x0 = np.linspace(-1.0, 1.0, 6)
    x = ad.array(x0.reshape(2, 3), requires_grad=True, device=dev)
    loss = ad.zeros(1, requires_grad=True, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.total, 6, inputs=[x.flatten()], outputs=[loss])
    (x if through.startswith("view") else x.reshape(3, 2)).fill_(0.0)
    tape.backward(loss=loss)
    np.testing.assert_allclose(x.grad.numpy().reshape(-1), np.cos(x0) * x0 + np.sin(x0),
                               rtol=1e-12)


def test_view_as_another_dtype_shares_the_bits(backend, kernels):
    dev = _device()
    x = ad.array(np.array([1.0, -2.5, 3.0]), requires_grad=True, device=dev)
    bits = x.view(ad.int64)
    assert bits.dtype == np.int64 and bits.grad is None and not bits.requires_grad
    np.testing.assert_array_equal(bits.numpy(), x.numpy().view(np.int64))
    y = ad.zeros(3, device=dev)
    ad.launch(kernels.double_bits, 3, inputs=[bits, y.view(ad.int64)])  # (ints on floats)
    np.testing.assert_array_equal(y.numpy().view(np.int64),
                                  np.array([1.0, -2.5, 3.0]).view(np.int64) * 2)
    same = x.view(ad.float64)
    assert same.grad is not None
    same.grad.fill_(4.0)
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0, 4.0])


def test_views_refuse_what_needs_a_copy():
    x = ad.zeros(6)
    with pytest.raises(ValueError, match=r"shape \(6,\) as shape \(4, 2\)"):
        x.reshape(4, 2)
    with pytest.raises(ValueError, match="as shape"):
        x.reshape(-1, -1)
    with pytest.raises(TypeError, match="a float32 has 4 bytes"):
        x.view(ad.float32)
    with pytest.raises(TypeError, match="scalar dtype"):
        x.view(ad.vec3)
    assert wp.zeros(4, dtype=wp.float32).view(wp.int32).dtype == np.int32


@pytest.mark.parametrize("make", [lambda p: ad.optim.Adam([p], lr=0.1),
                                  lambda p: ad.optim.SGD([p], lr=0.1, momentum=0.9),
                                  lambda p: wp.optim.Adam([p], lr=0.1),
                                  lambda p: wp.optim.SGD([p], lr=0.1, momentum=0.9)],
                         ids=["ad.Adam", "ad.SGD", "wp.Adam", "wp.SGD"])
def test_reset_internal_state_makes_the_next_step_a_first_step(make):
    g = ad.array(np.array([0.5, -1.0, 2.0]))
    used, fresh = ad.array(np.ones(3)), ad.array(np.ones(3))
    opt = make(used)
    for _ in range(3):
        opt.step([g])
    start = used.numpy().copy()
    opt.reset_internal_state()
    opt.step([g])
    make(fresh).step([g])
    np.testing.assert_allclose(used.numpy() - start, fresh.numpy() - 1.0, rtol=1e-12)


def test_a_tuple_or_list_for_a_vector_parameter(backend, tmp_path):
    import importlib.util
    import sys
    path = tmp_path / f"vector_argument_{backend}.py"
    path.write_text('''
import adjoint.warp as wp


@wp.kernel
def shift(offset: wp.vec3, scale: wp.mat22, x: wp.array(dtype=wp.vec3),
          out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = x[i] + offset * scale[1, 0]
''')
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    dev = _device()
    x = wp.array(np.ones((2, 3)), dtype=wp.vec3, device=dev)
    out = wp.zeros(2, dtype=wp.vec3, device=dev)
    wp.launch(mod.shift, dim=2, inputs=[(1.0, 2.0, 3.0), [[1.0, 0.0], [2.0, 1.0]], x],
              outputs=[out], device=dev)
    np.testing.assert_array_equal(out.numpy(), [[3.0, 5.0, 7.0]] * 2)
    wp.launch(mod.shift, dim=2, inputs=[wp.vec3(1.0, 1.0, 1.0), wp.mat22(0, 0, 1, 0), x],
              outputs=[out], device=dev)
    np.testing.assert_array_equal(out.numpy(), [[2.0, 2.0, 2.0]] * 2)
