"""Fault battery for the runtime (issue 11): bad launch dimensions, complex data,
tapes used from several threads. Each case ends in a clear error or the exact
result, on every backend; never a crash, a TypeError from deep inside numba or
a silently wrong value."""
import importlib
import os
import threading

import numpy as np
import pytest

import adjoint as ad

KERNELS = '''
@ad.kernel
def square(a: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = a[i] * a[i]

@ad.kernel
def scale(s: float, a: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = s * a[i]

@ad.kernel
def copy2d(a: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    out[i, j] = a[i, j]
'''


@pytest.fixture
def k(kernel_module):
    return kernel_module(KERNELS)


def _origin(k, name):
    """``file:line`` of kernel ``name``'s definition, as error messages give it."""
    with open(k.__file__) as fh:
        line = next(n for n, text in enumerate(fh, 1) if text.startswith(f"def {name}("))
    return f"{os.path.basename(k.__file__)}:{line}"


# -- item 2: launch dimensions --------------------------------------------------------

BAD_DIMS_1D = {
    "float": 4.0,
    "huge": 10**30,
    "just past 2**31": 2**31 + 5,
    "2**31": 2**31,
    "negative": -1,
    "bool": True,
    "string": "3",
    "None": None,
    "tuple of two": (3, 1),
    "empty tuple": (),
    "float in tuple": (3.0,),
}


@pytest.mark.parametrize("case", sorted(BAD_DIMS_1D))
def test_bad_dim_is_a_launch_error_naming_the_kernel(backend, k, case):
    a, out = ad.array([1.0, 2.0, 3.0]), ad.zeros(3)
    with pytest.raises(ad.LaunchError) as err:
        ad.launch(k.square, BAD_DIMS_1D[case], inputs=[a], outputs=[out])
    msg = str(err.value)
    assert "kernel 'square'" in msg and _origin(k, "square") in msg and "dim" in msg
    np.testing.assert_array_equal(out.numpy(), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("dim", [(2, 2, 1), (2,), 4, (2**16, 2**15), (0, 10**30), (2, -1)])
def test_bad_dim_of_a_2d_kernel(backend, k, dim):
    a, out = ad.ones((2, 2)), ad.zeros((2, 2))
    with pytest.raises(ad.LaunchError) as err:
        ad.launch(k.copy2d, dim, inputs=[a], outputs=[out])
    assert "kernel 'copy2d'" in str(err.value) and _origin(k, "copy2d") in str(err.value)


def test_the_thread_limit_is_documented_and_named(k):
    assert importlib.import_module("adjoint.runtime.launch").MAX_THREADS == 2**31 - 1
    with pytest.raises(ad.LaunchError, match="2147483647"):
        ad.launch(k.square, 2**31, inputs=[ad.zeros(1)], outputs=[ad.zeros(1)])


def test_good_dims_of_every_spelling(backend, k):
    a = ad.array([[1.0, 2.0], [3.0, 4.0]])
    for dim in [(2, 2), [2, 2], (np.int64(2), np.int32(2)), np.array([2, 2])]:
        out = ad.zeros((2, 2))
        ad.launch(k.copy2d, dim, inputs=[a], outputs=[out])
        np.testing.assert_array_equal(out.numpy(), a.numpy())
    out = ad.zeros(3)
    ad.launch(k.square, np.int64(0), inputs=[ad.ones(3)], outputs=[out])   # no threads
    np.testing.assert_array_equal(out.numpy(), [0.0, 0.0, 0.0])


# -- item 2: complex data is refused, never cast to real -------------------------------

COMPLEX = np.array([1.0 + 2.0j, 3.0, 4.0])


@pytest.mark.parametrize("make", [
    lambda: ad.array(COMPLEX),
    lambda: ad.array(COMPLEX, dtype=float),
    lambda: ad.array([1j, 2.0]),
    lambda: ad.Array(COMPLEX),
    lambda: ad.full(3, 2j),
    lambda: ad.zeros(3, dtype=complex),
], ids=["array", "array-dtype-float", "array-list", "Array", "full", "zeros"])
def test_complex_arrays_are_refused(backend, make):
    with pytest.raises(TypeError, match="complex"):
        make()


def test_complex_values_into_an_array_are_refused(backend):
    a = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    for write in (lambda: a.assign(COMPLEX), lambda: ad.copy(a, COMPLEX),
                  lambda: a.fill_(1j)):
        with pytest.raises(TypeError, match="complex"):
            write()
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0, 3.0])


def test_complex_launch_arguments_are_refused(backend, k):
    out = ad.zeros(3)
    with pytest.raises(ad.LaunchError, match="complex") as err:
        ad.launch(k.scale, 3, inputs=[2.0 + 1.0j, ad.ones(3)], outputs=[out])
    assert "'s'" in str(err.value) and "kernel 'scale'" in str(err.value)
    if backend != "cuda":          # a host array on the GPU is refused for its device first
        with pytest.raises(ad.LaunchError, match="complex128") as err:
            ad.launch(k.square, 3, inputs=[COMPLEX], outputs=[out])
        assert "parameter 'a'" in str(err.value)
    np.testing.assert_array_equal(out.numpy(), [0.0, 0.0, 0.0])


# -- item 5: the active tape is per thread --------------------------------------------

def _in_threads(n, work):
    """Run ``work(index)`` on ``n`` real threads at once; re-raise the first failure
    (one that broke a barrier for the others is reported before their BrokenBarrierError)."""
    errors = []

    def run(index):
        try:
            work(index)
        except BaseException as exc:        # noqa: B036 (re-raised below)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    errors.sort(key=lambda e: isinstance(e, threading.BrokenBarrierError))
    if errors:
        raise errors[0]


def test_two_threads_with_two_tapes_get_their_own_gradients(backend, k):
    ad.launch(k.square, 3, inputs=[ad.ones(3)], outputs=[ad.zeros(3)])  # compiled up front
    both_recording, both_launched = (threading.Barrier(2, timeout=60) for _ in range(2))
    # numba's CUDA simulator runs one kernel at a time, so device work takes turns; both
    # tapes are open while both threads launch
    one_at_a_time = threading.Lock()
    grads, steps = {}, {}

    def work(t):
        with one_at_a_time:
            a = ad.array([1.0, 2.0, 3.0] if t == 0 else [4.0, 5.0, 6.0], requires_grad=True)
            out = ad.zeros(3, requires_grad=True)
        with ad.Tape() as tape:
            both_recording.wait()
            with one_at_a_time:
                ad.launch(k.square, 3, inputs=[a], outputs=[out])
            both_launched.wait()
        with one_at_a_time:
            tape.backward(grads={out: np.ones(3)})
            grads[t], steps[t] = a.grad.numpy().copy(), len(tape.steps)

    _in_threads(2, work)
    assert steps == {0: 1, 1: 1}
    np.testing.assert_array_equal(grads[0], [2.0, 4.0, 6.0])      # d sum(a^2) / da = 2a
    np.testing.assert_array_equal(grads[1], [8.0, 10.0, 12.0])


def test_a_launch_on_another_thread_is_not_recorded(backend, k):
    a = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.square, 3, inputs=[a], outputs=[out])
        _in_threads(1, lambda t: ad.launch(k.square, 3, inputs=[ad.ones(3)],
                                           outputs=[ad.zeros(3)]))
        assert ad.runtime.active_tape() is tape
    assert len(tape.steps) == 1
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 4.0, 6.0])


def test_one_tape_cannot_record_on_two_threads_at_once(backend, k):
    with ad.Tape() as tape:
        with pytest.raises(ad.TapeError, match="already recording"):
            _in_threads(1, lambda t: tape.__enter__())
        assert ad.runtime.active_tape() is tape


# -- item 7: tapes do not nest ----------------------------------------------------------

def test_a_nested_tape_is_refused_and_the_outer_tape_keeps_recording(backend, k):
    a = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    with ad.Tape() as outer:
        with pytest.raises(ad.TapeError) as err:
            with ad.Tape():
                pass
        ad.launch(k.square, 3, inputs=[a], outputs=[out])
        with pytest.raises(ad.TapeError, match="this tape is already recording"):
            with outer:
                pass
        assert ad.runtime.active_tape() is outer
    msg = str(err.value)
    assert "another tape is already recording" in msg and "do not nest" in msg
    assert f"{os.path.basename(__file__)}:" in msg            # where the outer tape was entered
    assert ad.runtime.active_tape() is None and len(outer.steps) == 1
    outer.backward(grads={out: np.ones(3)})
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 4.0, 6.0])
    with ad.Tape() as again:                     # one after the other is fine
        ad.launch(k.square, 3, inputs=[a], outputs=[out])
    assert len(again.steps) == 1


@pytest.mark.levels_skip("threads read arrays in any order (tests/levels.py compares in order)")
def test_four_threads_launch_zero_and_seed_at_once(backend, k):
    """No turn-taking in the test: launches, seeds and zeroing from four threads at once
    (numba's CUDA simulator runs one kernel at a time; the backend makes them take turns)."""
    ad.launch(k.square, 3, inputs=[ad.ones(3)], outputs=[ad.zeros(3)])  # compiled up front
    start = threading.Barrier(4, timeout=60)
    grads = {}

    def work(t):
        a = ad.array([1.0 + t, 2.0 + t, 3.0 + t], requires_grad=True)
        out = ad.zeros(3, requires_grad=True)
        start.wait()
        for _ in range(3):
            with ad.Tape() as tape:
                ad.launch(k.square, 3, inputs=[a], outputs=[out])
            tape.backward(grads={out: np.ones(3)})
            grads.setdefault(t, []).append(a.grad.numpy().copy())
            tape.zero()

    _in_threads(4, work)
    for t in range(4):
        for g in grads[t]:
            np.testing.assert_array_equal(g, 2 * np.array([1.0 + t, 2.0 + t, 3.0 + t]))
