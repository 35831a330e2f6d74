"""``ad.checkpoint``: a segment recorded as one step, recomputed in the backward.

Every test runs the same program twice, once on a plain tape and once with the
segment checkpointed, and asks for bit-equal gradients (and unchanged arrays
after the backward); the plain tape's gradient is checked against central finite
differences (or a hand-derived value) where the program is new here, so the
comparison is with a right answer.
"""

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import watch

from tests.conftest import central_fd

KERNELS = '''
@ad.func
def accel(x: float, k: float) -> float:
    return -k * math.sin(x)

@ad.func
def cube(x: float) -> float:
    return x * x * x

@ad.func_grad(cube)
def cube_grad(x: float, adj_ret: float) -> float:
    return 3.0 * x * x * adj_ret

@ad.kernel
def step(x: ad.array(dtype=float), v: ad.array(dtype=float), k: ad.array(dtype=float),
         dt: float, x2: ad.array(dtype=float), v2: ad.array(dtype=float)):
    i = ad.tid()
    v2[i] = v[i] + dt * accel(x[i], k[0])
    x2[i] = x[i] + dt * v2[i]

@ad.kernel
def move(a: ad.array(dtype=float), b: ad.array(dtype=float)):
    i = ad.tid()
    b[i] = a[i]

@ad.kernel
def looped(x: ad.array(dtype=float), n: int, y: ad.array(dtype=float)):
    i = ad.tid()
    s = x[i]
    for j in range(n):
        s = s * 0.5 + cube(s) * 0.1
    y[i] = s

@ad.kernel
def accumulate(x: ad.array(dtype=float), total: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(total, 0, x[i] * x[i])
'''

N = 4


@pytest.fixture
def k(kernel_module):
    return kernel_module(KERNELS)


def _same(plain, ckpt):
    """Bit for bit; on CUDA to float64 rounding: ``atomic_add(total, 0, ...)`` adds the
    threads' terms in the order they arrive, which differs between runs (in the simulator
    too: a thread per GPU thread)."""
    assert len(plain) == len(ckpt)
    for a, b in zip(plain, ckpt):
        if ad.backend_name() == "cuda":
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-13, atol=1e-15)
        else:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), strict=True)


def _state(x0=None):
    x = ad.array(np.linspace(0.1, 0.9, N) if x0 is None else x0, requires_grad=True)
    v = ad.array(np.linspace(1.0, -1.0, N), requires_grad=True)
    return x, v


def _in_place_steps(k, x, v, stiff, n):
    """``n`` steps updating ``x``, ``v`` in place (through scratch arrays)."""
    x2, v2 = ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True)
    for _ in range(n):
        ad.launch(k.step, N, inputs=[x, v, stiff, 0.1], outputs=[x2, v2])
        ad.launch(k.move, N, inputs=[x2], outputs=[x])
        ad.launch(k.move, N, inputs=[v2], outputs=[v])


def _simulate(k, wrap, x0=None, segments=3, n=4):
    x, v = _state(x0)
    stiff = ad.array([2.0], requires_grad=True)
    total = ad.zeros(1, requires_grad=True)
    seg = wrap(lambda x, v: _in_place_steps(k, x, v, stiff, n))
    with ad.Tape() as tape:
        for _ in range(segments):
            seg(x, v)
        ad.launch(k.accumulate, N, inputs=[x], outputs=[total])
    return tape, x, v, stiff, total


def _plain(fn):
    return fn


@pytest.mark.parametrize("wrap", [_plain, ad.checkpoint], ids=["plain", "checkpoint"])
def test_in_place_loop_matches_finite_differences(backend, k, wrap):
    tape, x, v, stiff, total = _simulate(k, wrap)
    tape.backward(loss=total)

    def loss(x0):
        _, _, _, _, t = _simulate(k, _plain, x0)
        return float(t.numpy()[0])
    np.testing.assert_allclose(x.grad.numpy()[:2], central_fd(lambda x0: loss(
        np.concatenate([x0, np.linspace(0.1, 0.9, N)[2:]])), np.linspace(0.1, 0.9, N)[:2]),
        rtol=1e-6, atol=1e-8)


def test_in_place_loop_is_bitwise_the_plain_tape(backend, k):
    results = []
    for wrap in (_plain, ad.checkpoint):
        tape, x, v, stiff, total = _simulate(k, wrap)
        after = [x.numpy().copy(), v.numpy().copy(), total.numpy().copy()]
        kept = tape.memory_report()["kept_arrays"]
        tape.backward(loss=total)
        # the recomputation's writes, which it undoes, make the tape keep nothing more
        assert tape.memory_report()["kept_arrays"] == kept
        # the backward recomputes segments but leaves every array as the forward did
        _same(after, [x.numpy(), v.numpy(), total.numpy()])
        results.append([x.grad.numpy().copy(), v.grad.numpy().copy(), stiff.grad.numpy().copy(),
                        total.numpy().copy()])
    _same(*results)


def test_checkpoint_keeps_only_inputs(backend, k):
    reports = []
    for wrap in (_plain, ad.checkpoint):
        tape, *_ = _simulate(k, wrap, segments=5, n=10)
        reports.append(tape.memory_report())
    plain, ckpt = reports
    assert plain["steps"] == 5 * 10 * 3 + 1 and ckpt["steps"] == 5 + 1
    # plain: every step's x, v read then overwritten is kept (3 copies a step: x2, v2 too)
    assert plain["kept_bytes"] >= 5 * 10 * 2 * N * 8
    # checkpointed: per segment the values of the arrays it writes, before it writes them
    # (x, v and its two scratch arrays), nothing kept by copy-on-write
    assert ckpt["kept_bytes"] == 0 and ckpt["checkpoint_bytes"] == 5 * 4 * N * 8
    assert ckpt["total_bytes"] < plain["total_bytes"] / 3
    assert "checkpoint #0 of" in str(ckpt)


def test_seeds_zero_and_accumulation(backend, k):
    results = []
    for wrap in (_plain, ad.checkpoint):
        x, v = _state()
        stiff = ad.array([2.0], requires_grad=True)
        seg = wrap(lambda x, v: _in_place_steps(k, x, v, stiff, 3))
        with ad.Tape() as tape:
            seg(x, v)
            seg(x, v)
        out = []
        for seed in ([1.0, 0.0, 2.0, 0.5], [0.0, -1.0, 1.0, 3.0]):
            tape.backward(grads={x: np.array(seed), v: np.ones(N)})
            out.append(stiff.grad.numpy().copy())
            tape.backward(grads={x: np.array(seed), v: np.ones(N)})     # accumulates
            out += [x.grad.numpy().copy(), v.grad.numpy().copy(), stiff.grad.numpy().copy()]
            tape.zero()
            out.append(stiff.grad.numpy().copy())
        results.append(out)
    _same(*results)
    first, second = results[1][0], results[1][3]
    assert first[0] != 0.0 and np.isclose(second[0], 2 * first[0], rtol=1e-12)  # accumulates
    np.testing.assert_array_equal(results[1][4], 0.0)  # zero() cleared the parameter


def test_overwrite_of_an_input_after_the_segment_is_kept(backend, k):
    """The segment reads ``stiff``, which is overwritten after it: the tape keeps a copy
    (plain tape: per launch; checkpointed: once) and the recomputation uses it."""
    results, kept = [], []
    for wrap in (_plain, ad.checkpoint):
        x, v = _state()
        stiff = ad.array([2.0], requires_grad=True)
        other = ad.array([5.0], requires_grad=True)
        total = ad.zeros(1, requires_grad=True)
        seg = wrap(lambda x, v: _in_place_steps(k, x, v, stiff, 3))
        with ad.Tape() as tape:
            seg(x, v)
            stiff.assign(other)                 # stiffness 5 from here on
            seg(x, v)
            ad.launch(k.accumulate, N, inputs=[x], outputs=[total])
        tape.backward(loss=total)
        np.testing.assert_array_equal(stiff.numpy(), [5.0])
        results.append([x.grad.numpy().copy(), v.grad.numpy().copy(), other.grad.numpy().copy()])
        kept.append(tape.memory_report())
    _same(*results)
    assert any("checkpoint #0" in c.reader for c in kept[1]["kept"])


def test_error_mode_refuses_a_segment_overwriting_what_the_tape_read(backend, k):
    x, v = _state()
    y = ad.zeros(N, requires_grad=True)
    seg = ad.checkpoint(lambda: ad.launch(k.move, N, inputs=[v], outputs=[x]))
    with ad.Tape(overwrite="error"):
        ad.launch(k.move, N, inputs=[x], outputs=[y])
        with pytest.raises(ad.TapeError, match="launch #0 of kernel 'move'"):
            seg()
    np.testing.assert_array_equal(x.numpy(), np.linspace(0.1, 0.9, N))


def test_nested_segments_loops_and_custom_rules(backend, k):
    results = []
    for wrap in (_plain, ad.checkpoint):
        x = ad.array(np.linspace(-0.5, 0.8, N), requires_grad=True)
        y, z = ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True)
        total = ad.zeros(1, requires_grad=True)
        inner = wrap(lambda a, b: ad.launch(k.looped, N, inputs=[a, 3], outputs=[b]))

        def outer(x, y, z):
            inner(x, y)
            inner(y, z)
            ad.launch(k.move, N, inputs=[z], outputs=[y])     # y overwritten after use
            inner(y, z)
        with ad.Tape() as tape:
            wrap(outer)(x, y, z)
            ad.launch(k.accumulate, N, inputs=[z], outputs=[total])
        tape.backward(loss=total)
        results.append([x.grad.numpy().copy(), total.numpy().copy()])

    def f(s):                                   # the program in numpy, by hand
        for _ in range(3):
            for _ in range(3):
                s = s * 0.5 + s ** 3 * 0.1
        return np.sum(s * s)
    x0 = np.linspace(-0.5, 0.8, N)
    np.testing.assert_allclose(results[0][0], central_fd(f, x0), rtol=1e-6)
    _same(*results)


def test_new_arrays_returned_by_the_segment_get_their_gradient(backend, k):
    results = []
    for wrap in (_plain, ad.checkpoint):
        x = ad.array(np.linspace(-0.5, 0.8, N), requires_grad=True)

        def twice(a):
            b = ad.zeros(N)
            c = ad.zeros(N)
            ad.launch(k.looped, N, inputs=[a, 2], outputs=[b])
            ad.launch(k.looped, N, inputs=[b, 2], outputs=[c])
            return b, c
        with ad.Tape() as tape:
            b, c = wrap(twice)(x)
        tape.backward(grads={b: np.ones(N), c: np.full(N, 2.0)})
        results.append([x.grad.numpy().copy(), b.numpy().copy(), c.numpy().copy()])
    _same(*results)


def test_reset_forgets_segments_and_stops_watching(backend, k, no_gc):
    before = watch.watched()
    tape, x, v, stiff, total = _simulate(k, ad.checkpoint)
    assert watch.watched() > before
    tape.reset()                            # (what it drops is freed at once: no cycle)
    assert tape.steps == [] and watch.watched() == before
    np.testing.assert_array_equal(stiff.grad.numpy(), 0.0)


def test_without_a_tape_the_function_just_runs(k):
    x, v = _state()
    stiff = ad.array([2.0])
    ad.checkpoint(lambda: _in_place_steps(k, x, v, stiff, 2))()
    assert not np.array_equal(x.numpy(), np.linspace(0.1, 0.9, N))


def test_budget_refuses_with_the_fix_and_checkpoint_fits(backend, k):
    x, v = _state()
    stiff = ad.array([2.0], requires_grad=True)
    with pytest.raises(ad.TapeError, match=r"max_bytes=2000.*ad\.checkpoint"):
        with ad.Tape(max_bytes=2000):
            _in_place_steps(k, x, v, stiff, 40)
    x, v = _state()
    seg = ad.checkpoint(lambda: _in_place_steps(k, x, v, stiff, 10))
    with ad.Tape(max_bytes=2000) as tape:
        for _ in range(4):
            seg()
    assert tape.memory_report()["total_bytes"] <= 2000


def test_ping_pong_segments_keep_one_state_each(backend, k):
    """Segments alternate between two buffer pairs: each reads what the previous wrote,
    and the next overwrites what it read (the tape keeps that copy, once)."""
    results = []
    for wrap in (_plain, ad.checkpoint):
        x, v = _state()
        stiff = ad.array([1.5], requires_grad=True)
        a = (ad.zeros(N, requires_grad=True), ad.zeros(N, requires_grad=True))
        total = ad.zeros(1, requires_grad=True)

        @wrap
        def seg(src, dst):
            ad.launch(k.step, N, inputs=[src[0], src[1], stiff, 0.1], outputs=[dst[0], dst[1]])
            ad.launch(k.step, N, inputs=[dst[0], dst[1], stiff, 0.1], outputs=[src[0], src[1]])
            ad.launch(k.step, N, inputs=[src[0], src[1], stiff, 0.1], outputs=[dst[0], dst[1]])
        with ad.Tape() as tape:
            cur, nxt = (x, v), a
            for _ in range(6):
                seg(cur, nxt)
                cur, nxt = nxt, cur
            ad.launch(k.accumulate, N, inputs=[cur[0]], outputs=[total])
        report = tape.memory_report()
        tape.backward(loss=total)
        results.append([x.grad.numpy().copy(), v.grad.numpy().copy(), stiff.grad.numpy().copy(),
                        total.numpy().copy()])
    _same(*results)
    # each segment: entry values of src and dst (it writes both), 4 arrays of N floats
    assert report["checkpoint_bytes"] == 6 * 4 * N * 8 and report["steps"] == 7


def test_budget_refuses_a_copy_before_the_overwrite(backend, k):
    """The tape holds x, y (64 bytes); keeping a copy of x when it is overwritten would
    make 96 > 80: the overwriting launch is refused before it writes."""
    x = ad.array([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    y = ad.zeros(N, requires_grad=True)
    with ad.Tape(max_bytes=80) as tape:
        ad.launch(k.move, N, inputs=[x], outputs=[y])
        assert tape.memory_report()["total_bytes"] == 64
        with pytest.raises(ad.TapeError, match=r"keeping a copy of an array launch #1 of "
                                               r"kernel 'move'.*96 bytes.*max_bytes=80"):
            ad.launch(k.move, N, inputs=[y], outputs=[x])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0, 4.0])
