"""Pass order (derive/order.py): the reverse of a loop whose iterations' adjoints are
independent walks them first to last; every other loop's reverse walks them backwards.

Which way each loop goes is read from the generated backward (the walk forward is what
made the tanh layer's backward as fast as the hand-written one); the gradients of every
kernel here, walked either way, are checked against central finite differences of the
forward on every backend, on a tape (the saving backward) and by an ``adjoint=True``
launch (the replaying one).
"""
import numpy as np
import pytest
from tests.conftest import central_fd

import adjoint as ad

KERNELS = '''
@ad.kernel
def dot(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
        out: ad.array(dtype=float)):
    i = ad.tid()
    s = x[i]
    for k in range(n):
        s += w[i, k] * x[k]
    out[i] = ad.tanh(s)


@ad.kernel
def two_sums(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
             out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    t = 1.0
    j = 0
    for k in range(n):
        s = s + x[k] * x[j] * w[i, k]
        t = t - ad.sin(x[k] * x[i])
        j = k
    out[i] = s * t


@ad.kernel
def nested(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        t = x[i]
        for j in range(n):
            t += w[k, j] * x[j]
        s += ad.tanh(t) * x[k]
    out[i] = s


@ad.kernel
def added(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
          out: ad.array(dtype=float)):
    i = ad.tid()
    for k in range(n):
        ad.atomic_add(out, k, w[i, k] * x[i] * x[k])


@ad.func
def soft(v: float) -> float:
    if v > 0.0:
        return v * v
    return ad.sin(v)


@ad.kernel
def through_func(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
                 out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        s += soft(w[i, k] + x[k]) * x[i]
    out[i] = s


@ad.kernel
def skips(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
          out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        if k == i:
            continue
        s += w[i, k] * x[k]
    out[i] = s * x[i]


@ad.kernel
def product(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
            out: ad.array(dtype=float)):
    i = ad.tid()
    s = 1.0
    for k in range(n):
        s = s * (x[k] + w[i, k])
    out[i] = s


@ad.kernel
def grows(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
          out: ad.array(dtype=float)):
    i = ad.tid()
    s = x[i]
    for k in range(n):
        s = s + s * w[i, k] * 0.1
    out[i] = s


@ad.kernel
def subtracted_from(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
                    out: ad.array(dtype=float)):
    i = ad.tid()
    s = x[i]
    for k in range(n):
        s = w[i, k] - s
    out[i] = s * s


@ad.kernel
def stores(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        s += w[i, k] * x[k]
        out[i] = s * s


@ad.kernel
def breaks(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        s += w[i, k] * x[k]
        if k == 3:
            break
    out[i] = s * x[i]


@ad.kernel
def branchy(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
            out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        if w[i, k] > 0.0:
            s += w[i, k] * x[k]
    out[i] = s * x[i]


@ad.kernel
def maxed(n: int, w: ad.array(dtype=float, ndim=2), x: ad.array(dtype=float),
          out: ad.array(dtype=float)):
    i = ad.tid()
    for k in range(n):
        ad.atomic_max(out, k, w[i, k] * x[i])
'''

N = 6
# kernel -> how the reverse of each of its loops walks, in the order printed
WALKS = {"dot": ["forward"], "two_sums": ["forward"], "nested": ["forward", "forward"],
         "added": ["forward"], "product": ["backward"], "grows": ["backward"],
         "subtracted_from": ["backward"], "stores": ["backward"], "breaks": ["backward"],
         "branchy": ["backward"], "maxed": ["backward"], "through_func": ["forward"],
         "skips": ["backward"]}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    import importlib.util
    path = tmp_path_factory.mktemp("order") / "order_kernels.py"
    path.write_text("import adjoint as ad\n" + KERNELS)
    spec = importlib.util.spec_from_file_location("order_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _walks(source):
    out = []
    for line in source.splitlines():
        line = line.strip()
        if line.startswith("for loop") and "_iter in range(" in line:
            forward = line.endswith("_count, 1):") and "range(0, loop" in line
            backward = line.endswith("_count - 1, -1, -1):")
            assert forward != backward, line
            out.append("forward" if forward else "backward")
    return out


@pytest.mark.parametrize("name", sorted(WALKS))
def test_which_loops_walk_forward(kernels, name):
    kernel = getattr(kernels, name)
    thread = ad.source(kernel, "backward").split("\ndef ")[0]    # (not a pair function)
    assert _walks(thread) == WALKS[name]


def test_a_forward_walk_says_why(kernels):
    text = ad.source(kernels.dot, "backward")
    assert "in forward order: no iteration's" in text and "(derive/order.py)" in text


def _inputs():
    rng = np.random.default_rng(11)
    return [rng.uniform(-0.8, 0.8, (N, N)), rng.uniform(-0.9, 0.9, N)]


def _forward(kernel, arrays):
    out = ad.zeros(N)
    ad.launch(kernel, N, [N, *[ad.array(a) for a in arrays]], [out], record_tape=False)
    return out.numpy()


@pytest.mark.parametrize("name", sorted(WALKS))
def test_gradients_against_central_differences(backend, kernels, name):
    kernel = getattr(kernels, name)
    arrays = _inputs()
    seed = np.random.default_rng(5).uniform(0.5, 1.5, N)
    ins = [ad.array(a, requires_grad=True) for a in arrays]
    out = ad.zeros(N, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, N, [N, *ins], [out])
    tape.backward(grads={out: seed})
    adjs = [ad.zeros(a.shape) for a in arrays]
    after = ad.array(out.numpy())       # (atomic_max's gradient goes where v is the result)
    ad.launch(kernel, N, [N, *[ad.array(a) for a in arrays]], [after], adjoint=True,
              adj_inputs=[None, *adjs], adj_outputs=[ad.array(seed)])
    for k, a in enumerate(arrays):
        def f(v, k=k):
            args = list(arrays)
            args[k] = v
            return float(np.sum(seed * _forward(kernel, args)))
        fd = central_fd(f, a)
        np.testing.assert_allclose(ins[k].grad.numpy(), fd, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(adjs[k].numpy(), fd, rtol=1e-6, atol=1e-7)
