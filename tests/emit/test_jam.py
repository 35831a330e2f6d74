"""Two threads a pass (emit/jam.py): a privatize plan's threads run in pairs through a
loop whose range they share, what they compute alike computed once, their adds into
one element of a private array joined; a parallel plan's threads too where the loop
carries a value of each thread's (a sum: the two threads' sums advance side by side).

Checked: which kernels get a pair function (a loop every thread runs alike, adding into
an element at an index they compute alike) and which do not (a loop that may break, a
loop whose range depends on the thread, a 2-D grid); gradients against float64 central
differences on every backend, at sizes that run numba's parallel plan, with an odd
count of threads (a chunk's last thread runs alone); branches, a loop of the
thread's own, a ``while`` that breaks and a func call inside the shared loop; a float32 kernel against the same kernel in
float64; a failed bounds check inside the shared loop still stopping the launch with
its error; a parallel plan's forward computing in pairs what one thread a pass computes,
bit for bit, and its JVP.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime.backend_numba import PARALLEL_MIN_THREADS
from tests.derive.test_jvp import jvp_check

KERNELS = '''
@ad.kernel
def pairs(m: int, x: ad.array(dtype=float), w: ad.array(dtype=float),
          out: ad.array(dtype=float)):
    i = ad.tid()
    xi = x[i]
    s = 0.0
    for j in range(m):
        d = x[j] - xi
        if d > 0.0:
            s += w[j] * d * d
        else:
            s += w[j] * math.cos(d)
    out[i] = s * xi

@ad.kernel
def own_loop(m: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(m):
        t = x[j] * x[i]
        for k in range(i % 3):
            t = ad.sin(t) + x[j]
        s += t * t
    out[i] = s

@ad.func
def bump(a: float, b: float):
    if a > b:
        return a * b
    return ad.sin(a) + b

@ad.kernel
def nested_while(m: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(m):
        t = x[j] - x[i]
        w = 0
        while w < 4:
            w += 1
            if t * t > 2.0:
                break
            t = t * 1.5 + 0.1
        s += bump(t, x[j]) * x[j]
    out[i] = s

@ad.kernel
def spread(m: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    xi = x[i]
    for j in range(m):
        ad.atomic_add(out, j, ad.sin(xi * x[j]))

@ad.kernel
def may_break(m: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(m):
        if x[j] > x[i] + 1.5:
            break
        s += x[j] * x[i]
    out[i] = s

@ad.kernel
def own_range(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(i % 5):
        s += x[j] * x[i]
    out[i] = s

@ad.kernel
def gathered(m: int, idx: ad.array(dtype=int), x: ad.array(dtype=float),
             out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(m):
        s += x[idx[j]] * ad.exp(-x[i] * x[i])
    out[i] = s

@ad.kernel
def pairs_loss(m: int, x: ad.array(dtype=float), w: ad.array(dtype=float),
               loss: ad.array(dtype=float)):
    i = ad.tid()
    xi = x[i]
    s = 0.0
    for j in range(m):
        s += w[j] * ad.sin(x[j] * xi)
    ad.atomic_add(loss, 0, s * xi)

@ad.kernel
def grid2d(m: int, x: ad.array(dtype=float), out: ad.array(dtype=float, ndim=2)):
    i, k = ad.tid()
    s = 0.0
    for j in range(m):
        s += x[j] * x[i + k]
    out[i, k] = s
'''

NBODY = '''
@ad.kernel
def energy(m: int, eps2: {f}, mass: ad.array(dtype={f}),
           pos: ad.array(dtype={f}, ndim=2), out: ad.array(dtype={f})):
    i = ad.tid()
    xi = pos[i, 0]
    yi = pos[i, 1]
    e = 0.0
    for j in range(m):
        dx = pos[j, 0] - xi
        dy = pos[j, 1] - yi
        e += mass[j] / ad.sqrt(dx * dx + dy * dy + eps2)
    out[i] = -mass[i] * e
'''


def _n(backend):
    """An odd launch size that runs the parallel plan on numba (its small loop below)."""
    return 2 * PARALLEL_MIN_THREADS + 1 if backend == "numba" else 301


def _run(kernel, n, scalars, arrays, out_shape, seed=None):
    """(out, {name: gradient}) of a launch recorded on a tape and its backward with
    ``seed`` (out only, when None)."""
    wrapped = {k: ad.array(v, requires_grad=v.dtype.kind == "f") for k, v in arrays.items()}
    out = ad.zeros(out_shape, requires_grad=True)
    if seed is None:
        ad.launch(kernel, dim=n, inputs=[*scalars, *wrapped.values()], outputs=[out],
                  record_tape=False)
        return out.numpy().copy(), None
    with ad.Tape() as tape:
        ad.launch(kernel, dim=n, inputs=[*scalars, *wrapped.values()], outputs=[out])
    tape.backward(grads={out: seed})
    return out.numpy().copy(), {k: a.grad.numpy().copy() for k, a in wrapped.items()
                                if a.grad is not None}


def _check_fd(kernel, n, scalars, arrays, rng, out_shape=None):
    """Each float array's gradient against a central difference along three random
    directions (float64)."""
    shape = out_shape or n
    seed = rng.normal(size=shape)
    _, grads = _run(kernel, n, scalars, arrays, shape, seed)
    for key, g in grads.items():
        for _ in range(3):
            d = rng.normal(size=g.shape)

            def f(h):
                moved = dict(arrays, **{key: arrays[key] + h * d})
                return float(np.sum(_run(kernel, n, scalars, moved, shape)[0] * seed))
            fd = (f(1e-6) - f(-1e-6)) / 2e-6
            assert float(np.sum(g * d)) == pytest.approx(fd, rel=1e-6, abs=1e-6), key


def test_which_kernels_get_a_pair_function(kernel_module):
    m = kernel_module(KERNELS)
    src = ad.source(m.pairs, "backward_saved")
    assert "def pairs_backward_saved_pair(" in src
    assert "adj_x[j] += adj_x_add + " in src        # (adj_w's adds are in branches: apart)
    assert "pairs_backward_saved_pair(\n" in src.split("def pairs_backward_saved(")[1]
    # the backward replaying the loop (no tape) too: its iteration counter counts once
    assert "def pairs_backward_pair(" in ad.source(m.pairs, "backward")
    assert "def own_loop_backward_pair(" in ad.source(m.own_loop, "backward")
    assert "def nested_while_backward_pair(" in ad.source(m.nested_while, "backward")
    src = ad.source(m.gathered, "backward")
    assert "def gathered_backward_pair(" in src and "adj_x[t2] += adj_x_add + " in src
    assert src.count("loop0_count += 1") == 2         # the thread's, and the pair's once
    # a loop that may break, a range of the thread's own, a 2-D grid: one thread a pass
    for k in (m.may_break, m.own_range, m.grid2d):
        for stage in ("backward", "backward_saved"):
            try:
                src = ad.source(k, stage)
            except ValueError:          # (no saved loop: no such stage)
                continue
            assert "_pair(" not in src, (k, stage)


@pytest.mark.parametrize("which", ["pairs", "own_loop", "nested_while", "gathered"])
def test_gradients(backend, kernel_module, which):
    m = kernel_module(KERNELS)
    n, count = _n(backend), 24
    rng = np.random.default_rng(7)
    x = rng.uniform(-1.5, 1.5, n)
    if which == "pairs":
        _check_fd(m.pairs, n, [count], {"x": x, "w": rng.uniform(0.5, 2.0, n)}, rng)
    elif which in ("own_loop", "nested_while"):
        _check_fd(getattr(m, which), n, [count], {"x": x}, rng)
    else:
        idx = rng.integers(0, n, count)
        idx[3] = idx[5]          # two iterations add into one element
        _check_fd(m.gathered, n, [count], {"idx": idx, "x": x}, rng)


def test_an_even_count_and_a_single_thread(backend, kernel_module):
    m = kernel_module(KERNELS)
    rng = np.random.default_rng(8)
    for n in (_n(backend) + 1, 1):
        x, w = rng.uniform(-1.5, 1.5, n), rng.uniform(0.5, 2.0, n)
        _check_fd(m.pairs, n, [min(n, 24)], {"x": x, "w": w}, rng)


def test_float32_kernel_against_float64(backend, kernel_module):
    m32 = kernel_module(NBODY.format(f="ad.float32"))
    m64 = kernel_module(NBODY.format(f="float"))
    n = _n(backend)
    rng = np.random.default_rng(9)
    pos, mass = rng.normal(size=(n, 2)), rng.uniform(0.5, 1.5, n)
    seed = rng.normal(size=n)
    grads = {}
    for mod, dtype in ((m32, np.float32), (m64, np.float64)):
        p = ad.array(pos.astype(dtype), requires_grad=True)
        w = ad.array(mass.astype(dtype), requires_grad=True)
        out = ad.zeros(n, dtype=dtype, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(mod.energy, dim=n, inputs=[40, 0.01, w, p], outputs=[out])
        tape.backward(grads={out: seed.astype(dtype)})
        grads[dtype] = (p.grad.numpy().astype(np.float64), w.grad.numpy().astype(np.float64))
    assert "_pair(" in ad.source(m32.energy, "backward_saved")
    for a, b in zip(grads[np.float32], grads[np.float64]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * np.abs(b).max())
    _check_fd(m64.energy, n, [40, 0.01], {"mass": mass, "pos": pos}, rng)


def test_a_failed_bounds_check_in_the_shared_loop_stops_the_launch(backend, kernel_module):
    m = kernel_module(KERNELS)
    n = _n(backend)
    rng = np.random.default_rng(10)
    idx = rng.integers(0, n, 24)
    idx[17] = n + 5
    x = ad.array(rng.normal(size=n), requires_grad=True)
    out = ad.zeros(n, requires_grad=True)
    with pytest.raises(ad.BoundsError, match=r"kernel 'gathered' .*index .* out of bounds "
                                              r"for axis 0 of array 'x'"):
        with ad.Tape() as tape:
            ad.launch(m.gathered, dim=n, inputs=[24, ad.array(idx), x], outputs=[out])
        tape.backward(grads={out: np.ones(n)})


def test_a_forward_and_its_jvp_adding_into_a_shared_loop(backend, kernel_module):
    """atomic_add(out, j, ...) in the loop: the forward and the JVP run in pairs too
    (their plans privatize ``out``, ``dot_out``), and the JVP's values are the
    forward's bit for bit (the same pairs, the same order of additions; on a real GPU,
    whose atomics add in any order, to rounding: jvp_check)."""
    m = kernel_module(KERNELS)
    n = _n(backend)
    for part in ("forward", "jvp", "backward"):
        assert f"def spread_{part}_pair(" in ad.source(m.spread, part), part
    rng = np.random.default_rng(11)
    x = rng.uniform(-1.0, 1.0, n)
    out, _ = _run(m.spread, n, [24], {"x": x}, 24)
    np.testing.assert_allclose(out, np.sin(np.outer(x, x[:24])).sum(axis=0), rtol=1e-12)
    jvp_check(m.spread, n, [24, x], [np.zeros(24)], rtol=1e-5, atol=1e-6)
    _check_fd(m.spread, n, [24], {"x": x}, rng, out_shape=24)


def test_a_parallel_forward_runs_two_threads_a_pass(backend, kernel_module):
    """``pairs`` writes only ``out[i]`` (plan parallel) and its loop carries the thread's
    sum: the forward, its saving variant and its JVP run threads two by two (the
    chunks' last thread alone, the count being odd); each thread's arithmetic is its
    own, in its own order, so the outputs are bit for bit what the serial loop of a
    small launch computes for the same threads. A loop carrying nothing of the
    thread's (``spread``: it adds into ``out[j]``) or a loop that may break does not
    pair a parallel forward."""
    m = kernel_module(KERNELS)
    for part in ("forward", "forward_save", "jvp"):
        src = ad.source(m.pairs, part)
        assert f"def pairs_{part}_pair(" in src, part
        assert f"pairs_{part}_pair(" in src.split(f"def pairs_{part}(")[1], part
        pair = src.split(f"def pairs_{part}_pair(")[1].split("\ndef ")[0]
        assert "what they compute alike once\n" in pair and "as one add" not in pair, part
    for k, part in ((m.may_break, "forward"), (m.own_range, "forward"), (m.grid2d, "forward")):
        assert "_pair(" not in ad.source(k, part), k
    n, count = _n(backend), 24
    rng = np.random.default_rng(12)
    x, w = rng.uniform(-1.5, 1.5, n), rng.uniform(0.5, 2.0, n)
    big, _ = _run(m.pairs, n, [count], {"x": x, "w": w}, n)
    small_n = 97                  # serial on every backend (below the parallel threshold)
    small, _ = _run(m.pairs, small_n, [count], {"x": x[:small_n], "w": w[:small_n]}, small_n)
    assert np.array_equal(big[:small_n], small)
    jvp_check(m.pairs, n, [count, x, w], [np.zeros(n)], rtol=1e-5, atol=1e-6)
    _check_fd(m.pairs, n, [count], {"x": x, "w": w}, rng)


def test_a_loss_summed_in_a_local_runs_two_threads_a_pass(backend, kernel_module):
    """``pairs_loss`` adds each thread's term into ``loss[0]``, which the grid keeps in a
    local per chunk (emit/sums.py): the pair function takes that sum, adds the first
    thread's term then the second's, and returns it; its forward and its backward
    against float64 central differences, and a failed bounds check in a pair."""
    m = kernel_module(KERNELS)
    for part in ("forward", "forward_save"):
        src = ad.source(m.pairs_loss, part)
        pair = src.split(f"def pairs_loss_{part}_pair(")[1].split("\ndef ")[0]
        assert "loss_at_0 = rt.accumulate(loss_at_0, t" in pair and \
            pair.rstrip().endswith("return loss_at_0"), part
        grid = src.split(f"def pairs_loss_{part}(")[1]
        assert f"loss_at_0 = pairs_loss_{part}_pair(" in grid, part
    n, count = _n(backend), 24
    rng = np.random.default_rng(13)
    x, w = rng.uniform(-1.5, 1.5, n), rng.uniform(0.5, 2.0, n)
    loss, _ = _run(m.pairs_loss, n, [count], {"x": x, "w": w}, 1)
    want = np.sum((np.sin(np.outer(x, x[:count])) * w[:count]).sum(axis=1) * x)
    assert loss[0] == pytest.approx(want, rel=1e-12)
    _check_fd(m.pairs_loss, n, [count], {"x": x, "w": w}, rng, out_shape=1)
    with pytest.raises(ad.BoundsError, match=r"kernel 'pairs_loss' .*out of bounds"):
        _run(m.pairs_loss, n, [n + 3], {"x": x, "w": w}, 1)
