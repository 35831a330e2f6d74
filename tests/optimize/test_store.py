"""The store policy (optimize/store.py): a taped launch saves what a loop leaves per
thread, and its backward reads it instead of replaying the loop.

Each kernel's gradient is taken three ways on every backend: recorded on a tape
(``backward_saved``, reading the saved values), by a direct ``adjoint=True`` launch
(``backward``, replaying the loop) and by central finite differences of the forward.
The first two must agree bitwise (the same arithmetic in the same order; on a real GPU
to rounding: the layer's atomics add in any order, NVVM fuses multiply-adds in each
kernel its own way, tests/gpu_tolerance.py), and both with the finite differences. Which loops are stored is checked on the spec and on the
generated bodies, so a policy that silently stopped storing would fail here too.
"""
import gast
import numpy as np
import pytest
from tests.conftest import central_fd
from tests.gpu_tolerance import assert_same

import adjoint as ad
from adjoint.build.pipeline import transform

KERNELS = '''
@ad.kernel
def energy(n: int, m: ad.array(dtype=float), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    e = 0.0
    for j in range(n):
        d = x[j] - x[i]
        e += m[j] / ad.sqrt(d * d + 0.1)
    out[i] = -m[i] * e * e


@ad.kernel
def early(n: int, m: ad.array(dtype=float), x: ad.array(dtype=float),
          out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(n):
        s += m[j] * x[i] * x[j]
        if s > 1.5:
            break
    out[i] = ad.sin(s) * m[i]


@ad.kernel
def until(n: int, m: ad.array(dtype=float), x: ad.array(dtype=float),
          out: ad.array(dtype=float)):
    i = ad.tid()
    s = m[i]
    while s < 4.0:
        s = s + x[i] * x[i] + 0.5
    out[i] = s * s


@ad.kernel
def branch(n: int, m: ad.array(dtype=float), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    if x[i] > 0.0:
        for j in range(n):
            s += ad.cos(x[j]) * m[i]
    out[i] = s * s + x[i]


@ad.kernel
def carried(n: int, m: ad.array(dtype=float), x: ad.array(dtype=float),
            out: ad.array(dtype=float)):
    i = ad.tid()
    p = x[i]
    for j in range(n):
        p = ad.sin(p) * m[j]
    out[i] = p


@ad.kernel
def layer(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float, ndim=2),
          out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    s = 0.0
    for k in range(n):
        s += w[i, k] * x[k, j]
    out[i, j] = ad.tanh(s)


@ad.kernel
def twice(n: int, m: ad.array(dtype=float), x: ad.array(dtype=float),
          out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(n):
        s += m[j] * x[j]
    a = s * x[i]
    s = 0.0
    for j in range(n):
        s += x[j] * x[j] * m[i]
        if s > 3.0:
            break
    out[i] = a * s


@ad.kernel
def energy32(n: int, m: ad.array(dtype=ad.float32), x: ad.array(dtype=ad.float32),
             out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    e = 0.0
    for j in range(n):
        d = x[j] - x[i]
        e += m[j] / ad.sqrt(d * d + 0.1)
    out[i] = -m[i] * e * e
'''

N = 12
# kernel -> what its store policy saves (value name: kind); carried's loop keeps its stacks
SAVED = {"twice": ["loop1_count", "s_1", "s_4"], "energy": ["e_1"], "early": ["loop0_count", "s_1"], "until": ["loop0_count", "s_1"],
         "branch": ["s_1"], "carried": [], "layer": ["s_1"]}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    import importlib.util
    path = tmp_path_factory.mktemp("store") / "store_kernels.py"
    path.write_text("import adjoint as ad\n" + KERNELS)
    spec = importlib.util.spec_from_file_location("store_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs(name, dtype=np.float64):
    rng = np.random.default_rng(7)
    if name == "layer":
        return [rng.uniform(-0.4, 0.4, (N, N)), rng.uniform(-0.4, 0.4, (N, 3))], (N, 3)
    m = rng.uniform(0.2, 0.6, N)
    x = rng.uniform(-1.0, 1.0, N)
    if name == "until":
        m = rng.uniform(0.0, 1.0, N)
    return [m.astype(dtype), x.astype(dtype)], (N,)


def _forward(kernel, dims, arrays, shape, dtype=np.float64):
    out = ad.zeros(shape, dtype=dtype)
    ad.launch(kernel, dims, [N, *[ad.array(a) for a in arrays]], [out], record_tape=False)
    return out.numpy()


def _gradients(kernel, arrays, shape, dtype=np.float64):
    """(taped gradients, direct-backward gradients, whether the tape saved values)."""
    dims = shape
    w = np.random.default_rng(3).uniform(0.5, 1.5, shape).astype(dtype)
    ins = [ad.array(a, requires_grad=True) for a in arrays]
    out = ad.zeros(shape, dtype=dtype, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, dims, [N, *ins], [out])
    saved = bool(tape.steps[0].saved)
    tape.backward(grads={out: w})
    taped = [a.grad.numpy().copy() for a in ins]
    adjs = [ad.zeros(a.shape, dtype=dtype) for a in arrays]
    ad.launch(kernel, dims, [N, *[ad.array(a) for a in arrays]], [ad.zeros(shape, dtype=dtype)],
              adjoint=True, adj_inputs=[None, *adjs], adj_outputs=[ad.array(w)])
    return taped, [a.numpy() for a in adjs], saved, w


@pytest.mark.parametrize("name", sorted(SAVED))
def test_stored_gradient_equals_replay_and_fd(backend, kernels, name):
    kernel = getattr(kernels, name)
    arrays, shape = _inputs(name)
    taped, replayed, saved, w = _gradients(kernel, arrays, shape)
    assert saved == bool(SAVED[name])
    for t, r in zip(taped, replayed):
        assert_same(t, r, err_msg="the stored backward's gradient is the replaying one's")
    for k, a in enumerate(arrays):
        def f(v, k=k):
            args = list(arrays)
            args[k] = v
            return float(np.sum(w * _forward(kernel, shape, args, shape)))
        np.testing.assert_allclose(taped[k], central_fd(f, a), rtol=1e-6, atol=1e-7)


def test_float32_saved_values_are_float32(backend, kernels):
    arrays, shape = _inputs("energy32", np.float32)
    spec = kernels.energy32.spec_for("cuda" if backend == "cuda" else "cpu")
    assert [d for _, d in spec.saved] == ["float32"]
    taped, replayed, saved, _ = _gradients(kernels.energy32, arrays, shape, np.float32)
    assert saved
    for t, r in zip(taped, replayed):
        assert_same(t, r, err_msg="the stored backward's gradient is the replaying one's")
    ref, _, _, _ = _gradients(kernels.energy, [a.astype(np.float64) for a in arrays], shape)
    for t, r in zip(taped, ref):
        np.testing.assert_allclose(t, r, rtol=2e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(SAVED))
def test_policy_per_loop(kernels, name):
    """What is saved, and that the saving backward runs the stored loop once (reversed),
    where the replaying one runs it twice."""
    tr = transform(getattr(kernels, name).pyfunc, "kernel")
    if not SAVED[name]:
        assert tr.saved is None
        return
    assert sorted(v for _, v, _ in tr.saved.params) == SAVED[name]

    def loops(body):
        return sum(isinstance(n, (gast.For, gast.While)) for s in body for n in gast.walk(s))
    assert loops(tr.saved.backward) == loops(tr.rev.backward) - len(tr.saved.loops)
    assert loops(tr.saved.forward) == loops(tr.rev.forward)


def test_saved_memory_is_one_value_per_thread(kernels):
    arrays, shape = _inputs("layer")
    ins = [ad.array(a, requires_grad=True) for a in arrays]
    out = ad.zeros(shape, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernels.layer, shape, [N, *ins], [out])
    (s,) = tape.steps[0].saved
    assert s.shape == shape and s.dtype == np.float64
    np.testing.assert_allclose(np.tanh(s), out.numpy(), rtol=1e-15)
    report = tape.memory_report()
    assert report["saved_bytes"] == N * 3 * 8 == report["per_step"][0].saved_bytes
    referenced = (N * N + N * 3 + N * 3) * 8
    assert report["total_bytes"] == referenced + N * 3 * 8
    assert "288 B in loop values and gradients saved for backwards" in str(report)


def test_saved_values_count_against_the_tape_budget(kernels):
    arrays, shape = _inputs("layer")
    ins = [ad.array(a, requires_grad=True) for a in arrays]
    out = ad.zeros(shape, requires_grad=True)
    referenced = (N * N + N * 3 + N * 3) * 8
    with ad.Tape(max_bytes=referenced + N * 3 * 8 - 1) as tape:
        with pytest.raises(ad.TapeError, match=f"would make the tape hold "
                           f"{referenced + N * 3 * 8} bytes"):         # (saved values included)
            ad.launch(kernels.layer, shape, [N, *ins], [out])
    with ad.Tape(max_bytes=referenced + N * 3 * 8) as tape:
        ad.launch(kernels.layer, shape, [N, *ins], [out])
    assert len(tape.steps) == 1


def test_show_the_saving_pair(kernels):
    """``ad.source`` / ``adjoint show --stage forward_save|backward_saved`` print the pair;
    a kernel with no stored loop says why it has none."""
    fwd = ad.source(kernels.energy, "forward_save")
    bwd = ad.source(kernels.energy, "backward_saved")
    assert "saved_e_1[tid0] = e_1" in fwd
    assert "e_1 = saved_e_1[tid0]" in bwd and "loop0_count = rt.trip_count(0, n, 1)" in bwd
    assert "loop0_count += 1" not in bwd           # the plain backward counts by replaying
    assert "loop0_count += 1" in ad.source(kernels.energy, "backward")
    with pytest.raises(ValueError, match="'carried' has no backward_saved functions"):
        ad.source(kernels.carried, "backward_saved")
