"""Tape capture (issue 39): a tape's recorded launches replayed as one generated function
each way (runtime/capture.py). A replay equals the tape bit for bit (values and
gradients), on the python and numba backends; its gradient agrees with central
differences in float64; what it binds is checked on every replay and a change is a
``CaptureError`` naming it, never a stale result."""
import itertools
import re
import textwrap

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import watch

from tests.conftest import central_fd

SRC = '''
    @ad.func
    def rate(x: float) -> float:
        return x * 0.1

    @ad.kernel
    def diffuse(u: ad.array(dtype=float, ndim=2), alpha: float,
                out: ad.array(dtype=float, ndim=2)):
        i, j = ad.tid()
        n = u.shape[0]
        m = u.shape[1]
        c = u[i, j]
        lap = u[(i + 1) % n, j] + u[(i + n - 1) % n, j] + u[i, (j + 1) % m] + \\
            u[i, (j + m - 1) % m] - 4.0 * c
        out[i, j] = c + rate(alpha) * lap * ad.sin(c)

    @ad.kernel
    def heat(u: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
        i, j = ad.tid()
        ip = i + 1
        if ip == u.shape[0]:
            ip = 0
        jm = j - 1
        if jm < 0:
            jm = u.shape[1] - 1
        c = u[i, j]
        out[i, j] = c + 0.1 * (u[ip, j] + u[i, jm] - 2.0 * c) * c

    @ad.kernel
    def power(n: int, u: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
        i, j = ad.tid()
        p = 1.0
        for k in range(n):
            p = p * u[i, j]
        out[i, j] = p

    @ad.kernel
    def scale(u: ad.array(dtype=float, ndim=2), s: float, out: ad.array(dtype=float, ndim=2)):
        i, j = ad.tid()
        out[i, j] = u[i, j] * s

    @ad.kernel
    def total(u: ad.array(dtype=float, ndim=2), loss: ad.array(dtype=float)):
        i, j = ad.tid()
        ad.atomic_add(loss, 0, u[i, j] * u[i, j])

    @ad.kernel
    def dot(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        ad.atomic_add(out, 0, x[i] * y[i])

    @ad.kernel
    def pick(x: ad.array(dtype=float), idx: ad.array(dtype=int), out: ad.array(dtype=float)):
        i = ad.tid()
        out[i] = x[idx[i]] * 2.0
'''

N, STEPS = 6, 5
_cells = itertools.count()


def _setup(rng, n=N, steps=STEPS):
    u0 = ad.array(rng.random((n, n)) + 0.5, requires_grad=True)
    us = [u0] + [ad.zeros((n, n)) for _ in range(steps + 2)]
    return us, ad.zeros(1, requires_grad=True)


def _record(m, us, loss, steps=STEPS):
    """A time loop, a dynamic loop (its values stored for the backward), a copy, a
    launch overwriting an array a launch read (the tape keeps its values), a loss."""
    for k in range(steps):
        ad.launch(m.diffuse, us[k].shape, inputs=[us[k], 0.5], outputs=[us[k + 1]])
    ad.launch(m.power, us[0].shape, inputs=[3, us[steps]], outputs=[us[steps + 1]])
    ad.copy(us[steps + 2], us[steps + 1])
    ad.launch(m.scale, us[0].shape, inputs=[us[steps + 2], 2.0], outputs=[us[1]])
    ad.launch(m.total, us[0].shape, inputs=[us[1]], outputs=[loss])
    ad.launch(m.total, us[0].shape, inputs=[us[steps + 1]], outputs=[loss])


def _state(us, loss):
    return [u.numpy().copy() for u in us] + [loss.numpy().copy(), us[0].grad.numpy().copy()]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()


@pytest.fixture
def cpu_backend(request, backend):
    if backend == "cuda":
        pytest.skip("a capture runs on the CPU backends (see test_cuda_is_refused)")
    return backend


def _taped(m, x0):
    """The arrays, loss and gradient a plain tape gives from the input ``x0``."""
    us, loss = _setup(np.random.default_rng(0))
    us[0].numpy()[...] = x0
    with ad.Tape() as tape:
        _record(m, us, loss)
    tape.backward(loss)
    return _state(us, loss)


def test_replay_equals_the_tape_bit_for_bit(cpu_backend, kernel_module):
    m = kernel_module(SRC)
    rng = np.random.default_rng(1)
    us, loss = _setup(rng)
    tape = ad.Tape()
    with tape:
        _record(m, us, loss)
    cap = tape.capture()
    tape.release()
    for x0 in (us[0].numpy().copy(), rng.random((N, N)) + 0.5, us[0].numpy().copy()):
        us[0].numpy()[...] = x0
        for u in us[1:]:
            u.zero_()
        loss.zero_()
        cap.zero()
        cap.forward()
        cap.backward(loss)
        _same(_state(us, loss), _taped(m, x0))
    assert cap.not_compiled is None
    # the time loop is a loop in the source, in both directions (launch #1 reads values
    # launch #7 overwrites: the tape keeps them, and so does the capture)
    assert cap.source.count("    for k in range(3):") == 2
    assert cap.source.count("rt_keep(kept[0], a[1])") == 1
    assert str(cap) == cap.source


def test_gradient_matches_central_differences(cpu_backend, kernel_module):
    """The captured forward reads the inputs' current values: central differences of
    replays against the captured backward."""
    m = kernel_module(SRC)
    rng = np.random.default_rng(2)
    us, loss = _setup(rng, n=4, steps=3)
    cap = ad.capture(_record, m, us, loss, steps=3)
    cap.zero()
    cap.backward(loss)
    grad = us[0].grad.numpy().copy()
    x0 = us[0].numpy().copy()

    def f(x):
        us[0].numpy()[...] = x
        loss.zero_()
        cap.forward()
        return float(loss.numpy()[0])
    np.testing.assert_allclose(grad, central_fd(f, x0), rtol=1e-6, atol=1e-8)


def test_rebind_runs_on_another_array(cpu_backend, kernel_module):
    m = kernel_module(SRC)
    rng = np.random.default_rng(3)
    us, loss = _setup(rng)
    cap = ad.capture(_record, m, us, loss)
    other = ad.array(rng.random((N, N)) + 0.5)
    cap.rebind({us[0]: other})
    assert other.grad is not None           # given one: the old array had one
    loss.zero_()
    cap.forward()
    cap.backward(loss)
    # the same on a plain tape
    us2, loss2 = _setup(rng)
    us2[0] = ad.array(other.numpy(), requires_grad=True)
    with ad.Tape() as tape:
        _record(m, us2, loss2)
    tape.backward(loss2)
    _same([loss.numpy(), other.grad.numpy()], [loss2.numpy(), us2[0].grad.numpy()])
    with pytest.raises(ad.CaptureError, match="shape"):
        cap.rebind({other: ad.zeros((N + 1, N))})
    with pytest.raises(ad.CaptureError, match="does not use"):
        cap.rebind({us[0]: ad.zeros((N, N))})


def test_redefined_func_is_refused(cpu_backend, kernel_module, tmp_path):
    m = kernel_module(SRC)
    us, loss = _setup(np.random.default_rng(4))
    cap = ad.capture(_record, m, us, loss)
    cap.forward()
    path = tmp_path / f"cell_{next(_cells)}.py"
    path.write_text(textwrap.dedent('''
        @ad.func
        def rate(x: float) -> float:
            return x * 0.2
    '''))
    exec(compile(path.read_text(), str(path), "exec"), vars(m))   # noqa: S102 (a cell)
    with pytest.raises(ad.CaptureError, match="kernel 'diffuse'.*other code now.*redefined"):
        cap.forward()
    with pytest.raises(ad.CaptureError, match="redefined"):
        cap.backward(loss)


def test_another_backend_or_optimization_is_refused(kernel_module):
    """The kernels' code is bound: a replay under another backend, or with the
    optimization passes off, would run other code than the capture's."""
    from adjoint import passes
    m = kernel_module(SRC)
    us, loss = _setup(np.random.default_rng(7))
    with ad.backend_scope("python"):
        cap = ad.capture(_record, m, us, loss)
        cap.forward()
        with passes.optimizing(False), pytest.raises(ad.CaptureError, match="optimization"):
            cap.forward()
    with ad.backend_scope("numba"), pytest.raises(ad.CaptureError, match="backend"):
        cap.forward()


def test_changes_to_what_it_binds_are_refused(cpu_backend, kernel_module):
    m = kernel_module(SRC)
    us, loss = _setup(np.random.default_rng(5))
    cap = ad.capture(_record, m, us, loss)
    us[1].grad = None                       # an intermediate had a gradient
    with pytest.raises(ad.CaptureError, match="has none now"):
        cap.backward(loss)
    us[1].requires_grad = True
    old, us[0]._data = us[0]._data, np.zeros((N, N + 1))    # a buffer of another shape
    with pytest.raises(ad.CaptureError, match=r"a\[0\].*shape \(6, 7\)"):
        cap.forward()
    us[0]._data = old
    free = ad.zeros(2)                       # no captured launch uses it: seeded as a tape does
    cap.backward(grads={free: 3.0})
    np.testing.assert_array_equal(free.grad.numpy(), [3.0, 3.0])
    with pytest.raises(ad.CaptureError, match="not list"):
        cap.backward(loss=[1.0])


def test_fault_in_a_replay_names_the_launch(cpu_backend, kernel_module):
    m = kernel_module(SRC)
    x = ad.array(np.arange(4.0), requires_grad=True)
    idx = ad.array(np.array([0, 1, 2, 3]))
    out = ad.zeros(4, requires_grad=True)
    cap = ad.capture(lambda: ad.launch(m.pick, 4, inputs=[x, idx], outputs=[out]))
    idx.numpy()[2] = 7
    with pytest.raises(ad.BoundsError, match=r"launch #0 of kernel 'pick'.*replayed by a "
                       r"capture.*index 7"):
        cap.forward()
    idx.numpy()[2] = 1
    cap.forward()
    np.testing.assert_array_equal(out.numpy(), [0.0, 2.0, 2.0, 6.0])
    cap.backward(grads={out: np.ones(4)})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 0.0, 2.0])
    # an array a captured launch read with no gradient: a seed of it would lose its part
    y = ad.array(np.arange(4.0))
    cap2 = ad.capture(lambda: ad.launch(m.pick, 4, inputs=[y, idx], outputs=[out]))
    with pytest.raises(ad.CaptureError, match="with no gradient"):
        cap2.backward(grads={y: np.ones(4)})


def test_what_cannot_be_captured(cpu_backend):
    with pytest.raises(ad.CaptureError, match="recorded no launch"):
        ad.capture(lambda: None)
    tape = ad.Tape()
    with tape:
        tape.record_func(lambda: None)
    with pytest.raises(ad.CaptureError, match="record_func"):
        tape.capture()


def test_one_array_for_two_parameters(cpu_backend, kernel_module):
    """Its gradient takes both parameters' parts (the second summed apart, then added)."""
    m = kernel_module(SRC)
    x = ad.array(np.arange(1.0, 5.0), requires_grad=True)
    out = ad.zeros(1, requires_grad=True)
    cap = ad.capture(lambda: ad.launch(m.dot, 4, inputs=[x, x], outputs=[out]))
    cap.backward(out)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * np.arange(1.0, 5.0))
    assert "rt_add(g[0], scratch[0])" in cap.source


def test_cuda_is_refused(backend, kernel_module):
    if backend != "cuda":
        pytest.skip("the CUDA refusal")
    m = kernel_module(SRC)
    x = ad.array(np.arange(4.0), requires_grad=True)
    idx = ad.array(np.array([0, 1, 2, 3]))
    out = ad.zeros(4, requires_grad=True)
    with pytest.raises(ad.CaptureError, match="CPU backends"):
        ad.capture(lambda: ad.launch(m.pick, 4, inputs=[x, idx], outputs=[out]))


def test_a_capture_of_the_same_steps_is_not_compiled_again(cpu_backend, kernel_module):
    """A tape recorded again each iteration, captured again: same source and argument
    types, same compiled functions (numba); its results are the new arrays' own."""
    m = kernel_module(SRC)
    rng = np.random.default_rng(6)
    caps, states = [], []
    for _ in range(2):
        us, loss = _setup(rng)
        caps.append(ad.capture(_record, m, us, loss))
        caps[-1].zero()
        caps[-1].backward(loss)
        states.append((us, loss))
    if cpu_backend == "numba":
        assert caps[0]._forward is caps[1]._forward
        assert caps[0]._backward is caps[1]._backward
    for cap, (us, loss) in zip(caps, states):
        x0 = us[0].numpy().copy()
        cap.zero()
        loss.zero_()
        cap.forward()
        cap.backward(loss)
        _same(_state(us, loss), _taped(m, x0))


def test_adjoint_capture_prints_the_source(tmp_path, capsys):
    from adjoint import cli
    path = tmp_path / "capture_cli.py"
    path.write_text(textwrap.dedent('''
        import numpy as np
        import adjoint as ad

        @ad.kernel
        def step(u: ad.array(dtype=float), rate: float, out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = u[i] * rate

        def run():
            u = [ad.array(np.ones(8), requires_grad=True)] + [ad.zeros(8) for _ in range(4)]
            for k in range(4):
                ad.launch(step, 8, inputs=[u[k], 0.5], outputs=[u[k + 1]])
    '''))
    with ad.backend_scope("python"):
        assert cli.main(["capture", f"{path}:run"]) == 0
        out = capsys.readouterr().out
        assert "def captured_forward(" in out and "def captured_backward(" in out
        # (the serial variant, or the grid where race checking runs every launch's plan)
        assert re.search(r"    for k in range\(4\):\n        step_forward(_small)?\(8, a\[k\], "
                         r"s\[0\], a\[k \+ 1\]\)", out)
        assert cli.main(["capture", f"{path}:step"]) == 2
        assert "no plain Python function named 'step'" in capsys.readouterr().err


@pytest.mark.parametrize("g", [1.0, 2.5, np.inf])
def test_a_loss_with_its_vjp_at_once_replays_as_the_tape(cpu_backend, kernel_module, g):
    """A loss's launch the tape ran with its VJP at once (runtime/eager.py, numba): the
    replay's forward computes that VJP too and its backward adds ``g * J``, as the tape's
    does, bit for bit for any finite seed ``g`` (and replays the backward for an infinite
    one, as the tape does)."""
    m = kernel_module(SRC)
    rng = np.random.default_rng(5)
    x = ad.array(rng.random(40) - 0.5, requires_grad=True)
    y = ad.array(rng.random(40) + 0.5, requires_grad=True)
    out = ad.zeros(1, requires_grad=True)

    def taped():
        out.zero_()
        x.grad.zero_()
        y.grad.zero_()
        with ad.Tape() as tape:
            ad.launch(m.dot, 40, inputs=[x, y], outputs=[out])
        tape.backward(grads={out: np.array([g])})
        return [out.numpy().copy(), x.grad.numpy().copy(), y.grad.numpy().copy()], tape

    want, tape = taped()
    eager = tape.steps[0].eager is not None
    assert eager == (cpu_backend == "numba")
    cap = tape.capture()
    assert ("rt_eager_add" in cap.source) == eager
    for _ in range(2):
        out.zero_()
        cap.zero()
        cap.forward()
        cap.backward(grads={out: np.array([g])})
        _same([out.numpy(), x.grad.numpy(), y.grad.numpy()], want)
    np.testing.assert_allclose(x.grad.numpy(), g * y.numpy(), rtol=1e-15)


def _with_gradients():
    us, loss = _setup(np.random.default_rng(0))
    for u in us[1:]:
        u.requires_grad = True
    return us, loss


def _heat_record(m, us, loss):
    for k in range(STEPS):
        ad.launch(m.heat, us[k].shape, inputs=[us[k]], outputs=[us[k + 1]])
    ad.launch(m.power, us[0].shape, inputs=[3, us[STEPS]], outputs=[us[STEPS + 1]])
    ad.launch(m.scale, us[0].shape, inputs=[us[STEPS + 1], 2.0], outputs=[us[1]])
    ad.launch(m.total, us[0].shape, inputs=[us[1]], outputs=[loss])
    ad.launch(m.total, us[0].shape, inputs=[us[STEPS]], outputs=[loss])
    ad.launch(m.scale, us[0].shape, inputs=[us[2], 0.5], outputs=[us[0]])


def test_the_gradients_a_replay_leaves_zero_are_noted_clean(cpu_backend, kernel_module):
    """The replay notes clean (runtime/watch.py) the gradients its backward leaves all zero,
    as the tape does (``steps.mark_zeroed``), so that ``zero()`` before the next replay
    writes nothing; where a gathered backward's last pass only clears a gradient (the
    periodic ``heat``), the replay runs the backward without it and fills the gradient
    with zeros after (the tape owes that zero). Every array has a gradient here: each
    equals the tape's bit for bit after every replay, and each noted clean holds only
    zeros -- ``us[1]``'s is left zero by the backward of ``scale``, then added into by
    ``heat``'s and left zero again; ``us[0]``'s is left zero by the last launch's backward,
    then added into (not clean)."""
    m = kernel_module(SRC)
    rng = np.random.default_rng(7)
    arrays = _with_gradients

    def record(us, loss):
        _heat_record(m, us, loss)

    def state(us, loss):
        return [u.numpy().copy() for u in us] + [u.grad.numpy().copy() for u in us] + \
            [loss.numpy().copy(), loss.grad.numpy().copy()]

    us, loss = arrays()
    with ad.Tape() as tape:
        record(us, loss)
    cap = tape.capture()
    tape.release()
    assert "heat_backward_norest" in cap.source and "rt_zero(g[" in cap.source
    for x0 in (us[0].numpy().copy(), rng.random((N, N)) + 0.5, rng.random((N, N)) + 0.5):
        us[0].numpy()[...] = x0
        loss.zero_()
        cap.zero()
        cap.forward()
        cap.backward(loss)
        clean = [u for u in us if watch.is_clean(u.grad._buf)]
        assert len(clean) >= STEPS - 1, len(clean)      # (the time loop's outputs at least)
        got = state(us, loss)
        for u in clean:
            assert not u.grad.numpy().any()
        ref, ref_loss = arrays()
        ref[0].numpy()[...] = x0
        with ad.Tape() as t:
            record(ref, ref_loss)
        t.backward(ref_loss)
        _same(got, state(ref, ref_loss))


def test_another_tape_keeps_what_it_read_before_a_replay_overwrites_it(cpu_backend,
                                                                        kernel_module):
    """A replay tells the tapes watching what it writes (runtime/watch.py): a tape that read
    an array the capture's forward overwrites keeps the values it read, and its backward
    gives the gradient of those."""
    m = kernel_module(SRC)
    us, loss = _setup(np.random.default_rng(3))
    for u in us[1:]:
        u.requires_grad = True
    with ad.Tape() as tape:
        _record(m, us, loss)
    cap = tape.capture()
    tape.release()
    cap.forward()
    other = ad.zeros(1, requires_grad=True)
    with ad.Tape() as reader:
        ad.launch(m.total, us[0].shape, inputs=[us[STEPS]], outputs=[other])
    read = us[STEPS].numpy().copy()
    us[0].numpy()[...] = np.random.default_rng(4).random((N, N)) + 0.5
    cap.forward()
    assert not np.array_equal(us[STEPS].numpy(), read)
    us[STEPS].grad.zero_()
    reader.backward(other)
    np.testing.assert_array_equal(us[STEPS].grad.numpy(), 2.0 * read)


def test_a_failed_backward_leaves_no_gradient_noted_clean(cpu_backend, kernel_module):
    """A gradient clean before a replay's backward that the backward leaves zero again is
    not written off as dirty first (runtime/capture.py); if the backward fails midway,
    it is forgotten as clean all the same (it may hold anything)."""
    m = kernel_module(SRC)
    us, loss = _with_gradients()
    with ad.Tape() as tape:
        _heat_record(m, us, loss)
    cap = tape.capture()
    tape.release()
    cap.forward()
    cap.backward(loss)
    assert any(watch.is_clean(u.grad._buf) for u in us[:STEPS + 2])
    compiled = cap._backward

    def failing(*args):
        compiled(*args)
        raise FloatingPointError("stopped midway")
    cap._backward = failing
    loss.zero_()
    cap.forward()
    with pytest.raises(FloatingPointError, match="midway"):
        cap.backward(loss)
    assert not any(watch.is_clean(u.grad._buf) for u in us[:STEPS + 2])  # (all it uses)
