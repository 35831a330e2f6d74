"""``ad.simulate(..., capture=True)`` (adjoint/tapes/simulate_capture.py): the backward replays
the steps it runs again with captures of one step. Its gradient is bit for bit the
uncaptured simulation's and the plain tape's, on the python and numba backends, and agrees
with central differences in float64; a step that does not launch what step 0 did, in the
forward or when run again in the backward, is a ``CaptureError``, never a stale result."""
import numpy as np
import pytest

import adjoint as ad
from adjoint.simulate import SimulateStep

from tests.conftest import central_fd
from tests.tapes.test_simulate import KERNELS, N, _inputs

DT = 0.05


@pytest.fixture
def k(kernel_module):
    return kernel_module(KERNELS)


@pytest.fixture
def cpu_backend(backend):
    if backend == "cuda":
        pytest.skip("a capture runs on the CPU backends")
    return backend


def _stepper(k, stiff, dt=DT, every=None, fresh=False):
    """The springs of test_simulate with a fixed ``dt`` (a capture binds scalars);
    ``every``: a launch more every that many steps; ``fresh``: forces made each step."""
    f = ad.zeros(N, requires_grad=True)

    def step(src, dst, t):
        forces = ad.zeros(N, requires_grad=True) if fresh else f
        ad.launch(k.zero, N, inputs=[], outputs=[forces])
        ad.launch(k.pull, N, inputs=[src[0], stiff], outputs=[forces])
        if every is not None and t % every == every - 1:
            ad.launch(k.zero, N, inputs=[], outputs=[forces])
        ad.launch(k.integrate, N, inputs=[src[0], src[1], forces, dt() if callable(dt) else dt],
                  outputs=[dst[0], dst[1]])
    return step


def _run(k, n, checkpoints="auto", capture=False, x0=None, plain=False, **kw):
    """(tape, x, v, stiff, total) of the loop, as ad.simulate or on a plain tape."""
    x, v, stiff = _inputs(x0)
    step = _stepper(k, stiff, **kw)
    total = ad.zeros(1, requires_grad=True)
    with ad.Tape() as tape:
        if plain:
            a, b, out = ([ad.zeros(N, requires_grad=True) for _ in range(2)] for _ in range(3))
            cur = (x, v)
            for t in range(n):
                nxt = out if t == n - 1 else (b if cur is a else a)
                step(cur, nxt, t)
                cur = nxt
            xn = out[0]
        else:
            xn, _ = ad.simulate(step, (x, v), n, checkpoints=checkpoints, capture=capture)
        ad.launch(k.energy, N, inputs=[xn], outputs=[total])
    return tape, x, v, stiff, total


def _grads(tape, x, v, stiff, total):
    tape.backward(loss=total)
    return [x.grad.numpy().copy(), v.grad.numpy().copy(), stiff.grad.numpy().copy(),
            total.numpy().copy()]


def _same(a, b):
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p, q, strict=True)


@pytest.mark.parametrize("n,checkpoints", [(1, "auto"), (2, 0), (7, 0), (7, 2), (30, 1),
                                           (30, "auto")])
def test_captured_gradient_is_bitwise_the_uncaptured(cpu_backend, k, n, checkpoints):
    plain = _grads(*_run(k, n, plain=True))
    uncaptured = _grads(*_run(k, n, checkpoints))
    tape, *rest = _run(k, n, checkpoints, capture=True)
    captured = _grads(tape, *rest)
    _same(plain, uncaptured)
    _same(uncaptured, captured)
    sim = tape.steps[0]
    assert isinstance(sim, SimulateStep)
    if n >= 7:                  # (the first run on each pair of buffers makes its capture)
        assert sim.replayed >= n // 2


def test_captured_gradient_matches_central_differences(cpu_backend, k):
    grads = _grads(*_run(k, 12, 2, capture=True))

    def loss(x0):
        *_, total = _run(k, 12, 2, capture=True, x0=x0)
        return float(total.numpy()[0])
    np.testing.assert_allclose(grads[0], central_fd(loss, np.linspace(0.0, 3.5, N)),
                               rtol=1e-6, atol=1e-9)


def test_backward_twice_and_without_a_tape(cpu_backend, k):
    tape, *rest = _run(k, 20, 3, capture=True)
    first = _grads(tape, *rest)
    tape.zero()
    _same(first, _grads(tape, *rest))
    x, v, stiff = _inputs()
    xn, vn = ad.simulate(_stepper(k, stiff), (x, v), 9, capture=True)
    x2, v2, stiff2 = _inputs()
    xp, vp = ad.simulate(_stepper(k, stiff2), (x2, v2), 9)
    _same([xn.numpy(), vn.numpy()], [xp.numpy(), vp.numpy()])


@pytest.mark.parametrize("kw,match", [
    ({"dt": (lambda c=iter(range(10**6)): 0.05 + 0.001 * next(c))},
     r"step 1 does not launch what step 0 did: argument 3 of launch #\d+ .*'integrate'.* "
     r"a scalar of another value"),
    ({"every": 3}, r"step 2 does not launch what step 0 did: it recorded 4 launches and "
                   r"copies, step 0 3"),
    ({"fresh": True}, r"step 1 does not launch .*another array \(one made in the step"),
])
def test_steps_that_launch_differently_are_refused(cpu_backend, k, kw, match):
    """In the forward, before anything is recorded; without capture the same loops run
    (and give the plain tape's gradient)."""
    with pytest.raises(ad.CaptureError, match=match):
        _run(k, 6, 2, capture=True, **kw)
    if "dt" not in kw:
        _same(_grads(*_run(k, 6, plain=True, **kw)), _grads(*_run(k, 6, 2, **kw)))


def test_python_state_changed_before_the_backward_is_refused(cpu_backend, k):
    """A scalar the step reads from Python, changed after the forward: the step run again
    launches another value than the captures would replay."""
    box = [DT]
    tape, *rest = _run(k, 8, 2, capture=True, dt=lambda: box[0])
    box[0] = 0.07
    with pytest.raises(ad.CaptureError, match=r"run again in the backward, does not launch "
                       r"what it did in the forward .*scalar of another value"):
        _grads(tape, *rest)


def test_a_checkpointed_part_of_a_step_is_refused(cpu_backend, k):
    x, v, stiff = _inputs()
    f = ad.zeros(N, requires_grad=True)

    @ad.checkpoint
    def forces(x):
        ad.launch(k.pull, N, inputs=[x, stiff], outputs=[f])

    def step(src, dst, t):
        ad.launch(k.zero, N, inputs=[], outputs=[f])
        forces(src[0])
        ad.launch(k.integrate, N, inputs=[src[0], src[1], f, DT], outputs=[dst[0], dst[1]])
    with ad.Tape(), pytest.raises(ad.CaptureError, match="CheckpointStep"):
        ad.simulate(step, (x, v), 4, capture=True)


def test_the_benchmark_runs_the_captured_mode(tmp_path):
    """benchmarks/checkpoint.py --mode captured, tiny: its backward replays steps."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    r = subprocess.run([sys.executable, "-m", "benchmarks.checkpoint", "--mode", "captured",
                        "--steps", "40", "--size", "50", "--repeat", "1",
                        "--grads", str(tmp_path / "g.npy")],
                       cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["mode"] == "captured" and result["replayed_steps"] >= 40
