"""On-GPU checks of issue 43 that the test suite does not make: zero-copy interop
with PyTorch and CuPy, a gradient through PyTorch CUDA tensors checked against
float64 central differences, and the loop-capacity error on hardware.

    NUMBA_ENABLE_CUDASIM=0 python benchmarks/gpu_interop.py --env        # versions, detect()
    NUMBA_ENABLE_CUDASIM=0 python benchmarks/gpu_interop.py --preflight  # two kernels compiled
    NUMBA_ENABLE_CUDASIM=0 python benchmarks/gpu_interop.py              # the checks

``benchmarks/gpu_check.sh`` runs all three. Each check prints ``PASS``, ``FAIL``,
``SKIP`` (its library is missing, or has no GPU) or ``UNSUPPORTED`` (adjoint
refuses it on purpose, with the message it gave); the exit status is 1 if any
check failed. Under numba's simulator (``NUMBA_ENABLE_CUDASIM=1``, no GPU) the
checks run on the simulator's "device" memory, which is host memory: the torch
ones on CPU tensors handed over through ``__cuda_array_interface__`` (for
``adjoint.torch``, through its hooks ``_on_cuda``/``_cuda_memory``; their line
says so), the CuPy one is skipped.

``--env`` prints the versions, ``numba.cuda.detect()`` and where numba found NVVM
and libdevice. ``--preflight`` compiles and launches one hand-written kernel and
one adjoint kernel (forward and backward); exit status 1 if numba's fails (so the
caller can try another NVVM before spending minutes on tests that cannot
compile), 3 if adjoint's alone does.
"""
import argparse
import importlib
import math
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.append(ROOT)  # after PYTHONPATH, as benchmarks/run.py does

import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402  (NUMBA_ENABLE_CUDASIM is read here: set it before)

import adjoint as ad  # noqa: E402


# -- the kernels (adjoint reads them from this file) -------------------------------
@ad.kernel
def affine_square(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] * x[i] + 3.0 * x[i]


@ad.kernel
def ring(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    j = i + 1
    if j == n:
        j = 0
    out[i] = math.sin(x[i]) * x[j] + 0.5 * x[i] * x[i]


@ad.kernel(loop_capacity=4)
def powers(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    p = 1.0
    for k in range(n):
        p = p * x[i] + 0.5
    out[i] = p


@cuda.jit
def twice_plus_one(a):
    """A hand-written numba.cuda kernel (the preflight's first compile)."""
    i = cuda.grid(1)
    if i < a.size:
        a[i] = 2.0 * a[i] + 1.0


def ring_reference(x):
    """float64 numpy ``ring``."""
    return np.sin(x) * np.roll(x, -1) + 0.5 * x * x


class Skip(Exception):
    """The check cannot run here (its library is missing or has no GPU)."""


class Unsupported(Exception):
    """adjoint refuses this on purpose; the message says what it said."""


def simulated():
    from adjoint.runtime.backend_cuda import simulated as sim
    return sim()


def sync():
    """Wait for the GPU (``cuda.synchronize()``), raising the fault of a checked launch
    not yet reported: a launch does not wait for its kernel (runtime/pending.py), and
    the checks read results through torch and numba, which adjoint does not see."""
    ad.synchronize()


def device_ptr(arr):
    """The device address of a numba device array (or of the host memory behind the
    simulator's)."""
    iface = getattr(arr, "__cuda_array_interface__", None)
    if iface is not None:
        return int(iface["data"][0])
    return int(np.asarray(arr._ary).ctypes.data)        # numba's simulator: host memory


class TorchSide:
    """Where the torch checks keep their tensors: on the GPU ("cuda"), handed to adjoint
    as they are. Under numba's simulator, whose device memory is host memory, CPU
    tensors handed through a ``__cuda_array_interface__`` over that memory instead, so
    the checks' logic runs without a GPU too (their line says so)."""

    def __init__(self):
        try:
            import torch
        except Exception as exc:  # noqa: BLE001
            raise Skip(f"torch not importable ({type(exc).__name__}: {exc})")
        self.torch = torch
        if simulated():
            self.device, self.note = "cpu", " [simulator: CPU tensors stand in for CUDA ones]"
        elif torch.cuda.is_available():
            self.device, self.note = "cuda", ""
        else:
            raise Skip(f"torch {torch.__version__} sees no CUDA device")

    def tensor(self, values, **kw):
        return self.torch.tensor(values, dtype=self.torch.float64, device=self.device, **kw)

    def wrap(self, t):
        """What ``ad.Array(..., device="cuda")`` is given for tensor ``t``."""
        return t if self.device == "cuda" else TensorInterface(t)

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()


class TensorInterface:
    """A CPU tensor's memory behind ``__cuda_array_interface__`` (the simulator's
    device memory is host memory)."""

    def __init__(self, t):
        assert t.is_contiguous()
        self.tensor = t
        self.__cuda_array_interface__ = {"shape": tuple(t.shape),
                                         "typestr": np.dtype(str(t.dtype).split(".")[1]).str,
                                         "data": (t.data_ptr(), False), "strides": None,
                                         "version": 3}


def need_cupy():
    if simulated():
        raise Skip("numba's simulator is on: a CuPy array is not its memory")
    try:
        import cupy
        cupy.zeros(1).sum().item()
    except Exception as exc:  # noqa: BLE001
        raise Skip(f"cupy not usable ({type(exc).__name__}: {exc})")
    return cupy


class Interface:
    """An object exposing only ``__cuda_array_interface__`` (as a PyTorch tensor or a
    CuPy array does), over a numba device array -- or, in the simulator, over a
    numpy array, whose host memory stands in for the device's."""

    def __init__(self, values):
        values = np.array(values, dtype=np.float64)
        if simulated():
            self.base = values
            ptr = values.ctypes.data
        else:
            self.base = cuda.to_device(values)
            ptr = self.base.__cuda_array_interface__["data"][0]
        self.ptr = int(ptr)
        self.__cuda_array_interface__ = {"shape": values.shape, "typestr": values.dtype.str,
                                         "data": (self.ptr, False), "strides": None,
                                         "version": 3}

    def host(self):
        return self.base.copy() if isinstance(self.base, np.ndarray) else self.base.copy_to_host()


def zero_copy(what, make, ptr_of, host_of, fill, wrap=lambda obj: obj):
    """Wrap an input and an output made by ``make(values)`` with ``ad.Array(obj,
    device="cuda")``: same device address (no copy), the kernel's store lands in the
    caller's output, the backward's gradient is right, and ``fill_`` writes through."""
    n = 1000                                   # four blocks of 256 on the GPU
    xs = np.linspace(-1.5, 2.0, n)
    xo, oo = make(xs), make(np.full(n, -7.0))  # the output poisoned: every element written
    x = ad.Array(wrap(xo), requires_grad=True, device="cuda")
    out = ad.Array(wrap(oo), requires_grad=True, device="cuda")
    if device_ptr(x.data) != ptr_of(xo) or device_ptr(out.data) != ptr_of(oo):
        raise AssertionError(f"{what}: wrapped at another address (a copy): "
                             f"{device_ptr(x.data):#x} vs {ptr_of(xo):#x}")
    with ad.Tape() as tape:
        ad.launch(affine_square, n, inputs=[x], outputs=[out])
    sync()
    # (rounding apart: the GPU may fuse a multiply and an add)
    np.testing.assert_allclose(host_of(oo), xs * xs + 3.0 * xs, rtol=1e-13, atol=1e-13,
                               err_msg=f"{what}: the store did not land in the caller's array")
    seed = np.linspace(0.5, 1.5, n)
    tape.backward(grads={out: seed})
    np.testing.assert_allclose(x.grad.numpy(), seed * (2.0 * xs + 3.0), rtol=1e-12, atol=1e-12,
                               err_msg=f"{what}: gradient")
    x.fill_(0.25)
    sync()
    np.testing.assert_array_equal(host_of(xo), np.full(n, 0.25),
                                  err_msg=f"{what}: fill_ did not write through")
    fill(xo, 2.0)                             # and the caller's writes are the kernel's input
    ad.launch(affine_square, n, inputs=[x], outputs=[out], record_tape=False)
    sync()
    np.testing.assert_array_equal(host_of(oo), np.full(n, 10.0),
                                  err_msg=f"{what}: a write by its owner was not seen")
    return f"address {ptr_of(xo):#x} shared, {n} stores landed, gradient right"


def check_interface():
    """(And ``ad.array(obj, copy=False, device="cuda")``, which shares host memory only,
    refuses with what to write instead.)"""
    try:
        ad.array(Interface([1.0, 2.0]), device="cuda", copy=False)
    except ValueError as exc:
        assert "ad.Array(obj, device='cuda')" in str(exc), str(exc)
    else:
        raise AssertionError("ad.array(copy=False, device='cuda') did not refuse")
    return zero_copy("__cuda_array_interface__", Interface, lambda o: o.ptr,
                     lambda o: o.host(), lambda o, v: _fill_interface(o, v))


def _fill_interface(obj, value):
    if isinstance(obj.base, np.ndarray):
        obj.base[...] = value
    else:
        obj.base.copy_to_device(np.full(obj.base.shape, value))


def check_torch():
    side = TorchSide()
    torch = side.torch
    return zero_copy(f"torch {torch.__version__}", side.tensor, lambda t: t.data_ptr(),
                     lambda t: t.cpu().numpy(), lambda t, v: (t.fill_(v), side.sync()),
                     side.wrap) + side.note


def check_cupy():
    cp = need_cupy()
    return zero_copy(f"cupy {cp.__version__}", lambda v: cp.asarray(v, dtype=cp.float64),
                     lambda a: int(a.data.ptr), cp.asnumpy,
                     lambda a, v: (a.fill(v), cp.cuda.runtime.deviceSynchronize()))


def central_differences(f, x, eps=1e-5, only=None):
    """Central differences of scalar ``f`` at float64 ``x``, at the indices ``only`` (all
    by default; elsewhere zero)."""
    g = np.zeros_like(x)
    for k in range(x.size) if only is None else only:
        xp, xm = x.copy(), x.copy()
        xp[k] += eps
        xm[k] -= eps
        g[k] = (f(xp) - f(xm)) / (2 * eps)
    return g


RING_N = 300          # two blocks on the GPU; every thread's neighbour read crosses to the next
# where the tape's gradient is checked by differences: the ends of the ring and of the
# GPU's blocks of 256 (and of the simulator's of 32), and a few inside
RING_FD = [0, 1, 2, 31, 32, 33, 100, 254, 255, 256, 257, 297, 298, 299]


def check_torch_tape():
    """The gradient of sum(ring(x)^2) through ad.Tape on wrapped torch CUDA tensors
    (zero copy), against float64 central differences of the kernel itself."""
    side = TorchSide()
    torch = side.torch
    rng = np.random.default_rng(43)
    xs = rng.uniform(-2.0, 2.0, RING_N)
    t = side.tensor(xs)
    o = side.tensor(np.full(RING_N, np.nan))
    x = ad.Array(side.wrap(t), requires_grad=True, device="cuda")
    out = ad.Array(side.wrap(o), requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(ring, RING_N, inputs=[RING_N, x], outputs=[out])
    sync()
    got = o.cpu().numpy().copy()
    np.testing.assert_allclose(got, ring_reference(xs), rtol=1e-13, atol=1e-13)
    seed = side.tensor(2.0 * got)                             # d sum(out^2) / d out
    tape.backward(grads={out: ad.Array(side.wrap(seed), device="cuda")})
    grad = x.grad.numpy()
    del tape                    # no copies of what the FD launches overwrite

    def loss(v):
        t.copy_(torch.from_numpy(v))
        side.sync()
        ad.launch(ring, RING_N, inputs=[RING_N, x], outputs=[out], record_tape=False)
        sync()
        return float((o ** 2).sum().item())
    fd = central_differences(loss, xs, only=RING_FD)[RING_FD]
    np.testing.assert_allclose(grad[RING_FD], fd, rtol=1e-6, atol=1e-6)
    want = 2.0 * got * (np.cos(xs) * np.roll(xs, -1) + xs) + \
        np.roll(2.0 * got * np.sin(xs), 1)                    # the closed form, everywhere
    np.testing.assert_allclose(grad, want, rtol=1e-12, atol=1e-12)
    return (f"{RING_N} elements against the closed form, {len(RING_FD)} against FD (worst "
            f"|AD - FD| {np.max(np.abs(grad[RING_FD] - fd)):.1e})" + side.note)


class AdjointTorchOnCuda:
    """``with AdjointTorchOnCuda(side) as on:`` ``on.adt`` is adjoint.torch, whose
    ``launch`` calls are recorded in ``on.seen`` as ``(inputs, outputs, keywords)``.
    Under numba's simulator, whose device memory is host memory, adjoint.torch's hooks
    take the CPU tensors for CUDA ones (``_on_cuda``) and wrap them through
    ``__cuda_array_interface__`` over their memory (``_cuda_memory``), so that its CUDA
    path runs."""

    def __init__(self, side):
        import adjoint.torch as adt
        self.adt, self.side, self.seen, self.saved = adt, side, [], {}

    def __enter__(self):
        adt = self.adt
        self.saved = {name: getattr(adt, name) for name in ("launch", "_on_cuda", "_cuda_memory")}
        real, seen = adt.launch, self.seen

        def spy(kernel, dim, inputs=(), outputs=(), **kw):
            seen.append((list(inputs), list(outputs), kw))
            return real(kernel, dim, inputs=inputs, outputs=outputs, **kw)
        adt.launch = spy
        if self.side.device == "cpu":
            adt._on_cuda = lambda t: True
            adt._cuda_memory = TensorInterface
        return self

    def __exit__(self, *exc):
        for name, value in self.saved.items():
            setattr(self.adt, name, value)


def check_adjoint_torch():
    """``adjoint.torch.apply`` on CUDA tensors: it launches on adjoint's CUDA backend on
    the tensors' own memory (no copy of the input or the output), hands torch its output
    and gradient as CUDA tensors, leaves ``grad_output`` as it was, and the gradient of
    sum(ring(x)^2) through torch autograd matches float64 central differences (and the
    closed form everywhere)."""
    side = TorchSide()
    torch = side.torch
    rng = np.random.default_rng(44)
    xs = rng.uniform(-2.0, 2.0, RING_N)
    with AdjointTorchOnCuda(side) as on:
        adt = on.adt
        px = side.tensor(xs, requires_grad=True)
        (out,) = adt.apply(ring, RING_N, inputs=[RING_N, px], outputs=[RING_N])
        if out.device != px.device:
            raise AssertionError(f"adjoint.torch returned its output on {out.device}")
        got = out.detach().cpu().numpy().copy()
        np.testing.assert_allclose(got, ring_reference(xs), rtol=1e-13, atol=1e-13)
        go = side.tensor(2.0 * got)                           # d sum(out^2) / d out
        (grad_t,) = torch.autograd.grad(out, [px], grad_outputs=[go])
        if grad_t.device != px.device:
            raise AssertionError(f"adjoint.torch returned the gradient on {grad_t.device}")
        np.testing.assert_array_equal(go.cpu().numpy(), 2.0 * got,
                                      err_msg="adjoint.torch modified grad_output")
        kinds = [kw.get("adjoint", False) for _, _, kw in on.seen]
        if kinds != [False, True]:
            raise AssertionError(f"launches (adjoint=...): {kinds}, expected a forward, "
                                 "then a backward")
        for inputs, outputs, kw in on.seen:
            if kw.get("device") != "cuda":
                raise AssertionError(f"a launch on {kw.get('device')!r}, not 'cuda'")
            if device_ptr(inputs[1].data) != px.data_ptr() or \
                    device_ptr(outputs[0].data) != out.data_ptr():
                raise AssertionError(f"a copy: the kernel got {device_ptr(inputs[1].data):#x} "
                                     f"for x at {px.data_ptr():#x}, "
                                     f"{device_ptr(outputs[0].data):#x} for out at "
                                     f"{out.data_ptr():#x}")
        grad = grad_t.cpu().numpy()

        def loss(v):
            with torch.no_grad():
                (o,) = adt.apply(ring, RING_N, inputs=[RING_N, side.tensor(v)],
                                 outputs=[RING_N])
                return float((o ** 2).sum().item())
        fd = central_differences(loss, xs, only=RING_FD)[RING_FD]
    np.testing.assert_allclose(grad[RING_FD], fd, rtol=1e-6, atol=1e-6)
    want = 2.0 * got * (np.cos(xs) * np.roll(xs, -1) + xs) + np.roll(2.0 * got * np.sin(xs), 1)
    np.testing.assert_allclose(grad, want, rtol=1e-12, atol=1e-12)
    note = (" [simulator: CPU tensors stand in for CUDA ones through adjoint.torch's hooks]"
            if side.device == "cpu" else "")
    return (f"launched on cuda, x and out not copied, {RING_N} elements against the closed "
            f"form, {len(RING_FD)} against FD (worst |AD - FD| "
            f"{np.max(np.abs(grad[RING_FD] - fd)):.1e})" + note)


def check_torch_views():
    """``adjoint.torch.from_torch`` of a CUDA tensor is an ``ad.Array`` on "cuda" over its
    memory; ``to_torch`` of one is a CUDA tensor over the array's (on a GPU only)."""
    side = TorchSide()
    with AdjointTorchOnCuda(side) as on:
        adt = on.adt
        t = side.tensor([1.0, 2.0, 3.0])
        arr = adt.from_torch(t, requires_grad=True)
        if arr.device != "cuda" or device_ptr(arr.data) != t.data_ptr():
            raise AssertionError(f"from_torch: {arr.device}, {device_ptr(arr.data):#x} for a "
                                 f"tensor at {t.data_ptr():#x}")
        arr.fill_(4.0)
        side.sync()
        np.testing.assert_array_equal(t.cpu().numpy(), [4.0, 4.0, 4.0])
        if side.device == "cpu":
            return "from_torch shares memory; to_torch not tried" + side.note
        back = adt.to_torch(arr)
        if back.device.type != "cuda" or back.data_ptr() != t.data_ptr():
            raise AssertionError(f"to_torch: {back.device}, {back.data_ptr():#x} for memory "
                                 f"at {t.data_ptr():#x}")
        back.fill_(5.0)
        side.sync()
        np.testing.assert_array_equal(arr.numpy(), [5.0, 5.0, 5.0])
    return "from_torch and to_torch share memory"


def _loop_line():
    lines = open(os.path.abspath(__file__)).read().splitlines()
    start = lines.index("def powers(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):")
    return lines.index("    for k in range(n):", start) + 1


def check_loop_capacity():
    """A loop past ``loop_capacity`` (4) raises the clear AdjointError in the backward;
    one within it gives the closed-form gradient."""
    xs = np.linspace(-0.9, 1.1, 700)
    x = ad.array(xs, requires_grad=True, device="cuda")
    out = ad.zeros(xs.size, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(powers, xs.size, inputs=[10, x], outputs=[out])
    t0 = time.perf_counter()
    try:
        tape.backward(grads={out: np.ones(xs.size)})
    except ad.AdjointError as exc:
        msg = str(exc)
    else:
        raise AssertionError("a loop of 10 iterations past loop_capacity=4 raised nothing")
    line = _loop_line()
    for want in (f"line {line}", "loop_capacity", "powers"):
        assert want in msg, f"{want!r} not in the error: {msg}"
    took = time.perf_counter() - t0
    # within the capacity: p4 = x^4 + .5(x^3 + x^2 + x + 1); dp4/dx = 4x^3 + .5(3x^2 + 2x + 1)
    x2 = ad.array(xs, requires_grad=True, device="cuda")
    out2 = ad.zeros(xs.size, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(powers, xs.size, inputs=[4, x2], outputs=[out2])
    tape.backward(grads={out2: np.ones(xs.size)})
    np.testing.assert_allclose(x2.grad.numpy(), 4 * xs ** 3 + 0.5 * (3 * xs ** 2 + 2 * xs + 1),
                               rtol=1e-12, atol=1e-14)
    first = msg.splitlines()[0]
    return f"raised in {took:.2f} s: {first!r}; within capacity exact"


CHECKS = [("zero-copy __cuda_array_interface__ (numba device array)", check_interface),
          ("zero-copy torch CUDA tensor", check_torch),
          ("zero-copy CuPy array", check_cupy),
          ("gradient through ad.Tape on torch CUDA tensors vs FD (float64)", check_torch_tape),
          ("gradient through adjoint.torch on CUDA tensors vs FD (float64)", check_adjoint_torch),
          ("adjoint.torch.from_torch / to_torch on CUDA: shared memory", check_torch_views),
          ("loop past loop_capacity: the clear error", check_loop_capacity)]


def run_checks():
    ad.use_backend("cuda")
    failed = 0
    for title, fn in CHECKS:
        t0 = time.perf_counter()
        try:
            detail = fn()
            status = "PASS"
        except Skip as exc:
            status, detail = "SKIP", str(exc)
        except Unsupported as exc:
            status, detail = "UNSUPPORTED", str(exc).replace("\n", " ")
        except Exception as exc:  # noqa: BLE001 - every check runs; each failure is listed
            status, detail = "FAIL", f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
            failed += 1
        print(f"{status:<11} {title} ({time.perf_counter() - t0:.1f} s): {detail}", flush=True)
    print(f"gpu_interop: {failed} of {len(CHECKS)} checks failed", flush=True)
    return 1 if failed else 0


def _version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001
        return "not installed"


def environment():
    """Versions, ``numba.cuda.detect()`` and where numba found NVVM and libdevice."""
    import numba
    print(f"python {sys.version.split()[0]} at {sys.executable}")
    print(f"numpy {np.__version__}, numba {numba.__version__}, "
          f"numba-cuda {_version('numba-cuda')}, llvmlite {_version('llvmlite')}, "
          f"cuda-bindings {_version('cuda-bindings')}, gast {_version('gast')}, "
          f"astor {_version('astor')}, adjoint {ad.__version__} from {os.path.dirname(ad.__file__)}")
    print(f"NUMBA_ENABLE_CUDASIM={os.environ.get('NUMBA_ENABLE_CUDASIM')} "
          f"(numba.config.ENABLE_CUDASIM={numba.config.ENABLE_CUDASIM}), "
          f"CUDA_HOME={os.environ.get('CUDA_HOME')}", flush=True)
    try:
        cuda.detect()
    except Exception as exc:  # noqa: BLE001
        print(f"numba.cuda.detect() raised {type(exc).__name__}: {exc}")
    if not simulated():
        try:
            from numba.cuda.cudadrv import nvvm
            print(f"NVVM {nvvm.NVVM().get_version()}, NVVM IR {nvvm.NVVM().get_ir_version()}")
        except Exception as exc:  # noqa: BLE001
            print(f"NVVM: {type(exc).__name__}: {exc}")
        try:
            from numba.cuda.cuda_paths import get_cuda_paths
            for key, found in get_cuda_paths().items():
                print(f"    {key}: {found}")
        except Exception as exc:  # noqa: BLE001
            print(f"numba's CUDA paths: {type(exc).__name__}: {exc}")
    sys.stdout.flush()
    for name in ("cupy", "torch", "jax"):
        try:
            mod = importlib.import_module(name)
            extra = ""
            if name == "torch":
                extra = f" (CUDA {mod.version.cuda}, cuda available {mod.cuda.is_available()})"
            elif name == "cupy":
                extra = f" (CUDA runtime {mod.cuda.runtime.runtimeGetVersion()})"
            elif name == "jax":
                extra = f" (devices {mod.devices()})"
            print(f"{name} {mod.__version__}{extra}", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: not usable ({type(exc).__name__}: {exc})", flush=True)
    return 0


def preflight():
    """One hand-written numba.cuda kernel and one adjoint kernel (forward and backward)
    compiled and run: 0 if both work, 1 if numba's fails (no GPU, no NVVM...), 3 if
    adjoint's alone does."""
    try:
        t0 = time.perf_counter()
        d = cuda.to_device(np.arange(300.0))
        twice_plus_one[2, 256](d)
        np.testing.assert_array_equal(d.copy_to_host(), 2.0 * np.arange(300.0) + 1.0)
        print(f"PASS        a hand-written numba.cuda kernel compiled and ran "
              f"({time.perf_counter() - t0:.2f} s)", flush=True)
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        print(f"FAIL        a hand-written numba.cuda kernel: {type(exc).__name__}: {exc}",
              flush=True)
        return 1
    try:
        t0 = time.perf_counter()
        ad.use_backend("cuda")
        xs = np.linspace(-1.0, 1.0, 300)
        x = ad.array(xs, requires_grad=True, device="cuda")
        out = ad.zeros(xs.size, requires_grad=True, device="cuda")
        with ad.Tape() as tape:
            ad.launch(ring, xs.size, inputs=[xs.size, x], outputs=[out])
        tape.backward(grads={out: np.ones(xs.size)})
        np.testing.assert_allclose(out.numpy(), ring_reference(xs), rtol=1e-13, atol=1e-13)
        fd = central_differences(lambda v: ring_reference(v).sum(), xs)
        np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-6)
        print(f"PASS        an adjoint kernel's forward and backward compiled and ran "
              f"({time.perf_counter() - t0:.2f} s)", flush=True)
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        print(f"FAIL        an adjoint kernel: {type(exc).__name__}: {exc}", flush=True)
        return 3
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", action="store_true",
                   help="versions, numba.cuda.detect(), where NVVM and libdevice were found")
    p.add_argument("--preflight", action="store_true",
                   help="one numba.cuda kernel and one adjoint kernel compiled and run")
    a = p.parse_args(argv)
    return environment() if a.env else preflight() if a.preflight else run_checks()


if __name__ == "__main__":
    sys.exit(main())
