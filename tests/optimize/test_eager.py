"""A tape's launch with a one-element loss runs its forward and VJP at once
(optimize/eager.py, runtime/eager.py).

Recorded on a tape on the CPU (numba), a launch of a kernel that adds into a one-element
output, reads no array it writes and has no loop to reverse runs ``forward_vjp``: the
forward, then the reverse pass with the loss's adjoint read as 1, into buffers the step
keeps. The tape's backward adds ``g * J`` into the gradients. A wrong eligibility rule,
a buffer left with garbage or a seed scaled wrongly is a wrong gradient: every case
checks the gradients against float64 central differences, and against the replay
(``config.eager_vjp`` off), bit for bit where the seed is 1.
"""
import numpy as np
import pytest
from tests.conftest import central_fd

import adjoint as ad
from adjoint.errors import AdjointError, NonFiniteError
from adjoint.runtime import config, owed

KERNELS = '''
@ad.kernel
def springs(a: ad.array(dtype=ad.int32), b: ad.array(dtype=ad.int32),
            rest: ad.array(dtype=float), pos: ad.array(dtype=float, ndim=2),
            energy: ad.array(dtype=float)):
    s = ad.tid()
    i = a[s]
    j = b[s]
    dx = pos[i, 0] - pos[j, 0]
    dy = pos[i, 1] - pos[j, 1]
    dz = pos[i, 2] - pos[j, 2]
    d = ad.sqrt(dx * dx + dy * dy + dz * dz) - rest[s]
    ad.atomic_add(energy, 0, 0.5 * d * d)


@ad.kernel
def ratio(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    ad.atomic_add(loss, 0, v * math.sin(v) / (1.0 + v * v))


@ad.kernel
def ratio32(x: ad.array(dtype=ad.float32), loss: ad.array(dtype=ad.float32)):
    i = ad.tid()
    v = x[i]
    ad.atomic_add(loss, 0, v * ad.sin(v) / (1.0 + v * v))


@ad.kernel
def double(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = 2.0 * x[i] + math.sin(x[i])


@ad.kernel
def pairs(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(out, i % 2, x[i] * x[i])


@ad.kernel
def stored_too(x: ad.array(dtype=float), y: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i] * x[i]
    ad.atomic_add(loss, 0, 3.0 * x[i])


@ad.kernel
def reads_written(x: ad.array(dtype=float), c: ad.array(dtype=ad.int32),
                  loss: ad.array(dtype=float)):
    i = ad.tid()
    c[i] = 2 * i
    k = c[i]
    ad.atomic_add(loss, 0, x[i] * float(k))


@ad.kernel
def looped(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    for k in range(3):
        v = v * x[i] + 0.5
    ad.atomic_add(loss, 0, v)


@ad.kernel(enable_backward=False)
def no_backward(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(loss, 0, x[i] * x[i])


@ad.func
def soft(v: float) -> float:
    if v > 0.0:
        return v * v
    return 0.1 * v


@ad.kernel
def branchy(x: ad.array(dtype=float), w: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    v = soft(x[i]) * w[i]
    if i % 3 == 0:
        v = v * 2.0 + ad.min(x[i], w[i])
    ad.atomic_sub(loss, 0, v)


@ad.kernel
def root(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(loss, 0, ad.sqrt(x[i]))
'''

RNG = np.random.default_rng(11)
N_P, N_S = 12, 30
POS = RNG.uniform(0.0, 3.0, (N_P, 3))
A_IDX = RNG.integers(0, N_P - 1, N_S).astype(np.int32)      # particle N_P - 1: no spring
B_IDX = ((A_IDX + RNG.integers(1, 5, N_S)) % (N_P - 1)).astype(np.int32)
REST = RNG.uniform(0.5, 1.5, N_S)
X = RNG.uniform(-1.5, 1.5, 16)


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(KERNELS)


@pytest.fixture
def replay(monkeypatch):
    """Run a function with ``config.eager_vjp`` off: every backward replays its launch."""
    def run(fn, *args):
        with monkeypatch.context() as m:
            m.setattr(config, "eager_vjp", False)
            return fn(*args)
    return run


def springs_energy(kernels, pos, rest):
    e = ad.zeros(1, dtype=float)
    ad.launch(kernels.springs, dim=N_S,
              inputs=[ad.array(A_IDX), ad.array(B_IDX), ad.array(rest), ad.array(pos)],
              outputs=[e])
    return float(e.numpy()[0])


def springs_grads(kernels, seed, twice=False, owe=False):
    """(pos.grad, rest.grad, the step's eager buffers) after a taped launch and its backward
    seeded with ``seed`` (twice: two backwards; owe: the gradients' zeros owed first)."""
    pos = ad.array(POS, requires_grad=True)
    rest = ad.array(REST, requires_grad=True)
    e = ad.zeros(1, dtype=float, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.springs, dim=N_S, inputs=[ad.array(A_IDX), ad.array(B_IDX), rest, pos],
                  outputs=[e])
    eager = tape.steps[0].eager
    if owe:
        for g in (pos.grad, rest.grad):
            g.fill_(1.0)
            g.zero_()
    for _ in range(2 if twice else 1):
        tape.backward(grads={e: np.array([seed])})
    return pos.grad.numpy().copy(), rest.grad.numpy().copy(), eager


def test_which_kernels_run_their_vjp_at_once(kernels):
    """Eligible: a one-element output only added into, no array both read and written, no
    loop to reverse. ``pairs`` is eligible by its code (its output's size is the runtime's
    to check); ``stored_too`` stores ``y`` (whose adjoint is read and cleared),
    ``reads_written`` reads an array it writes, ``looped`` reverses a loop, ``no_backward``
    has none."""
    table = {"springs": "energy", "ratio": "loss", "ratio32": "loss", "pairs": "out",
             "root": "loss", "branchy": "loss", "double": None, "no_backward": None, "stored_too": None, "reads_written": None,
             "looped": None}
    got = {k: getattr(kernels, k).spec.vjp_seeded for k in table}
    assert got == table
    assert kernels.springs.spec.forward_vjp is not None
    assert kernels.looped.spec.forward_vjp is None
    # the rest gradient is stored once per thread: its buffer needs no zeros where covered
    assert kernels.springs.spec.vjp_stored == ("rest",)


@pytest.mark.parametrize("seed", [1.0, 0.75, -2.5])
def test_springs_gradient(kernels, backend, replay, seed):
    """Against central differences of ``seed * energy``, and the replay: bit for bit for a
    seed of 1 (the same products, ``g * J`` with ``g == 1`` adds nothing)."""
    gpos, grest, eager = springs_grads(kernels, seed)
    assert (eager is not None) == (backend == "numba")
    fd_pos = central_fd(lambda p: seed * springs_energy(kernels, p, REST), POS)
    fd_rest = central_fd(lambda r: seed * springs_energy(kernels, POS, r), REST)
    np.testing.assert_allclose(gpos, fd_pos, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grest, fd_rest, rtol=1e-6, atol=1e-7)
    assert np.all(gpos[N_P - 1] == 0.0)         # no spring touches it
    rpos, rrest, reager = replay(springs_grads, kernels, seed)
    assert reager is None
    if seed == 1.0:
        np.testing.assert_array_equal(gpos, rpos)
        np.testing.assert_array_equal(grest, rrest)
    else:
        np.testing.assert_allclose(gpos, rpos, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(grest, rrest, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("owe", [False, True])
def test_two_backwards_add_twice(kernels, replay, monkeypatch, owe):
    """The first backward of a gradient that holds zeros (clean, or owing its zero) takes
    the step's buffer as its memory; the second then replays. Either way: twice the
    gradient, as the replay."""
    monkeypatch.setattr(owed, "DEFER_BYTES", 0)
    gpos, grest, eager = springs_grads(kernels, 1.0, twice=True, owe=owe)
    rpos, rrest, _ = replay(springs_grads, kernels, 1.0, True, owe)
    np.testing.assert_allclose(gpos, rpos, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(grest, rrest, rtol=1e-14, atol=1e-15)
    once, _, _ = springs_grads(kernels, 1.0)
    np.testing.assert_allclose(gpos, 2 * once, rtol=1e-14, atol=1e-15)
    assert eager[1] is None         # (rest, pos, energy): pos's buffer given to pos.grad


@pytest.mark.parametrize("seed", [np.inf, -np.inf, np.nan])
def test_a_non_finite_seed_replays(kernels, replay, seed):
    """``inf * J`` would be nan where no thread added (0 * inf): such a seed replays,
    and the gradient is the replay's, nans and infs in the same places."""
    gpos, grest, eager = springs_grads(kernels, seed)
    assert eager is not None
    rpos, rrest, _ = replay(springs_grads, kernels, seed)
    np.testing.assert_array_equal(gpos, rpos)
    np.testing.assert_array_equal(grest, rrest)
    assert np.all(gpos[N_P - 1] == 0.0)


def test_the_forward_value_is_the_forwards(kernels):
    """On a tape or not, the launch writes the same loss, bit for bit."""
    x = RNG.uniform(-2.0, 2.0, 5000)
    plain = ad.zeros(1, dtype=float)
    ad.launch(kernels.ratio, dim=x.size, inputs=[ad.array(x)], outputs=[plain])
    taped = ad.zeros(1, dtype=float, requires_grad=True)
    xa = ad.array(x, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.ratio, dim=x.size, inputs=[xa], outputs=[taped])
    assert tape.steps[0].eager is not None
    assert taped.numpy()[0] == plain.numpy()[0]


def ratio_loss(kernels, x, dim=None, kernel="ratio", dtype=float):
    loss = ad.zeros(1, dtype=dtype)
    ad.launch(getattr(kernels, kernel), dim=dim or x.size, inputs=[ad.array(x.astype(dtype))],
              outputs=[loss])
    return float(loss.numpy()[0])


@pytest.mark.parametrize("dim", [16, 11])
def test_a_smaller_grid_leaves_the_rest_zero(kernels, backend, dim):
    """``adj_x`` is stored once per thread: with the grid the array's shape its buffer is
    not zeroed first; with a smaller grid it must be (the elements no thread stores)."""
    x = ad.array(X, requires_grad=True)
    loss = ad.zeros(1, dtype=float, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.ratio, dim=dim, inputs=[x], outputs=[loss])
    tape.backward(loss=loss)
    fd = central_fd(lambda v: ratio_loss(kernels, v, dim), X)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-8)
    assert np.all(x.grad.numpy()[dim:] == 0.0)


def test_float32(kernels, backend):
    """A float32 kernel: the buffers and the seed's product in float32."""
    x32 = X.astype(np.float32)
    x = ad.array(x32, requires_grad=True)
    loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.ratio32, dim=x32.size, inputs=[x], outputs=[loss])
    tape.backward(grads={loss: np.array([0.5], np.float32)})
    assert x.grad.numpy().dtype == np.float32
    fd = central_fd(lambda v: 0.5 * ratio_loss(kernels, v, kernel="ratio", dtype=float), X)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=2e-6, atol=2e-6)


def test_a_chain_of_launches(kernels, backend):
    """The loss's launch after another: its gradient flows on through the replayed one."""
    def loss_of(v):
        y = ad.zeros(v.size, dtype=float)
        ad.launch(kernels.double, dim=v.size, inputs=[ad.array(v)], outputs=[y])
        loss = ad.zeros(1, dtype=float)
        ad.launch(kernels.ratio, dim=v.size, inputs=[y], outputs=[loss])
        return float(loss.numpy()[0])
    x = ad.array(X, requires_grad=True)
    y = ad.zeros(X.size, dtype=float, requires_grad=True)
    loss = ad.zeros(1, dtype=float, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.double, dim=X.size, inputs=[x], outputs=[y])
        ad.launch(kernels.ratio, dim=X.size, inputs=[y], outputs=[loss])
    assert tape.steps[0].eager is None
    assert (tape.steps[1].eager is not None) == (backend == "numba")
    tape.backward(grads={loss: np.array([-1.5])})
    np.testing.assert_allclose(x.grad.numpy(), -1.5 * central_fd(loss_of, X), rtol=1e-6,
                               atol=1e-8)


def test_only_a_one_element_output(kernels, backend):
    """``pairs`` adds into a two-element output: its launch replays."""
    x = ad.array(X, requires_grad=True)
    out = ad.zeros(2, dtype=float, requires_grad=True)
    seed = np.array([0.3, -2.0])
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.pairs, dim=X.size, inputs=[x], outputs=[out])
    assert tape.steps[0].eager is None
    tape.backward(grads={out: seed})

    def loss(v):
        o = ad.zeros(2, dtype=float)
        ad.launch(kernels.pairs, dim=v.size, inputs=[ad.array(v)], outputs=[o])
        return float(o.numpy() @ seed)
    np.testing.assert_allclose(x.grad.numpy(), central_fd(loss, X), rtol=1e-6, atol=1e-8)


def test_nothing_to_differentiate(kernels):
    """No input takes part in the gradient: the forward runs."""
    loss = ad.zeros(1, dtype=float, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.ratio, dim=X.size, inputs=[ad.array(X)], outputs=[loss])
    assert tape.steps[0].eager is None


def test_switched_off_and_on_python(kernels, monkeypatch):
    """``config.eager_vjp`` off, or the Python backend (a backward to step through):
    the launch runs its forward and the backward replays it."""
    def step():
        tape = ad.Tape()
        with tape:
            ad.launch(kernels.ratio, dim=X.size, inputs=[ad.array(X, requires_grad=True)],
                      outputs=[ad.zeros(1, dtype=float, requires_grad=True)])
        return tape.steps[0]
    assert step().eager is not None
    with ad.backend_scope("python"):
        assert step().eager is None
    monkeypatch.setattr(config, "eager_vjp", False)
    assert step().eager is None


def test_memory_report_counts_the_buffers(kernels):
    """The step's buffers are memory the tape holds: saved bytes."""
    x = ad.array(X, requires_grad=True)
    loss = ad.zeros(1, dtype=float, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.ratio, dim=X.size, inputs=[x], outputs=[loss])
    report = tape.memory_report()
    assert report["saved_bytes"] == X.nbytes + 8     # J of x, and the seed's 1 of loss


def test_a_bad_index_names_the_users_line(kernels):
    """A fault in the launch that also runs the VJP is reported as the forward's is."""
    bad = A_IDX.copy()
    bad[3] = 99
    messages = []
    for taped in (False, True):
        pos = ad.array(POS, requires_grad=True)
        e = ad.zeros(1, dtype=float, requires_grad=True)
        tape = ad.Tape()
        with pytest.raises(AdjointError) as info:
            with tape if taped else _nothing():
                ad.launch(kernels.springs, dim=N_S,
                          inputs=[ad.array(bad), ad.array(B_IDX), ad.array(REST), pos],
                          outputs=[e])
        messages.append(str(info.value).replace("launch #0", "unrecorded launch"))
    assert "dx = pos[i, 0] - pos[j, 0]" in messages[0]
    assert messages[1] == messages[0]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_verify_fp_checks_the_gradients(kernels, monkeypatch):
    """With verify_fp on, the backward checks the gradients it added into: ``sqrt`` at 0
    has an infinite derivative, named in ``adj_x`` as the replay names it."""
    monkeypatch.setattr(config, "verify_fp", True)
    for eager in (True, False):
        monkeypatch.setattr(config, "eager_vjp", eager)
        x = ad.array(np.array([1.0, 0.0, 4.0]), requires_grad=True)
        loss = ad.zeros(1, dtype=float, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(kernels.root, dim=3, inputs=[x], outputs=[loss])
        assert (tape.steps[0].eager is not None) == eager
        with pytest.raises(NonFiniteError, match=r"'adj_x'.*adj_x\[1\] = inf"):
            tape.backward(loss=loss)


def test_shown_as_a_stage(kernels):
    """``adjoint show --stage forward_vjp`` (``ad.source``): the forward's accumulation of the
    loss, then the reverse pass reading its adjoint; a kernel without one says why not."""
    text = ad.source(kernels.springs, "forward_vjp")
    assert "def springs_forward_vjp(" in text
    forward_sum = text.index("energy_at_0 = rt.accumulate(energy_at_0")
    reverse = text.index("adj_energy[0]")
    assert forward_sum < reverse
    with pytest.raises(ValueError, match="no forward_vjp functions: only a kernel adding"):
        ad.source(kernels.looped, "forward_vjp")


def test_branches_a_func_and_atomic_sub(kernels, backend):
    """A func with a branch, a branch on the thread index, ``ad.min`` and ``atomic_sub``:
    against central differences of ``seed * loss`` in both inputs."""
    w0 = RNG.uniform(-1.0, 1.0, X.size)

    def loss_of(xv, wv):
        loss = ad.zeros(1, dtype=float)
        ad.launch(kernels.branchy, dim=X.size, inputs=[ad.array(xv), ad.array(wv)],
                  outputs=[loss])
        return float(loss.numpy()[0])
    x, w = ad.array(X, requires_grad=True), ad.array(w0, requires_grad=True)
    loss = ad.zeros(1, dtype=float, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.branchy, dim=X.size, inputs=[x, w], outputs=[loss])
    assert (tape.steps[0].eager is not None) == (backend == "numba")
    tape.backward(grads={loss: np.array([0.6])})
    np.testing.assert_allclose(x.grad.numpy(), 0.6 * central_fd(lambda v: loss_of(v, w0), X),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(w.grad.numpy(), 0.6 * central_fd(lambda v: loss_of(X, v), w0),
                               rtol=1e-6, atol=1e-8)
