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


@pytest.fixture
def no_host_transfers(monkeypatch):
    """Inside ``with no_host_transfers():`` any copy between host and device fails."""
    import contextlib
    cls = type(ad.zeros(1, device="cuda").data)
    orig_to_host, orig_to_device = cls.copy_to_host, cls.copy_to_device

    def to_host(self, *args, **kwargs):
        raise AssertionError("a device array was copied to the host")

    def to_device(self, ary, *args, **kwargs):
        if isinstance(ary, np.ndarray):
            raise AssertionError("a host array was copied to the device")
        return orig_to_device(self, ary, *args, **kwargs)

    from numba import cuda
    orig_new = cuda.to_device

    def new_on_device(ary, *args, **kwargs):
        raise AssertionError("a host array was copied to a new device array")

    @contextlib.contextmanager
    def guard():
        monkeypatch.setattr(cls, "copy_to_host", to_host)
        monkeypatch.setattr(cls, "copy_to_device", to_device)
        monkeypatch.setattr(cuda, "to_device", new_on_device)
        try:
            yield
        finally:
            monkeypatch.setattr(cls, "copy_to_host", orig_to_host)
            monkeypatch.setattr(cls, "copy_to_device", orig_to_device)
            monkeypatch.setattr(cuda, "to_device", orig_new)
    return guard


def test_tape_work_stays_on_the_device(kernel_module, no_host_transfers):
    """Zeroing, device seeds, clones, copies and their backward, scratch adjoints, and
    the backward of a kernel without loop stacks (no status to read back): nothing
    goes through host memory on the GPU. (Unchecked: a kernel that checks a gathered
    index is given a status row, which the end of the backward reads back when a launch
    is pending, see test_cuda_faults.py.)"""
    m = kernel_module(LOOPS.replace("@ad.kernel\ndef scatter", "@ad.kernel(bounds_check=False)\n"
                                    "def scatter"))
    x = ad.array([0.5, -1.0, 2.0, 3.0], requires_grad=True, device="cuda")
    idx = ad.array(np.array([1, 0, 1, 3], np.int32), device="cuda")
    out = ad.zeros(4, requires_grad=True, device="cuda")
    z = ad.zeros(6, requires_grad=True, device="cuda")
    seed = ad.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], device="cuda")
    with no_host_transfers():
        with ad.Tape() as tape:
            y = ad.clone(x)
            ad.launch(m.scatter, 4, inputs=[y, idx], outputs=[out])
            ad.copy(z, out, dest_offset=2, count=4)
            ad.copy(z, z, dest_offset=0, src_offset=3, count=2)   # overlapping, one buffer
        tape.backward(grads={z: seed})
        ad.launch(m.scatter, 4, inputs=[y, idx], outputs=[out], adjoint=True,
                  adj_inputs=[None, None], adj_outputs=[out.grad])   # x's adjoint: scratch
    # z = [out[1], out[2], out[0], out[1], out[2], out[3]] after the forward copies,
    # out[k] = sum of y[i]^2 over idx[i] == k
    xs = np.array([0.5, -1.0, 2.0, 3.0])
    np.testing.assert_allclose(z.numpy(), [xs[0] ** 2 + xs[2] ** 2, 0.0, xs[1] ** 2,
                                           xs[0] ** 2 + xs[2] ** 2, 0.0, xs[3] ** 2])
    # d z/d out: out[0] <- seed[2]; out[1] <- seed[0] + seed[3]... the copy z[0:2] = z[3:5]
    # overwrote z[0:2] (seeded 1, 2), whose adjoints pass to z[3], z[4]
    adj_out = np.array([3.0, 4.0 + 1.0, 5.0 + 2.0, 6.0])
    np.testing.assert_allclose(x.grad.numpy(), 2 * xs * adj_out[[1, 0, 1, 3]])
    with no_host_transfers():
        tape.zero()
        x.fill_(0.25)
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(4))
    np.testing.assert_array_equal(x.numpy(), np.full(4, 0.25))


class _Interface:
    """An object exposing only ``__cuda_array_interface__``, as a PyTorch CUDA tensor
    or a CuPy array does. Under numba's simulator device memory is host memory, so a
    numpy array's memory stands in for the GPU's; on real hardware a device array's."""

    def __init__(self, arr, strides=None):
        self.base = arr
        if isinstance(arr, np.ndarray):
            ptr, shape, typestr = arr.ctypes.data, arr.shape, arr.dtype.str
        else:
            iface = arr.__cuda_array_interface__
            ptr, shape, typestr = iface["data"][0], iface["shape"], iface["typestr"]
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "strides": strides,
                                         "version": 3}


def _interface_of(values):
    from adjoint.runtime.backend_cuda import simulated
    if simulated():
        host = np.array(values)
        return _Interface(host), host.__array__
    from numba import cuda
    dev = cuda.to_device(np.array(values))
    return _Interface(dev), dev.copy_to_host


def test_cuda_array_interface_is_wrapped_without_a_copy(kernel_module):
    m = kernel_module(LOOPS)
    xi, x_now = _interface_of([1.0, 2.0, 3.0])
    oi, out_now = _interface_of(np.zeros(3))
    x = ad.Array(xi, requires_grad=True, device="cuda")
    out = ad.Array(oi, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(m.powers, 3, inputs=[2, x], outputs=[out])
    tape.backward(grads={out: np.ones(3)})
    xs = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(out_now(), xs ** 2 + 0.5 * xs + 0.5)   # the caller's memory
    np.testing.assert_allclose(x.grad.numpy(), 2 * xs + 0.5)
    x.fill_(4.0)
    np.testing.assert_allclose(x_now(), [4.0, 4.0, 4.0])


def test_cuda_array_interface_refusals():
    host = np.zeros((2, 3))
    with pytest.raises(ad.AdjointError, match=r"strides \(8, 16\).*C-contiguous"):
        ad.Array(_Interface(host, strides=(8, 16)), device="cuda")
    with pytest.raises(ad.AdjointError, match="dtype complex128"):
        ad.Array(_Interface(np.zeros(3, np.complex128)), device="cuda")


def test_only_a_backward_with_loop_stacks_reads_the_status(kernel_module):
    m = kernel_module(LOOPS.replace("@ad.kernel\n", "@ad.kernel(bounds_check=False)\n")
                      .replace("loop_capacity=4)", "loop_capacity=4, bounds_check=False)"))
    m.powers.spec_for("cuda")
    m.scatter.spec_for("cuda")
    assert "powers_backward, 1, status=True)" in open(m.powers.modules["cuda"].__file__).read()
    text = open(m.scatter.modules["cuda"].__file__).read()
    assert "scatter_backward, 1, status=True, check=False)" in text
    assert "scatter_forward, 1)" in text
    # with bounds checks, a launch whose kernel checks an index where it is used (the
    # gathered idx[i]) has its status read too, where the host next waits for the GPU
    # (see test_cuda_faults.py)
    m = kernel_module(LOOPS)
    m.scatter.spec_for("cuda")
    text = open(m.scatter.modules["cuda"].__file__).read()
    assert "scatter_forward, 1, status=True, bounds=scatter_bounds)" in text
    assert "scatter_backward, 1, status=True, bounds=scatter_bounds)" in text


def test_a_numpy_value_on_a_cuda_launch_says_what_to_pass(kernel_module):
    """A numpy array (``ad.vec3(...)`` is one) given to a launch on "cuda" is refused with
    what to pass instead, naming the kernel and the parameter; that works."""
    m = kernel_module('''
@ad.kernel
def shift(g: ad.vec3, p: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    p[i] = g * float(i + 1)
''')
    p = ad.zeros(2, dtype=ad.vec3, device="cuda")
    with pytest.raises(ad.LaunchError) as err:
        ad.launch(m.shift, 2, inputs=[ad.vec3(1.0, 2.0, 3.0)], outputs=[p])
    msg = str(err.value)
    assert "kernel 'shift'" in msg and "parameter 'g'" in msg
    assert "pass ad.array(value, device='cuda')" in msg
    ad.launch(m.shift, 2, inputs=[ad.array(ad.vec3(1.0, 2.0, 3.0), device="cuda")], outputs=[p])
    np.testing.assert_array_equal(p.numpy(), [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]])


def test_copy_false_on_cuda_says_how_to_wrap_without_a_copy():
    """``ad.array(copy=False)`` shares host memory only; on "cuda" it names ``ad.Array``,
    which wraps device memory (``ad.array`` always copies)."""
    with pytest.raises(ValueError, match=r"ad\.Array\(obj, device='cuda'\) wraps"):
        ad.array(np.zeros(3), device="cuda", copy=False)


OCCUPANCY = '''
import warnings
from numba import cuda
from adjoint.runtime import backend_cuda

@cuda.jit
def users(x):
    pass

def warned(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in seen if w.category.__name__ == "NumbaPerformanceWarning"]

config = backend_cuda._numba_config()
print("ADJOINT", warned(lambda: backend_cuda._configured(users, (1,), (256,))))
print("RUNTIME", warned(lambda: backend_cuda._configured(backend_cuda._kernels()["fill"], (2,), (256,))))
print("USER", warned(lambda: users[1, 256]))
print("RESTORED", config.CUDA_LOW_OCCUPANCY_WARNINGS)
'''


def test_small_launches_do_not_warn_of_low_occupancy(kernel_module):
    """numba warns "Grid size N will likely result in GPU under-utilization" when a
    launch is configured with fewer than 128 blocks; adjoint's own launches (zeroing a
    gradient, a kernel over a small ``dim``) configure theirs without it, the user's own
    ``numba.cuda`` kernels still warn. Configuring needs no GPU: checked outside the
    simulator in a child process, and here through small launches."""
    import os
    import subprocess
    import sys
    import warnings
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="1",
               NUMBA_DISABLE_PERFORMANCE_WARNINGS="0",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", OCCUPANCY], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert lines["ADJOINT"] == "[]" and lines["RUNTIME"] == "[]", r.stdout
    assert "Grid size 1 will likely result in GPU under-utilization" in lines["USER"], r.stdout
    assert lines["RESTORED"] == "1", r.stdout
    m = kernel_module(LOOPS)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        x = ad.array([1.1, 0.9], requires_grad=True, device="cuda")
        out = ad.zeros(2, requires_grad=True, device="cuda")
        with ad.Tape() as tape:
            ad.launch(m.powers, 2, inputs=[3, x], outputs=[out])
        tape.backward(grads={out: np.ones(2)})
    assert [str(w.message) for w in seen
            if w.category.__name__ == "NumbaPerformanceWarning"] == []


def test_a_device_to_device_copy_is_a_launch(monkeypatch):
    """``buffers.copy_into`` between device arrays of one dtype runs the runtime's copy
    kernel (a launch the host does not wait for), not numba's ``copy_to_device`` (the
    driver's cuMemcpyDtoD, which makes the host wait); values land as they were."""
    from adjoint.runtime import buffers
    cls = type(ad.zeros(1, device="cuda").data)

    def refuse(self, ary, *args, **kwargs):
        raise AssertionError("copy_to_device was called")
    src = ad.array(np.arange(12.0).reshape(3, 4), device="cuda")
    dst = ad.zeros((3, 4), device="cuda")
    monkeypatch.setattr(cls, "copy_to_device", refuse)
    buffers.copy_into(dst.data, src.data)
    twin = buffers.clone(src.data)
    monkeypatch.undo()
    np.testing.assert_array_equal(dst.numpy(), np.arange(12.0).reshape(3, 4))
    np.testing.assert_array_equal(twin.copy_to_host(), np.arange(12.0).reshape(3, 4))
