"""adjoint.torch: kernels inside PyTorch's autograd (reference case 4).

References: closed forms, ``torch.autograd.gradcheck`` (float64 finite
differences run by PyTorch), and a fit that only converges with right gradients.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import adjoint as ad  # noqa: E402
import adjoint.torch as adt  # noqa: E402

KERNELS = '''
@ad.kernel
def step_velocity(m: ad.array(dtype=float), v: ad.array(dtype=float), gravity: float,
                  dt: float, v_out: ad.array(dtype=float)):
    i = ad.tid()
    v_out[i] = v[i] * v[i] + dt * gravity / m[i]

@ad.kernel
def accumulate(x: ad.array(dtype=float), s: ad.array(dtype=float)):
    i = ad.tid()
    s[i] += 2.0 * x[i]

@ad.kernel
def springs(px: ad.array(dtype=float), py: ad.array(dtype=float),
            a: ad.array(dtype=ad.int64), b: ad.array(dtype=ad.int64),
            rest: ad.array(dtype=float), stiffness: float,
            fx: ad.array(dtype=float), fy: ad.array(dtype=float)):
    s = ad.tid()
    i = a[s]
    j = b[s]
    dx = px[j] - px[i]
    dy = py[j] - py[i]
    d = math.sqrt(dx * dx + dy * dy)
    f = stiffness * (d - rest[s]) / d
    ad.atomic_add(fx, i, f * dx)
    ad.atomic_add(fy, i, f * dy)
    ad.atomic_sub(fx, j, f * dx)
    ad.atomic_sub(fy, j, f * dy)

@ad.struct
class Body:
    x: ad.array(dtype=float)
    w: ad.array(dtype=float)
    k: float

@ad.kernel
def body_energy(b: Body, scale: float, out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = scale * b.k * b.w[i] * math.sin(b.x[i]) + b.x[i] * b.w[i] * b.w[i]
'''

F64 = torch.float64
M = [1.0, 2.0, 4.0]
V = [0.5, -1.0, 2.0]


@pytest.fixture
def k(kernel_module):
    return kernel_module(KERNELS)


def test_apply_forward_and_backward_closed_form(backend, k):
    m = torch.tensor(M, dtype=F64, requires_grad=True)
    v = torch.tensor(V, dtype=F64, requires_grad=True)
    (v_out,) = adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1],
                         outputs=[torch.zeros(3, dtype=F64)])
    mm, vv = np.array(M), np.array(V)
    np.testing.assert_allclose(v_out.detach().numpy(), vv * vv + 0.1 * -9.8 / mm, rtol=1e-14)
    v_out.sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), 2 * vv, rtol=1e-14)
    np.testing.assert_allclose(m.grad.numpy(), -0.1 * -9.8 / mm ** 2, rtol=1e-14)


def test_explicit_adjoint_launch_with_scalar_arguments_reference_4(backend, k):
    m, v = ad.array(M), ad.array(V)
    v_out = ad.zeros(3)
    adj_m, adj_v = ad.full(3, 1.0), ad.zeros(3)          # adj_m accumulates onto 1
    adj_v_out = ad.array([1.0, 2.0, 3.0])
    ad.launch(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[v_out])
    ad.launch(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[v_out], adjoint=True,
              adj_inputs=[adj_m, adj_v, None, None], adj_outputs=[adj_v_out])
    w, mm, vv = np.array([1.0, 2.0, 3.0]), np.array(M), np.array(V)
    np.testing.assert_allclose(adj_v.numpy(), w * 2 * vv, rtol=1e-14)
    np.testing.assert_allclose(adj_m.numpy(), 1.0 + w * 0.98 / mm ** 2, rtol=1e-14)


def test_torch_gradcheck_float64(backend, k):
    m = torch.tensor(M, dtype=F64, requires_grad=True)
    v = torch.tensor(V, dtype=F64, requires_grad=True)

    def f(m, v):
        return adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[3])
    assert torch.autograd.gradcheck(f, (m, v), eps=1e-6, atol=1e-7)

    px = torch.tensor([0.0, 1.1, 1.0, -0.1], dtype=F64, requires_grad=True)
    py = torch.tensor([0.0, 0.1, 1.2, 0.9], dtype=F64, requires_grad=True)
    rest = torch.tensor([1.0, 1.2, 0.9, 1.1, 1.5], dtype=F64, requires_grad=True)
    a, b = torch.tensor([0, 1, 2, 3, 0]), torch.tensor([1, 2, 3, 0, 2])

    def g(px, py, rest):
        return adt.apply(k.springs, 5, inputs=[px, py, a, b, rest, 2.0], outputs=[4, 4])
    assert torch.autograd.gradcheck(g, (px, py, rest), eps=1e-6, atol=1e-7)


def test_output_initial_values_and_their_gradient(backend, k):
    x = torch.tensor(V, dtype=F64, requires_grad=True)
    init = torch.tensor([10.0, 20.0, 30.0], dtype=F64, requires_grad=True)
    (s,) = adt.apply(k.accumulate, 3, inputs=[x], outputs=[init])
    np.testing.assert_array_equal(s.detach().numpy(), [11.0, 18.0, 34.0])
    np.testing.assert_array_equal(init.detach().numpy(), [10.0, 20.0, 30.0])   # not written
    (s * torch.tensor([1.0, 2.0, 3.0], dtype=F64)).sum().backward()
    np.testing.assert_array_equal(init.grad.numpy(), [1.0, 2.0, 3.0])          # s = init + 2x
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
    # a store replaces the initial value: its gradient is zero
    m = torch.tensor(M, dtype=F64)
    init2 = torch.ones(3, dtype=F64, requires_grad=True)
    (v_out,) = adt.apply(k.step_velocity, 3, inputs=[m, x, -9.8, 0.1], outputs=[init2])
    v_out.sum().backward()
    np.testing.assert_array_equal(init2.grad.numpy(), [0.0, 0.0, 0.0])


def test_grad_output_is_never_modified(backend, k):
    m = torch.tensor(M, dtype=F64)
    v = torch.tensor(V, dtype=F64, requires_grad=True)
    (v_out,) = adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[3])
    go = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    (gv,) = torch.autograd.grad(v_out, [v], grad_outputs=[go])
    # the generated backward clears the adjoint of a stored output: on an alias, go would be 0
    np.testing.assert_array_equal(go.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(gv.numpy(), go.numpy() * 2 * np.array(V), rtol=1e-14)


def test_unused_output_gets_no_gradient(backend, k):
    px = torch.tensor([0.0, 1.0, 0.0], dtype=F64, requires_grad=True)
    py = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    rest = torch.tensor([0.5, 0.5, 0.5], dtype=F64)
    a, b = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
    fx, fy = adt.apply(k.springs, 3, inputs=[px, py, a, b, rest, 2.0], outputs=[3, 3])
    fy.sum().backward()      # fx's grad_output is None
    expected = torch.autograd.functional.jacobian(
        lambda p: adt.apply(k.springs, 3, inputs=[p, py, a, b, rest, 2.0], outputs=[3, 3])[1],
        px.detach()).sum(0)
    np.testing.assert_allclose(px.grad.numpy(), expected.numpy(), rtol=1e-12)
    assert py.grad is None and rest.grad is None


def test_double_backward_raises_a_clear_error(backend, k):
    m = torch.tensor(M, dtype=F64)
    v = torch.tensor(V, dtype=F64, requires_grad=True)
    (v_out,) = adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[3])
    with pytest.raises(RuntimeError, match="double backward.*step_velocity"):
        torch.autograd.grad(v_out.sum(), [v], create_graph=True)


def test_scalar_parameter_refuses_a_tensor_that_requires_grad(k):
    m, v = torch.tensor(M, dtype=F64), torch.tensor(V, dtype=F64)
    dt = torch.tensor(0.1, dtype=F64, requires_grad=True)
    with pytest.raises(ad.AdjointError, match="'dt' is a scalar"):
        adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, dt], outputs=[3])
    (v_out,) = adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, dt.detach()], outputs=[3])
    np.testing.assert_allclose(v_out.numpy()[0], 0.25 - 0.98, rtol=1e-14)


def test_struct_of_two_arrays_and_a_scalar_against_central_differences(backend, k):
    """A struct argument counts as one argument (it used to be refused: its three fields
    were counted against the two arguments given); the tensors in its fields get their
    gradients, checked against central differences of the kernel's float64 forward."""
    xs, ws = [0.3, -1.2, 0.8, 2.0], [1.5, -0.5, 0.25, 2.0]
    c = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=F64)          # loss = sum(c * out)

    def loss(x, w):
        (out,) = adt.apply(k.body_energy, 4, inputs=[k.Body(x=x, w=w, k=2.0), 0.5],
                           outputs=[4])
        return (c * out).sum()
    x = torch.tensor(xs, dtype=F64, requires_grad=True)
    w = torch.tensor(ws, dtype=F64, requires_grad=True)
    loss(x, w).backward()
    eps = 1e-6
    for t, other, grad in ((x, w, x.grad), (w, x, w.grad)):
        fd = np.zeros(4)
        for j in range(4):
            plus, minus = t.detach().clone(), t.detach().clone()
            plus[j] += eps
            minus[j] -= eps
            args = (plus, other.detach()), (minus, other.detach())
            if t is w:
                args = tuple(a[::-1] for a in args)
            fd[j] = (loss(*args[0]).item() - loss(*args[1]).item()) / (2 * eps)
        np.testing.assert_allclose(grad.numpy(), fd, rtol=1e-7, atol=1e-9)
    xx, ww = np.array(xs), np.array(ws)                 # and the closed form
    np.testing.assert_allclose(x.grad.numpy(), c.numpy() * (ww * np.cos(xx) + ww * ww),
                               rtol=1e-13)
    # a field holding a numpy array (not a tensor) is read and gets no gradient
    (out,) = adt.apply(k.body_energy, 4, inputs=[k.Body(x=x, w=np.array(ws), k=2.0), 0.5],
                       outputs=[4])
    np.testing.assert_allclose(out.detach().numpy(), ww * np.sin(xx) + xx * ww * ww,
                               rtol=1e-13)
    with pytest.raises(ad.AdjointError, match=r"takes 3 arguments \(b, scale, out\), got 1"):
        adt.apply(k.body_energy, 4, inputs=[k.Body(x=x, w=w, k=2.0)], outputs=[])
    with pytest.raises(ad.AdjointError, match="'b' is a Body, got Tensor"):
        adt.apply(k.body_energy, 4, inputs=[x, 0.5], outputs=[4])


def test_tensors_are_shared_with_the_kernel_not_copied(backend, k, monkeypatch):
    t = torch.arange(4, dtype=F64)
    arr = adt.from_torch(t)
    arr.numpy()[0] = 7.0
    assert t[0].item() == 7.0
    back = adt.to_torch(arr)
    back[1] = 8.0
    assert arr.numpy()[1] == 8.0 and t[1].item() == 8.0

    seen = []
    real_launch = adt.launch

    def spy(kernel, dim, inputs=(), outputs=(), **kw):
        seen.append((list(inputs), list(outputs), kw.get("adjoint", False)))
        return real_launch(kernel, dim, inputs=inputs, outputs=outputs, **kw)
    monkeypatch.setattr(adt, "launch", spy)
    m = torch.tensor(M, dtype=F64, requires_grad=True)
    v = torch.tensor(V, dtype=F64, requires_grad=True)
    (v_out,) = adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[3])
    v_out.sum().backward()
    assert [s[2] for s in seen] == [False, True]
    for inputs, outputs, _ in seen:
        assert np.shares_memory(inputs[0], m.detach().numpy())
        assert np.shares_memory(inputs[1], v.detach().numpy())
        assert inputs[2:] == [-9.8, 0.1]
        assert np.shares_memory(outputs[0], v_out.detach().numpy())


def test_adam_fits_a_spring_network(backend, k):
    """Learn five rest lengths from where four Euler steps of the network end up."""
    a, b = torch.tensor([0, 1, 2, 3, 0]), torch.tensor([1, 2, 3, 0, 2])
    px0 = torch.tensor([0.0, 1.1, 1.0, -0.1], dtype=F64)
    py0 = torch.tensor([0.0, 0.1, 1.2, 0.9], dtype=F64)

    def simulate(rest, steps=4, dt=0.1):
        px, py = px0, py0
        for _ in range(steps):
            fx, fy = adt.apply(k.springs, 5, inputs=[px, py, a, b, rest, 2.0], outputs=[4, 4])
            px, py = px + dt * fx, py + dt * fy
        return px, py

    true_rest = torch.tensor([1.0, 1.2, 0.9, 1.1, 1.5], dtype=F64)
    with torch.no_grad():
        tx, ty = simulate(true_rest)
    rest = torch.ones(5, dtype=F64, requires_grad=True)
    opt = torch.optim.Adam([rest], lr=0.02)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        px, py = simulate(rest)
        loss = ((px - tx) ** 2 + (py - ty) ** 2).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 1e-5 * losses[0]
    np.testing.assert_allclose(rest.detach().numpy(), true_rest.numpy(), atol=2e-2)


# -- CUDA tensors (adjoint's CUDA backend) ----------------------------------------------
class _TensorInterface:
    """A CPU tensor's memory behind ``__cuda_array_interface__``: under numba's simulator,
    whose device memory is host memory, CPU tensors stand in for CUDA ones."""

    def __init__(self, t):
        assert t.is_contiguous()
        self.tensor = t                 # (kept alive by the ad.Array that wraps this)
        self.__cuda_array_interface__ = {"shape": tuple(t.shape),
                                         "typestr": np.dtype(str(t.dtype).split(".")[1]).str,
                                         "data": (t.data_ptr(), False), "strides": None,
                                         "version": 3}


@pytest.fixture
def cuda_tensors(monkeypatch):
    """``make(values, **kw)``: a float64 tensor adjoint.torch takes for a CUDA one -- a
    real CUDA tensor on a GPU (with a CUDA build of torch), else, in numba's simulator,
    a CPU tensor that adjoint.torch's hooks treat as one (``_on_cuda``) and wrap through
    ``__cuda_array_interface__`` over its memory (``_cuda_memory``)."""
    from adjoint.runtime import backend_cuda
    if not backend_cuda.available():
        pytest.skip("no CUDA device or simulator")
    if backend_cuda.simulated():
        monkeypatch.setattr(adt, "_on_cuda", lambda t: True)
        monkeypatch.setattr(adt, "_cuda_memory", _TensorInterface)
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        pytest.skip("a GPU without a CUDA build of torch")

    def make(values, dtype=F64, **kw):
        return torch.tensor(values, dtype=dtype, device=device, **kw)
    make.device = device
    return make


def _address(arr):
    """The device address of an ad.Array on "cuda" (host memory in the simulator)."""
    iface = getattr(arr.data, "__cuda_array_interface__", None)
    return int(iface["data"][0]) if iface else int(arr.data._ary.ctypes.data)


def test_cuda_tensors_forward_backward_closed_form(k, cuda_tensors):
    m = cuda_tensors(M, requires_grad=True)
    v = cuda_tensors(V, requires_grad=True)
    (v_out,) = adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[3])
    assert v_out.device == v.device
    mm, vv = np.array(M), np.array(V)
    np.testing.assert_allclose(v_out.detach().cpu().numpy(), vv * vv + 0.1 * -9.8 / mm,
                               rtol=1e-14)
    v_out.sum().backward()
    assert v.grad.device == v.device and m.grad.device == m.device
    np.testing.assert_allclose(v.grad.cpu().numpy(), 2 * vv, rtol=1e-14)
    np.testing.assert_allclose(m.grad.cpu().numpy(), -0.1 * -9.8 / mm ** 2, rtol=1e-14)


def test_cuda_tensors_launch_on_cuda_without_copies(k, cuda_tensors, monkeypatch):
    """The kernel runs on the CUDA backend on the tensors' own memory: inputs, outputs,
    and the gradients torch receives (which the backward kernel writes in place)."""
    seen = []
    real_launch = adt.launch

    def spy(kernel, dim, inputs=(), outputs=(), **kw):
        seen.append((list(inputs), list(outputs), kw))
        return real_launch(kernel, dim, inputs=inputs, outputs=outputs, **kw)
    monkeypatch.setattr(adt, "launch", spy)
    m = cuda_tensors(M, requires_grad=True)
    v = cuda_tensors(V, requires_grad=True)
    (v_out,) = adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[3])
    go = cuda_tensors([1.0, 2.0, 3.0])
    gm, gv = torch.autograd.grad(v_out, [m, v], grad_outputs=[go])
    assert [s[2].get("adjoint", False) for s in seen] == [False, True]
    for inputs, outputs, kw in seen:
        assert kw["device"] == "cuda"
        assert all(isinstance(a, ad.Array) and a.device == "cuda"
                   for a in inputs[:2] + outputs)
        assert _address(inputs[0]) == m.data_ptr() and _address(inputs[1]) == v.data_ptr()
        assert inputs[2:] == [-9.8, 0.1]
        assert _address(outputs[0]) == v_out.data_ptr()
    adj_m, adj_v = seen[1][2]["adj_inputs"][:2]
    assert {_address(adj_m), _address(adj_v)} == {gm.data_ptr(), gv.data_ptr()}
    np.testing.assert_allclose(gv.cpu().numpy(), go.cpu().numpy() * 2 * np.array(V),
                               rtol=1e-14)
    # grad_output is copied (the backward clears a stored output's adjoint), never written
    assert _address(seen[1][2]["adj_outputs"][0]) != go.data_ptr()
    np.testing.assert_array_equal(go.cpu().numpy(), [1.0, 2.0, 3.0])


def test_cuda_tensors_gradcheck_float64(k, cuda_tensors):
    m = cuda_tensors(M, requires_grad=True)
    v = cuda_tensors(V, requires_grad=True)

    def f(m, v):
        return adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[3])
    assert torch.autograd.gradcheck(f, (m, v), eps=1e-6, atol=1e-7)

    px = cuda_tensors([0.0, 1.1, 1.0, -0.1], requires_grad=True)
    py = cuda_tensors([0.0, 0.1, 1.2, 0.9], requires_grad=True)
    rest = cuda_tensors([1.0, 1.2, 0.9, 1.1, 1.5], requires_grad=True)
    a = cuda_tensors([0, 1, 2, 3, 0], dtype=torch.int64)
    b = cuda_tensors([1, 2, 3, 0, 2], dtype=torch.int64)

    def g(px, py, rest):
        return adt.apply(k.springs, 5, inputs=[px, py, a, b, rest, 2.0], outputs=[4, 4])
    assert torch.autograd.gradcheck(g, (px, py, rest), eps=1e-6, atol=1e-7)


def test_cuda_output_initial_values_and_their_gradient(k, cuda_tensors):
    x = cuda_tensors(V, requires_grad=True)
    init = cuda_tensors([10.0, 20.0, 30.0], requires_grad=True)
    (s,) = adt.apply(k.accumulate, 3, inputs=[x], outputs=[init])
    np.testing.assert_array_equal(s.detach().cpu().numpy(), [11.0, 18.0, 34.0])
    np.testing.assert_array_equal(init.detach().cpu().numpy(), [10.0, 20.0, 30.0])
    (s * cuda_tensors([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(init.grad.cpu().numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.grad.cpu().numpy(), [2.0, 4.0, 6.0])


def test_cuda_fault_is_raised_before_torch_gets_the_outputs(kernel_module, cuda_tensors):
    """A checked CUDA launch does not wait for its kernel; adjoint.torch reads its status
    before PyTorch (which reads GPU memory without adjoint) gets the outputs."""
    m = kernel_module('''
        @ad.kernel
        def gather(idx: ad.array(dtype=ad.int64), x: ad.array(dtype=float),
                   out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = x[idx[i]]
        ''')
    x = cuda_tensors([1.0, 2.0, 3.0], requires_grad=True)
    idx = cuda_tensors([0, 7, 1], dtype=torch.int64)
    with pytest.raises(ad.BoundsError, match=r"(?s)kernel 'gather'.*index 7.*found by "
                                             r"adjoint\.torch"):
        adt.apply(m.gather, 3, inputs=[idx, x], outputs=[3])
    idx = cuda_tensors([2, 0, 1], dtype=torch.int64)
    (out,) = adt.apply(m.gather, 3, inputs=[idx, x], outputs=[3])
    np.testing.assert_array_equal(out.detach().cpu().numpy(), [3.0, 1.0, 2.0])


def test_cuda_from_torch_shares_memory(cuda_tensors):
    t = cuda_tensors([1.0, 2.0, 3.0])
    arr = adt.from_torch(t, requires_grad=True)
    assert arr.device == "cuda" and arr.grad.device == "cuda"
    assert _address(arr) == t.data_ptr()
    arr.fill_(4.0)
    np.testing.assert_array_equal(t.cpu().numpy(), [4.0, 4.0, 4.0])


def test_cpu_and_cuda_tensors_in_one_call_are_refused(k, cuda_tensors, monkeypatch):
    m = cuda_tensors(M)
    v = torch.tensor(V, dtype=F64)                  # a CPU tensor
    if cuda_tensors.device == "cpu":                # (the simulator: all but v stand in)
        monkeypatch.setattr(adt, "_on_cuda", lambda t: t.data_ptr() != v.data_ptr())
    with pytest.raises(ad.AdjointError, match="parameter 'v' is a CPU tensor and 'm' a CUDA"):
        adt.apply(k.step_velocity, 3, inputs=[m, v, -9.8, 0.1], outputs=[3])


def test_cuda_to_torch_shares_memory(cuda_tensors):
    if cuda_tensors.device != "cuda":
        pytest.skip("a CUDA tensor over device memory needs a GPU (the simulator has none)")
    arr = ad.array([1.0, 2.0], device="cuda")
    t = adt.to_torch(arr)
    assert t.device.type == "cuda" and t.data_ptr() == _address(arr)
    t.fill_(3.0)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(arr.numpy(), [3.0, 3.0])
