"""``ad.simulate``: a time loop reversed with binomial checkpointing.

The reference is the same ping-pong loop recorded on a plain tape (whose gradient
is checked against central finite differences); ``simulate`` must give it bit for
bit, for any number of checkpoints, while holding a few states.
"""
import functools

import numpy as np
import pytest

import adjoint as ad
from adjoint.simulate import split

from tests.conftest import central_fd

KERNELS = '''
@ad.kernel
def zero(f: ad.array(dtype=float)):
    i = ad.tid()
    f[i] = 0.0

@ad.kernel
def pull(x: ad.array(dtype=float), k: ad.array(dtype=float), f: ad.array(dtype=float)):
    i = ad.tid()
    j = (i + 1) % x.shape[0]
    d = x[j] - x[i] - 1.0
    ad.atomic_add(f, i, k[0] * d)
    ad.atomic_sub(f, j, k[0] * d)

@ad.kernel
def integrate(x: ad.array(dtype=float), v: ad.array(dtype=float), f: ad.array(dtype=float),
              dt: float, x2: ad.array(dtype=float), v2: ad.array(dtype=float)):
    i = ad.tid()
    v2[i] = 0.99 * (v[i] + dt * (f[i] - math.sin(x[i])))
    x2[i] = x[i] + dt * v2[i]

@ad.kernel
def energy(x: ad.array(dtype=float), total: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(total, 0, x[i] * x[i])
'''

N = 4


@pytest.fixture
def k(kernel_module):
    return kernel_module(KERNELS)


def _stepper(k, stiff, wrap_forces=lambda fn: fn):
    f = ad.zeros(N, requires_grad=True)     # scratch forces, rewritten every step

    @wrap_forces
    def forces(x):
        ad.launch(k.zero, N, inputs=[], outputs=[f])
        ad.launch(k.pull, N, inputs=[x, stiff], outputs=[f])

    def step(src, dst, t):
        forces(src[0])
        ad.launch(k.integrate, N, inputs=[src[0], src[1], f, 0.05 + 0.001 * t],
                  outputs=[dst[0], dst[1]])
    step.forces = f
    return step


def _inputs(x0=None):
    x = ad.array(np.linspace(0.0, 3.5, N) if x0 is None else x0, requires_grad=True)
    v = ad.array(np.linspace(0.5, -0.2, N), requires_grad=True)
    return x, v, ad.array([3.0], requires_grad=True)


def _plain(k, n, x0=None):
    """The ping-pong loop on a plain tape; returns (tape, x, v, stiff, total)."""
    x, v, stiff = _inputs(x0)
    step = _stepper(k, stiff)
    a = (ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True))
    b = (ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True))
    out = (ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True))
    total = ad.zeros(1, requires_grad=True)
    with ad.Tape() as tape:
        cur = (x, v)
        for t in range(n):
            nxt = out if t == n - 1 else (b if cur is a else a)
            step(cur, nxt, t)
            cur = nxt
        ad.launch(k.energy, N, inputs=[out[0]], outputs=[total])
    return tape, x, v, stiff, total


def _checkpointed(k, n, checkpoints, **kw):
    x, v, stiff = _inputs()
    total = ad.zeros(1, requires_grad=True)
    with ad.Tape(**kw) as tape:
        xn, vn = ad.simulate(_stepper(k, stiff), (x, v), n, checkpoints=checkpoints)
        ad.launch(k.energy, N, inputs=[xn], outputs=[total])
    return tape, x, v, stiff, total


def _grads(tape, x, v, stiff, total):
    tape.backward(loss=total)
    return [x.grad.numpy().copy(), v.grad.numpy().copy(), stiff.grad.numpy().copy(),
            total.numpy().copy()]


def test_plain_loop_matches_finite_differences(backend, k):
    grads = _grads(*_plain(k, 6))

    def loss(x0):
        *_, total = _plain(k, 6, x0)
        return float(total.numpy()[0])
    np.testing.assert_allclose(grads[0], central_fd(loss, np.linspace(0.0, 3.5, N)),
                               rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("n,checkpoints", [(1, "auto"), (7, 0), (7, 2), (30, 1), (30, "auto")])
def test_gradient_is_bitwise_the_plain_tapes(backend, k, n, checkpoints):
    """Bit for bit on the CPU backends; on CUDA to float64 rounding: ``pull``'s atomic adds
    into one element land in the order threads arrive, which differs between runs (in the
    simulator too)."""
    expected = _grads(*_plain(k, n))
    got = _grads(*_checkpointed(k, n, checkpoints))
    for a, b in zip(expected, got):
        if backend == "cuda":
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
        else:
            np.testing.assert_array_equal(a, b, strict=True)


def test_long_loop_bitwise_and_backward_twice(k):
    """200 steps, 5 slots, python backend; a second backward (slots already consumed)
    recomputes from the start and adds the same gradient again."""
    with ad.backend_scope("python"):
        expected = _grads(*_plain(k, 200))
        tape, x, v, stiff, total = _checkpointed(k, 200, 5)
        first = _grads(tape, x, v, stiff, total)
        for a, b in zip(expected, first):
            np.testing.assert_array_equal(a, b, strict=True)
        tape.zero()
        again = _grads(tape, x, v, stiff, total)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b, strict=True)


def test_checkpointed_part_of_a_step_and_scratch_arrays_restored(backend, k):
    """A step whose force computation is an ad.checkpoint segment; after the backward
    the scratch force array holds what the forward left in it."""
    expected = _grads(*_plain(k, 12))
    x, v, stiff = _inputs()
    total = ad.zeros(1, requires_grad=True)
    step = _stepper(k, stiff, ad.checkpoint)
    with ad.Tape() as tape:
        xn, vn = ad.simulate(step, (x, v), 12, checkpoints=2)
        ad.launch(k.energy, N, inputs=[xn], outputs=[total])
    forces = step.forces.numpy().copy()
    got = _grads(tape, x, v, stiff, total)
    np.testing.assert_array_equal(step.forces.numpy(), forces)
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b, strict=True)


def test_simulation_without_a_tape_gives_the_final_state(k):
    tape, x, v, stiff, total = _plain(k, 9)
    xs, vs, stiffs = _inputs()
    xn, vn = ad.simulate(_stepper(k, stiffs), (xs, vs), 9)
    np.testing.assert_array_equal(xn.numpy(), tape.steps[-2].args[-2].numpy())
    np.testing.assert_array_equal(xs.numpy(), np.linspace(0.0, 3.5, N))   # only read


def test_memory_of_10000_steps_is_under_5_percent(k):
    """memory_report() of a 10,000-step loop: plain tape against checkpointed (forward
    only: what the tape holds when the backward starts)."""
    with ad.backend_scope("numba"):
        plain, *_ = _plain(k, 10_000)
        ckpt, *_ = _checkpointed(k, 10_000, "auto")
        p, c = plain.memory_report(), ckpt.memory_report()
    assert p["total_bytes"] >= 10_000 * 2 * N * 8
    assert c["total_bytes"] <= 0.05 * p["total_bytes"], (str(p), str(c))
    assert "100 checkpoints" in str(c)


def test_auto_checkpoints_from_a_budget(backend, k):
    state = 2 * N * 8
    tape, *rest = _checkpointed(k, 50, "auto", max_bytes=100 * state)
    report = tape.memory_report()
    assert report["total_bytes"] <= 100 * state
    assert "50 steps, 49 checkpoints" in report["per_step"][0].label
    x, v, stiff = _inputs()
    with pytest.raises(ad.TapeError, match="max_bytes=10 "):
        with ad.Tape():
            ad.simulate(_stepper(k, stiff), (x, v), 50, max_bytes=10)
    # the tape's own budget picks the number of checkpoints when none is given
    tape, *rest = _checkpointed(k, 50, "auto", max_bytes=20 * state)
    assert tape.memory_report()["total_bytes"] <= 20 * state
    np.testing.assert_array_equal(_grads(tape, *rest)[0], _grads(*_plain(k, 50))[0])


def test_a_parameter_overwritten_after_the_loop_is_kept(backend, k):
    """``stiff`` is overwritten after the loop: the recomputation uses the values the
    loop read (the tape keeps a copy), as the plain tape does."""
    expected = _grads(*_plain(k, 5))
    x, v, stiff = _inputs()
    total = ad.zeros(1, requires_grad=True)
    with ad.Tape() as tape:
        xn, vn = ad.simulate(_stepper(k, stiff), (x, v), 5, checkpoints=1)
        ad.launch(k.energy, N, inputs=[xn], outputs=[total])
        stiff.assign(np.array([-7.0]))
    got = _grads(tape, x, v, stiff, total)
    np.testing.assert_array_equal(stiff.numpy(), [-7.0])
    for a, b in zip(expected[:2], got[:2]):
        np.testing.assert_array_equal(a, b, strict=True)
    assert tape.memory_report()["kept_arrays"] == 1


@functools.lru_cache(maxsize=None)
def _fewest(m, c):
    """The least number of untaped forward steps that reverse ``m`` steps with ``c``
    free slots (a dynamic program over every first split)."""
    if m == 1:
        return 0
    if c == 0:
        return m * (m - 1) // 2
    return min(j + _fewest(m - j, c - 1) + _fewest(j, c) for j in range(1, m))


@functools.lru_cache(maxsize=None)
def _ours(m, c):
    if m == 1:
        return 0
    if c == 0:
        return m * (m - 1) // 2
    j = split(m, c)
    return j + _ours(m - j, c - 1) + _ours(j, c)


def test_split_is_the_binomial_optimum():
    for m in range(1, 160):
        for c in range(0, 7):
            assert _ours(m, c) == _fewest(m, c), (m, c)


def test_the_checkpointed_springs_example_runs(tmp_path, monkeypatch):
    """examples/checkpointed_springs.py, shortened: the loss falls and the tape holds
    less than the plain tape of the same loop."""
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    examples = os.path.join(root, "examples")
    monkeypatch.syspath_prepend(examples)
    sys.modules.pop("checkpointed_springs", None)
    import checkpointed_springs
    losses, ckpt, plain = checkpointed_springs.main(
        ["--steps", "60", "--iters", "4", "--out", str(tmp_path / "plot.png")])
    assert losses[-1] < losses[0]
    assert ckpt < plain / 2


def test_the_memory_benchmark_runs(tmp_path):
    """benchmarks/checkpoint.py, tiny: both modes run in their own processes and the
    gradients agree bit for bit."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    r = subprocess.run([sys.executable, "-m", "benchmarks.checkpoint", "--steps", "40",
                        "--size", "50", "--repeat", "1", "--grads", str(tmp_path / "g")],
                       cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "gradients bitwise equal: True" in r.stdout
    assert "7 checkpoints" in r.stdout
