"""Vector mode (adjoint/derivatives/vector_mode.py): k tangents in one JVP launch, the primal once.

Row j of a vector launch is ``ad.launch(..., tangents=<rows j>)`` bit for bit, on every
backend; the columns match central differences in float64; ``ad.autograd.jacobian``
and ``ad.autograd.hvp(..., k=)`` built on it agree with the backward's rows and with
single-direction products; bad tangents are refused naming what is wrong."""
import numpy as np
import pytest

import adjoint as ad
from adjoint.autograd import _ad_blocks, _pairs, _problem
from adjoint.errors import LaunchError
from adjoint.vector_mode import MAX_DIRECTIONS, jvp_launch
from tests.gpu_tolerance import assert_same

SOURCE = """
@ad.func
def bump(a: float) -> float:
    return a * math.sin(a)

@ad.kernel
def mix(n: int, x: ad.array(dtype=float), y: ad.array(dtype=float, ndim=2),
        out: ad.array(dtype=float), total: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        if s < 1.0:
            s = s + bump(x[i]) * y[i, k % 2]
        else:
            s = 0.5 * s + math.exp(-x[(i + k) % 6])
    out[i] = s / (1.0 + y[i, 1] * y[i, 1])
    ad.atomic_add(total, 0, s * s)
    total[1] += math.sqrt(1.0 + s * s)
"""

N, K = 6, 5


@pytest.fixture
def mix(kernel_module):
    return kernel_module(SOURCE).mix


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.2, 0.9, N), rng.uniform(-1.0, 1.0, (N, 2)), \
        rng.normal(size=(K, N)), rng.normal(size=(K, N, 2))


def test_k_directions_are_k_launches_bit_for_bit(backend, mix):
    x, y, tx, ty = _data()
    xs, ys, out, total = ad.array(x), ad.array(y), ad.zeros(N), ad.zeros(2)
    got = jvp_launch(mix, N, [3, xs, ys], [out, total],
                     tangents={"x": ad.array(tx), ys: ad.array(ty)})
    assert sorted(got) == ["out", "total", "x", "y"]
    assert got["out"].shape == (K, N) and got["total"].shape == (K, 2)
    for j in range(K):
        out1, total1 = ad.zeros(N), ad.zeros(2)
        one = ad.launch(mix, N, [3, ad.array(x), ad.array(y)], [out1, total1],
                        tangents={"x": ad.array(tx[j]), "y": ad.array(ty[j])})
        for name in ("out", "total"):
            assert np.array_equal(got[name].numpy()[j], one[name].numpy()), (name, j)
        if j == 0:      # the outputs are written as the forward writes them
            assert np.array_equal(out.numpy(), out1.numpy())
            assert np.array_equal(total.numpy(), total1.numpy())


def test_columns_match_central_differences(mix):
    x, y, tx, ty = _data(1)

    def forward(xv, yv):
        out, total = ad.zeros(N), ad.zeros(2)
        ad.launch(mix, N, [3, ad.array(xv), ad.array(yv)], [out, total])
        return np.concatenate([out.numpy(), total.numpy()])
    got = jvp_launch(mix, N, [3, ad.array(x), ad.array(y)], [ad.zeros(N), ad.zeros(2)],
                     tangents={"x": tx, "y": ty})
    eps = 1e-6
    for j in range(K):
        fd = (forward(x + eps * tx[j], y + eps * ty[j]) -
              forward(x - eps * tx[j], y - eps * ty[j])) / (2 * eps)
        ad_ = np.concatenate([got["out"].numpy()[j], got["total"].numpy()[j]])
        np.testing.assert_allclose(ad_, fd, rtol=1e-6, atol=1e-8)


def test_jacobian_in_chunks_matches_the_backward_rows(kernel_module):
    m = kernel_module("""
    @ad.kernel
    def spread(x: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        s = 0.0
        for k in range(x.shape[0]):
            s += math.sin(x[k] * float(i + 1))
        out[i] = s * x[i]
    """)
    x = np.linspace(-1.0, 1.0, 37)      # three chunks of columns: 16, 16, 5
    inputs, outputs = [ad.array(x)], [ad.zeros(4)]
    jac = ad.autograd.jacobian(m.spread, 4, inputs, outputs)[(0, 0)]
    problem = _problem(m.spread, 4, inputs, outputs)
    rows = _ad_blocks(problem, _pairs(problem, None))[(0, 0)]
    np.testing.assert_allclose(jac, rows, rtol=1e-13, atol=1e-14)
    fd = ad.autograd.jacobian_fd(m.spread, 4, inputs, outputs)[(0, 0)]
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)


def test_jacobian_of_a_kernel_without_a_jvp_takes_the_backward_rows(kernel_module):
    m = kernel_module("""
    @ad.func
    def clipped(a: float) -> float:
        return min(a, 1.0)

    @ad.func_grad(clipped)
    def clipped_grad(a: float, adj_ret: float) -> float:
        return adj_ret

    @ad.kernel
    def clip(x: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        out[i] = clipped(x[i]) * 2.0
    """)
    jac = ad.autograd.jacobian(m.clip, 3, [ad.array([0.5, 2.0, 3.0])], [ad.zeros(3)])
    np.testing.assert_array_equal(jac[(0, 0)], 2.0 * np.eye(3))


def test_hvp_of_k_directions_is_k_products_bit_for_bit(backend, mix):
    x, y, tx, ty = _data(2)
    args = dict(inputs=[3, ad.array(x), ad.array(y)], outputs=[ad.zeros(N), ad.zeros(2)])
    many = ad.autograd.hvp(mix, N, v=[None, tx, ty], k=K, **args)
    assert many[0] is None and many[1].shape == (K, N) and many[2].shape == (K, N, 2)
    for j in range(K):
        one = ad.autograd.hvp(mix, N, v=[None, tx[j], ty[j]], **args)
        assert np.array_equal(many[1][j], one[1]) and np.array_equal(many[2][j], one[2])


def test_bad_tangents_are_refused_naming_what_is_wrong(mix):
    x, y, tx, ty = _data()
    args = ([3, ad.array(x), ad.array(y)], [ad.zeros(N), ad.zeros(2)])
    with pytest.raises(LaunchError, match=r"same number k.*'x': 5, 'y': 4"):
        jvp_launch(mix, N, *args, tangents={"x": tx, "y": ty[:4]})
    with pytest.raises(LaunchError, match=r"tangents of 'y' must have shape \(5, 6, 2\)"):
        jvp_launch(mix, N, *args, tangents={"x": tx, "y": ty[:, :3]})
    with pytest.raises(LaunchError, match=r"tangents of 'x' .* dtype float64.*float32"):
        jvp_launch(mix, N, *args, tangents={"x": tx.astype(np.float32)})
    with pytest.raises(LaunchError, match="'n' is not a float array"):
        jvp_launch(mix, N, *args, tangents={"n": tx})
    with pytest.raises(LaunchError, match="'z', which is not one of its parameters"):
        jvp_launch(mix, N, *args, tangents={"z": tx})
    with pytest.raises(LaunchError, match="non-empty dict"):
        jvp_launch(mix, N, *args, tangents=[tx])
    with pytest.raises(LaunchError, match=f"at most {MAX_DIRECTIONS}"):
        jvp_launch(mix, N, *args, tangents={"x": np.zeros((MAX_DIRECTIONS + 1, N))})
    with pytest.raises(ValueError, match=r"directions for 'x' must have shape \(2, 6\)"):
        ad.autograd.hvp(mix, N, *args, v=[None, tx, None], k=2)
    with pytest.raises(ValueError, match="k is a number of directions"):
        ad.autograd.hvp(mix, N, *args, v=[None, tx, None], k=K, mode="rev-fwd")


def test_k_seeds_are_k_backward_launches_bit_for_bit(backend, mix):
    from adjoint.printed import vjp_kernel
    from adjoint.vector_mode import vjp_launch
    x, y, _, _ = _data(3)
    rng = np.random.default_rng(4)
    s_out, s_total = rng.normal(size=(K, N)), rng.normal(size=(K, 2))
    got = vjp_launch(mix, N, [3, ad.array(x), ad.array(y)], [ad.zeros(N), ad.zeros(2)],
                     seeds={"out": ad.array(s_out), "total": ad.array(s_total)})
    assert got["x"].shape == (K, N) and got["y"].shape == (K, N, 2)
    for j in range(K):
        ax, ay = ad.zeros(N), ad.zeros((N, 2))
        ad.launch(vjp_kernel(mix), N, [3, ad.array(x), ad.array(y), ad.zeros(N), ad.zeros(2),
                                       ax, ay, ad.array(s_out[j]), ad.array(s_total[j])],
                  record_tape=False)
        # (bit for bit but on a real GPU: atomics add in the order threads arrive there)
        assert_same(got["x"].numpy()[j], ax.numpy(), err_msg=str(j))
        assert_same(got["y"].numpy()[j], ay.numpy(), err_msg=str(j))
        xs, ys = ad.array(x, requires_grad=True), ad.array(y, requires_grad=True)
        ad.launch(mix, N, [3, xs, ys], [ad.zeros(N), ad.zeros(2)], adjoint=True,
                  adj_outputs=[ad.array(s_out[j]), ad.array(s_total[j])], record_tape=False)
        np.testing.assert_allclose(got["x"].numpy()[j], xs.grad.numpy(), rtol=1e-13, atol=1e-14)
    # the seeds are cleared where the kernel stores (out), as a backward launch clears them
    assert not got["out"].numpy().any()


def test_k_seeds_give_rows_of_the_central_differences_jacobian(mix):
    from adjoint.vector_mode import vjp_launch
    x, y, _, _ = _data(5)
    seeds = np.eye(K, N)
    got = vjp_launch(mix, N, [3, ad.array(x), ad.array(y)], [ad.zeros(N), ad.zeros(2)],
                     seeds={"out": seeds})
    fd = ad.autograd.jacobian_fd(mix, N, [3, ad.array(x), ad.array(y)],
                                 [ad.zeros(N), ad.zeros(2)], input_output_mask=[("x", "out")])
    np.testing.assert_allclose(got["x"].numpy(), fd[(1, 0)][:K], rtol=1e-6, atol=1e-8)
    with pytest.raises(LaunchError, match=r"seeds of 'total' must have shape \(5, 2\)"):
        vjp_launch(mix, N, [3, ad.array(x), ad.array(y)], [ad.zeros(N), ad.zeros(2)],
                   seeds={"out": seeds, "total": np.zeros((K, 3))})


def test_the_benchmark_runs_and_checks_bit_for_bit():
    from benchmarks.vector_mode import measure
    with ad.backend_scope("numba"):
        r = measure(40, 4, 1, "pos")
    assert r["bitwise_equal"] and r["k"] == 4 and r["separate_s"] > 0 and r["vector_s"] > 0
