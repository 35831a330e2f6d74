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
