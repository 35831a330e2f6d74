"""Tapes over several launches: copies, seeds, overwrite safety (also against writes
the tape does not record), visualization.

Expected values are closed forms worked out by hand in the comments (the sections
follow the project's reference cases 2, 3 and 7).
"""
import contextvars
import os
import shutil
import subprocess
import threading

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import watch
from tests.conftest import central_fd

KERNELS = '''
@ad.kernel
def square(y: ad.array(dtype=float), z: ad.array(dtype=float)):
    i = ad.tid()
    z[i] = y[i] * y[i]

@ad.kernel
def scale_add(x: ad.array(dtype=float), z: ad.array(dtype=float)):
    i = ad.tid()
    z[i] += 10.0 * x[i]

@ad.kernel
def chain(x: ad.array(dtype=float), y: ad.array(dtype=float),
          z: ad.array(dtype=float), s: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i]
    z[i] = y[i]
    s[i] = z[i]

@ad.kernel
def set_u(c: ad.array(dtype=float), u: ad.array(dtype=float)):
    i = ad.tid()
    u[i] = c[i]
'''


@pytest.fixture
def k(kernel_module):
    return kernel_module(KERNELS)


# -- §2 copies on the tape ------------------------------------------------------

def _copy_then_square(k, do_copy):
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    y = ad.zeros(3, requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        y = do_copy(y, x) or y
        ad.launch(k.square, 3, inputs=[y], outputs=[z])       # z = y*y
        ad.launch(k.scale_add, 3, inputs=[x], outputs=[z])    # z += 10*x
    np.testing.assert_array_equal(z.numpy(), [11.0, 24.0, 39.0])
    tape.backward(grads={z: np.ones(3)})
    return x, y


@pytest.mark.parametrize("how", ["copy", "assign", "clone"])
def test_copies_are_differentiable_reference_2(backend, k, how):
    do = {"copy": lambda y, x: ad.copy(y, x) and None,
          "assign": lambda y, x: y.assign(x) and None,
          "clone": lambda y, x: ad.clone(x)}[how]
    x, y = _copy_then_square(k, do)
    # x.grad == 2*x + 10: the copy's gradient is added to scale_add's, not written over it
    np.testing.assert_array_equal(x.grad.numpy(), [12.0, 14.0, 16.0])


def test_copy_with_offsets_passes_only_the_copied_region(backend, k):
    x = ad.array([1.0, 2.0, 3.0, 4.0, 5.0], requires_grad=True)
    y = ad.full(3, 5.0, requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.copy(y, x, dest_offset=1, src_offset=2, count=2)   # y = [5, 3, 4]
        ad.launch(k.square, 3, inputs=[y], outputs=[z])
    np.testing.assert_array_equal(y.numpy(), [5.0, 3.0, 4.0])
    tape.backward(grads={z: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 6.0, 8.0, 0.0])
    # y[0] kept its own value (gradient 2*5); the overwritten region's gradient is cleared
    np.testing.assert_array_equal(y.grad.numpy(), [10.0, 0.0, 0.0])


def test_overlapping_copy_within_one_array(backend, k):
    a = ad.array([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    z = ad.zeros(4, requires_grad=True)
    with ad.Tape() as tape:
        ad.copy(a, a, dest_offset=0, src_offset=1, count=3)   # a = [2, 3, 4, 4]
        ad.launch(k.square, 4, inputs=[a], outputs=[z])
    np.testing.assert_array_equal(a.numpy(), [2.0, 3.0, 4.0, 4.0])
    tape.backward(grads={z: np.ones(4)})
    # sum(a'^2) with a' = (a1, a2, a3, a3): d/da0 = 0, d/da1 = 4, d/da2 = 6, d/da3 = 2*4 + 2*4
    np.testing.assert_array_equal(a.grad.numpy(), [0.0, 4.0, 6.0, 16.0])


def test_assign_from_array_like_clears_destination_gradient(backend, k):
    y = ad.full(3, 7.0, requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        y.assign(np.array([1.0, 2.0, 3.0]))
        ad.launch(k.square, 3, inputs=[y], outputs=[z])
    tape.backward(grads={z: np.ones(3)})
    np.testing.assert_array_equal(y.grad.numpy(), [0.0, 0.0, 0.0])


def test_copy_size_mismatch_is_refused():
    with pytest.raises(ValueError, match="3 elements"):
        ad.copy(ad.zeros(4), ad.zeros(3))
    with pytest.raises(ValueError, match="past the end"):
        ad.copy(ad.zeros(4), ad.zeros(4), dest_offset=2, count=3)


# -- §3 seeds and accumulation ------------------------------------------------

def test_outputs_seeded_one_at_a_time_reference_3(backend, k):
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    y, z, s = (ad.zeros(3, requires_grad=True) for _ in range(3))
    with ad.Tape() as tape:
        ad.launch(k.chain, 3, inputs=[x], outputs=[y, z, s])
    reads = []
    for out in (y, z, s):
        tape.backward(grads={out: np.ones(3)})
        reads.append(x.grad.numpy().copy())
        tape.zero()
        for a in (x, y, z, s):
            np.testing.assert_array_equal(a.grad.numpy(), np.zeros(3))
    for r in reads:
        np.testing.assert_array_equal(r, [1.0, 1.0, 1.0])


def test_two_backward_calls_accumulate(backend, k):
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    y, z, s = (ad.zeros(3, requires_grad=True) for _ in range(3))
    with ad.Tape() as tape:
        ad.launch(k.chain, 3, inputs=[x], outputs=[y, z, s])
    tape.backward(grads={s: np.ones(3)})
    tape.backward(grads={s: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_seed_array_is_copied_not_aliased(backend, k):
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    seed = np.array([1.0, 2.0, 3.0])
    seed_arr = ad.array([1.0, 1.0, 1.0])
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[x], outputs=[z])
    tape.backward(grads={z: seed})
    # the store clears z's adjoint; an aliased seed would now read 0
    np.testing.assert_array_equal(seed, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 8.0, 18.0])
    tape.zero()
    tape.backward(grads={z: seed_arr})
    np.testing.assert_array_equal(seed_arr.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])


def test_backward_zero_backward_with_different_seeds(backend, k):
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    y, z, s = (ad.zeros(3, requires_grad=True) for _ in range(3))
    with ad.Tape() as tape:
        ad.launch(k.chain, 3, inputs=[x], outputs=[y, z, s])
    for scale in (2.0, 3.0, 2.0):
        tape.backward(grads={s: np.full(3, scale)})
        np.testing.assert_array_equal(x.grad.numpy(), [scale] * 3)
        tape.zero()


def test_loss_seed(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def total(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
            i = ad.tid()
            ad.atomic_add(loss, 0, x[i] * x[i])
        ''')
    x = ad.array([1.0, -2.0, 0.5], requires_grad=True)
    loss = ad.zeros(1, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.total, 3, inputs=[x], outputs=[loss])
    tape.backward(loss=loss)
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 1.0])
    with pytest.raises(ad.TapeError, match="one element"):
        tape.backward(loss=x)


def test_seed_of_wrong_shape_is_refused(k):
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[x], outputs=[z])
    with pytest.raises(ad.TapeError, match="does not fit"):
        tape.backward(grads={z: np.ones(4)})



@pytest.mark.parametrize("seed", [np.array([1, 2, 3]), np.array([1.0, 2.0, 3.0], np.float32),
                                  2.0, np.array([2.0]), [1.0, 2.0, 3.0]],
                         ids=["int-array", "float32-array", "scalar", "one-element", "list"])
def test_seeds_of_every_form_are_copied_in_the_gradients_dtype(k, seed):
    """A seed of the array's shape (copied as it is), one that broadcasts, and a list give
    the gradient the seed asks for, converted to the gradient's dtype."""
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[x], outputs=[z])
    tape.backward(grads={z: seed})
    want = 2.0 * x.numpy() * np.broadcast_to(np.asarray(seed, np.float64), (3,))
    np.testing.assert_array_equal(x.grad.numpy(), want)

# -- §7 overwrite safety ----------------------------------------------------------

OVERWRITERS = {
    "launch": lambda k, c, u: ad.launch(k.set_u, 3, inputs=[c], outputs=[u]),
    "copy": lambda k, c, u: ad.copy(u, c),
    "assign": lambda k, c, u: u.assign(c),
}


@pytest.mark.parametrize("how", sorted(OVERWRITERS))
def test_overwrite_after_read_keeps_a_copy_reference_7(backend, k, how):
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    c = ad.array([10.0, 20.0, 30.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[u], outputs=[out])   # reads u = [1, 2, 3]
        OVERWRITERS[how](k, c, u)                            # u = c
    np.testing.assert_array_equal(u.numpy(), [10.0, 20.0, 30.0])
    tape.backward(grads={out: np.ones(3)})
    # d sum(u0^2) / d u0 = 2*u0 (a tape that replays with the new u would give 2*c)
    np.testing.assert_array_equal(u.grad.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(c.grad.numpy(), [0.0, 0.0, 0.0])
    report = tape.memory_report()
    assert report["kept_arrays"] == 1 and report["kept_bytes"] == 3 * 8


def test_only_arrays_read_before_an_overwrite_are_kept(backend, k):
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    c = ad.array([10.0, 20.0, 30.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.set_u, 3, inputs=[c], outputs=[out])    # out written, never read
        ad.launch(k.square, 3, inputs=[u], outputs=[out])   # out overwritten: no copy needed
    assert tape.memory_report()["kept_arrays"] == 0


def test_repeated_overwrites_keep_each_value_read(backend, k):
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    c = ad.array([4.0, 5.0, 6.0], requires_grad=True)
    d = ad.array([7.0, 8.0, 9.0], requires_grad=True)
    out1, out2 = ad.zeros(3, requires_grad=True), ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[u], outputs=[out1])  # out1 = u0^2
        ad.launch(k.set_u, 3, inputs=[c], outputs=[u])      # u = c
        ad.launch(k.square, 3, inputs=[u], outputs=[out2])  # out2 = c^2
        ad.launch(k.set_u, 3, inputs=[d], outputs=[u])      # u = d
    tape.backward(grads={out1: np.ones(3), out2: np.ones(3)})
    np.testing.assert_array_equal(u.grad.numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(c.grad.numpy(), [8.0, 10.0, 12.0])
    np.testing.assert_array_equal(d.grad.numpy(), [0.0, 0.0, 0.0])
    assert tape.memory_report()["kept_arrays"] == 2


@pytest.mark.parametrize("how", sorted(OVERWRITERS))
def test_overwrite_error_mode_names_both_steps_and_the_array(backend, k, how):
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    c = ad.array([10.0, 20.0, 30.0])
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape(overwrite="error"):
        ad.launch(k.square, 3, inputs=[u], outputs=[out])
        with pytest.raises(ad.TapeError) as err:
            OVERWRITERS[how](k, c, u)
    msg = str(err.value)
    assert "launch #0 of kernel 'square'" in msg and "parameter 'y'" in msg
    writer = {"launch": "launch #1 of kernel 'set_u'", "copy": "copy #1", "assign": "assign #1"}[how]
    assert writer in msg
    np.testing.assert_array_equal(u.numpy(), [1.0, 2.0, 3.0])   # refused before writing


def test_overwrite_mode_is_validated():
    with pytest.raises(ValueError):
        ad.Tape(overwrite="ignore")


def test_overwrite_of_plain_numpy_argument(backend, k):
    u = np.array([1.0, 2.0, 3.0])
    x = ad.array([1.0, 1.0, 1.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    if backend == "cuda":                 # a host array cannot be launched on the GPU
        with pytest.raises(ad.LaunchError):
            ad.launch(k.square, 3, inputs=[u], outputs=[out], device="cuda")
        return
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[u], outputs=[out])   # noqa (u has no gradient)
        ad.launch(k.scale_add, 3, inputs=[x], outputs=[out])
        ad.launch(k.set_u, 3, inputs=[x], outputs=[u])      # overwrites the numpy array
    assert tape.memory_report()["kept_arrays"] == 1


def test_read_then_write_in_one_kernel_is_refused_with_file_and_line(backend, kernel_module):
    m = kernel_module('''
        @ad.kernel
        def double_in_place(u: ad.array(dtype=float)):
            i = ad.tid()
            u[i] = u[i] * 2.0
        ''')
    u = ad.array([1.0, 2.0], requires_grad=True)
    with pytest.raises(ad.TransformError) as err:
        ad.launch(m.double_in_place, 2, inputs=[u])
    with open(m.__file__) as fh:
        line = fh.read().splitlines().index("    u[i] = u[i] * 2.0") + 1
    assert err.value.filename == m.__file__ and err.value.lineno == line
    assert f"{m.__file__}:{line}:" in str(err.value)


# -- writes the tape does not record (issue 11 item 4) ------------------------------------
# Each writer overwrites u = [1, 2, 3], which the tape's launch of `square` read, with
# [-1, -2, -3] (or zeros) before the tape's backward. d sum(u0^2) / d u0 = 2*u0 = [2, 4, 6];
# a backward that replays with the new values gives [-2, -4, -6] or [0, 0, 0].

NEW_U = [-1.0, -2.0, -3.0]


def _set_u(k, u, **kw):
    ad.launch(k.set_u, 3, inputs=[ad.array(NEW_U)], outputs=[u], **kw)


def _on_a_thread(fn):
    # (in this context's copy: the backend scope of the test, cuda included, holds there)
    thread = threading.Thread(target=contextvars.copy_context().run, args=(fn,))
    thread.start()
    thread.join(timeout=300)


def _launch_on_another_threads_tape(k, u):
    def work():
        with ad.Tape():
            _set_u(k, u)
    _on_a_thread(work)


def _on_another_tape(fn):
    def write(k, u):
        with ad.Tape():
            fn(k, u)
    return write


FOREIGN_WRITERS = {   # name: (write(k, u), made inside the tape's 'with', words of its label)
    "unrecorded launch": (_set_u, False, "unrecorded launch of kernel 'set_u'"),
    "launch with record_tape=False": (lambda k, u: _set_u(k, u, record_tape=False), True,
                                      "unrecorded launch of kernel 'set_u'"),
    "launch on another tape": (_on_another_tape(_set_u), False, "launch #0 of kernel 'set_u'"),
    "launch on another thread's tape": (_launch_on_another_threads_tape, False,
                                        "launch #0 of kernel 'set_u'"),
    "copy": (lambda k, u: ad.copy(u, ad.array(NEW_U)), False, "unrecorded copy"),
    "assign on another tape": (_on_another_tape(lambda k, u: u.assign(NEW_U)), False, "assign #0"),
    "fill_": (lambda k, u: u.fill_(-1.0), False, "fill_(-1.0)"),
    "zero_": (lambda k, u: u.zero_(), True, "fill_(0)"),
    "adjoint launch": (   # u is the adjoint array of x: u += 2 * x * 1
        lambda k, u: ad.launch(k.square, 3, inputs=[ad.array(NEW_U)], outputs=[ad.zeros(3)],
                               adjoint=True, adj_inputs=[u], adj_outputs=[ad.ones(3)]),
        False, "adjoint launch of kernel 'square'"),
}


def _read_then_overwrite(k, writer, overwrite):
    write, inside, _ = FOREIGN_WRITERS[writer]
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape(overwrite=overwrite) as tape:
        ad.launch(k.square, 3, inputs=[u], outputs=[out])   # reads u = [1, 2, 3]
        if inside:
            write(k, u)
    if not inside:
        write(k, u)
    assert not np.array_equal(u.numpy(), [1.0, 2.0, 3.0])
    return tape, u, out


@pytest.mark.parametrize("writer", sorted(FOREIGN_WRITERS))
def test_a_write_the_tape_did_not_record_is_kept_first(backend, k, writer):
    tape, u, out = _read_then_overwrite(k, writer, "copy")
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_array_equal(u.grad.numpy(), [2.0, 4.0, 6.0])
    (kept,) = tape.memory_report()["kept"]
    assert "launch #0 of kernel 'square'" in kept.reader
    assert FOREIGN_WRITERS[writer][2] in kept.writer


@pytest.mark.parametrize("writer", sorted(FOREIGN_WRITERS))
def test_error_mode_refuses_a_write_it_did_not_record_at_backward(backend, k, writer):
    tape, u, out = _read_then_overwrite(k, writer, "error")
    with pytest.raises(ad.TapeError) as err:
        tape.backward(grads={out: np.ones(3)})
    msg = str(err.value)
    with open(k.__file__) as fh:
        lines = fh.read().splitlines()
    origin = {name: f"{os.path.basename(k.__file__)}:"
                    f"{next(n for n, t in enumerate(lines, 1) if t.startswith(f'def {name}('))}"
              for name in ("square", "set_u")}
    assert f"launch #0 of kernel 'square' ({origin['square']})" in msg
    assert "parameter 'y'" in msg and "shape (3,)" in msg and FOREIGN_WRITERS[writer][2] in msg
    if "set_u" in msg:
        assert origin["set_u"] in msg
    assert ("recorded on another tape" in msg) == ("another" in writer)
    assert not u.grad.numpy().any()         # refused before any step's backward ran


def test_gradient_read_by_a_later_tape_survives_another_backward_and_zero(backend, k):
    """A tape that reads a gradient (g = x.grad) keeps it when another tape's backward
    adds to it and its zero() clears it."""
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    y, z = ad.zeros(3, requires_grad=True), ad.zeros(3, requires_grad=True)
    with ad.Tape() as first:
        ad.launch(k.square, 3, inputs=[x], outputs=[y])
    first.backward(grads={y: np.ones(3)})               # x.grad = 2x = [2, 4, 6]
    g = x.grad
    g.requires_grad = True
    with ad.Tape() as second:
        ad.launch(k.square, 3, inputs=[g], outputs=[z])   # z = g^2, reads g = [2, 4, 6]
    first.backward(grads={y: np.ones(3)})               # g = [4, 8, 12]
    first.zero()                                        # g = [0, 0, 0]
    second.backward(grads={z: np.ones(3)})
    np.testing.assert_array_equal(g.grad.numpy(), [4.0, 8.0, 12.0])   # 2 * [2, 4, 6]
    assert second.memory_report()["kept_arrays"] == 1


def test_an_alias_of_the_memory_read_is_seen(backend, k):
    """A numpy view is other object over the same memory: writing it is an overwrite."""
    if backend == "cuda":
        pytest.skip("host arrays cannot be launched on the GPU")
    u = np.array([1.0, 2.0, 3.0])
    out = ad.zeros(3, requires_grad=True)
    x = ad.array([0.0, 0.0, 0.0], requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[u], outputs=[out])
        ad.launch(k.scale_add, 3, inputs=[x], outputs=[out])     # out = u^2 + 10x
    ad.launch(k.set_u, 3, inputs=[ad.array(NEW_U)], outputs=[u[::-1][::-1]])   # a view of u
    np.testing.assert_array_equal(u, NEW_U)
    assert tape.memory_report()["kept_arrays"] == 1
    assert tape.steps[0].values[0].tolist() == [1.0, 2.0, 3.0]


def test_a_forgotten_tape_stops_watching(backend, k, no_gc):
    before = watch.watched()
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[u], outputs=[ad.zeros(3)])
    assert watch.watched() == before + 1
    tape.reset()
    assert watch.watched() == before
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[u], outputs=[ad.zeros(3)])
    del tape                                # (freed at once: no cycle holds a tape)
    assert watch.watched() == before
    u.fill_(5.0)                            # nobody watches: nothing kept, no error
    np.testing.assert_array_equal(u.numpy(), [5.0, 5.0, 5.0])


# -- record_func, reset, visualize --------------------------------------------------

def test_record_func_runs_in_reverse_order_and_reset_forgets(backend, k):
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    seen = []
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[x], outputs=[z])
        tape.record_func(lambda: seen.append(x.grad.numpy().copy()), [x])
    tape.backward(grads={z: np.ones(3)})
    np.testing.assert_array_equal(seen[0], [0.0, 0.0, 0.0])   # ran before square's backward
    tape.reset()
    assert tape.steps == [] and not x.grad.numpy().any()
    tape.backward(grads={z: np.ones(3)})
    assert not x.grad.numpy().any()


def test_visualize_writes_a_dot_graph(backend, k, tmp_path):
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    c = ad.array([10.0, 20.0, 30.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[u], outputs=[out])
        ad.copy(u, c)
    path = tmp_path / "tape.dot"
    text = tape.visualize(str(path))
    assert path.read_text() == text and text.startswith("digraph")
    assert "square" in text and "copy" in text and "kept" in text
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tsvg", str(path), "-o", str(tmp_path / "tape.svg")], check=True)


SHARED_GRADIENTS = '''
@ad.kernel
def scale(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = 2.0 * x[i]


@ad.kernel
def product(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] * y[i] * y[i]
'''


def test_gradients_shared_by_an_input_and_an_output_are_refused(backend, kernel_module):
    """``x.grad = y.grad`` with ``y`` written by the kernel: the backward reads ``y``'s
    gradient as its seed, and the alias would run on zeroed scratch (the seed missed:
    ``x.grad`` came out 1 where it is 2). The backward refuses, naming both parameters."""
    m = kernel_module(SHARED_GRADIENTS)
    x = ad.array(np.ones(3), requires_grad=True)
    y = ad.zeros(3, dtype=float, requires_grad=True)
    x.grad = y.grad
    tape = ad.Tape()
    with tape:
        ad.launch(m.scale, 3, inputs=[x], outputs=[y])
    with pytest.raises(ad.TapeError, match="'x' and 'y' are different arrays whose gradients"):
        tape.backward(grads={y: np.ones(3)})


def test_read_only_inputs_sharing_one_gradient_get_the_sum(backend, kernel_module):
    """Two inputs whose gradients are one buffer (weight tying) stay allowed: the buffer
    gets both gradients, added, against central differences of each."""
    m = kernel_module(SHARED_GRADIENTS)
    rng = np.random.default_rng(4)
    xv, yv, w = rng.uniform(0.5, 1.5, 4), rng.uniform(0.5, 1.5, 4), rng.uniform(-1, 1, 4)
    x = ad.array(xv, requires_grad=True)
    y = ad.array(yv, requires_grad=True)
    out = ad.zeros(4, dtype=float, requires_grad=True)
    y.grad = x.grad
    tape = ad.Tape()
    with tape:
        ad.launch(m.product, 4, inputs=[x, y], outputs=[out])
    tape.backward(grads={out: w})
    loss = lambda a, b: float(np.sum(w * a * b * b))      # noqa: E731
    expected = central_fd(lambda a: loss(a, yv), xv) + central_fd(lambda b: loss(xv, b), yv)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-7)
