"""A CUDA launch does not wait for its kernel (runtime/pending.py): an index out of bounds
or a loop past ``loop_capacity`` found by a GPU thread is raised where the host next waits
for the GPU -- ``Array.numpy()`` of any array, ``ad.synchronize()``, the end of
``Tape.backward``, adjoint's copies to the host -- naming the launch that faulted, before
any value computed after it reaches the host. The CPU backends raise at the launch.

In numba's simulator the kernel has run when the launch returns, but the fault is
reported by the same rule, through the same registry, as on a GPU."""
import threading

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_cuda, pending

needs_cuda = pytest.mark.skipif(not backend_cuda.available(),
                                reason="no CUDA device or simulator")

KERNELS = '''
@ad.kernel
def far(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i + 100]


@ad.kernel
def gather(idx: ad.array(dtype=ad.int64), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[idx[i]] * x[idx[i]]


@ad.kernel
def double(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = 2.0 * x[i]


@ad.kernel(loop_capacity=4)
def powers(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    p = 1.0
    for k in range(n):
        p = p * x[i] + 0.5
    out[i] = p
'''


def _line(module, text):
    """The line number of ``text`` (stripped) in ``module``'s file."""
    lines = [ln.strip() for ln in open(module.__file__).read().splitlines()]
    return lines.index(text) + 1


def _this_line():
    import sys
    return sys._getframe(1).f_lineno


def _arrays(device="cuda"):
    x = ad.array(np.arange(4.0), requires_grad=True, device=device)
    idx = ad.array(np.array([0, 3, 9, 1]), device=device)        # 9: out of bounds
    good = ad.array(np.array([3, 2, 1, 0]), device=device)
    return x, idx, good


@needs_cuda
def test_a_fault_is_raised_at_numpy_of_any_array(kernel_module):
    m = kernel_module(KERNELS)
    x, idx, _ = _arrays()
    out, other = ad.zeros(4, device="cuda"), ad.ones(3, device="cuda")
    ad.launch(m.gather, 4, inputs=[idx, x], outputs=[out])
    site = _this_line() - 1
    assert pending.pending() == 1                   # the launch returned without a verdict
    with pytest.raises(ad.BoundsError) as err:
        other.numpy()                               # not the faulting kernel's output
    msg = str(err.value)
    assert err.value.kernel == "gather" and err.value.array == "x" and err.value.index == 9
    assert f"({m.__file__.rsplit('/', 1)[-1]}:{_line(m, 'out[i] = x[idx[i]] * x[idx[i]]')})" \
        in msg
    assert "found by Array.numpy()" in msg and "gather_forward" in msg
    assert f"{__file__}:{site}" in msg                # the user's line that launched it
    assert pending.pending() == 0
    np.testing.assert_array_equal(other.numpy(), np.ones(3))   # reported once: clean now


@needs_cuda
def test_a_fault_is_raised_at_synchronize(kernel_module):
    m = kernel_module(KERNELS)
    x = ad.array(np.arange(4.0), device="cuda")
    ad.launch(m.far, 4, inputs=[x], outputs=[ad.zeros(4, device="cuda")])
    with pytest.raises(ad.BoundsError, match=r"(?s)kernel 'far' .*index 100 .*found by "
                                             r"ad\.synchronize\(\)"):
        ad.synchronize()
    ad.synchronize()                                # nothing left to report


@needs_cuda
def test_a_forward_fault_is_raised_at_the_end_of_the_backward(kernel_module):
    m = kernel_module(KERNELS)
    x, idx, _ = _arrays()
    out = ad.zeros(4, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(m.gather, 4, inputs=[idx, x], outputs=[out])
    with pytest.raises(ad.BoundsError) as err:
        tape.backward(grads={out: np.ones(4)})
    assert "found by the end of Tape.backward" in str(err.value)
    assert "gather_forward" in str(err.value)       # the forward, launched before the backward


@needs_cuda
def test_a_backward_loop_past_capacity_is_raised_at_the_end_of_the_backward(kernel_module):
    m = kernel_module(KERNELS)
    x = ad.array([1.1, 0.9], requires_grad=True, device="cuda")
    out = ad.zeros(2, requires_grad=True, device="cuda")
    with ad.Tape() as tape:
        ad.launch(m.powers, 2, inputs=[10, x], outputs=[out])
    with pytest.raises(ad.AdjointError) as err:
        tape.backward(grads={out: np.ones(2)})
    msg = str(err.value)
    assert f"line {_line(m, 'for k in range(n):')}" in msg and "loop_capacity" in msg
    assert "powers_backward" in msg and "found by the end of Tape.backward" in msg


@needs_cuda
def test_of_two_faulting_launches_the_first_is_named(kernel_module):
    m = kernel_module(KERNELS)
    x, idx, _ = _arrays()
    ad.launch(m.far, 4, inputs=[x], outputs=[ad.zeros(4, device="cuda")])
    first = _this_line() - 1
    ad.launch(m.gather, 4, inputs=[idx, x], outputs=[ad.zeros(4, device="cuda")])
    ad.launch(m.double, 4, inputs=[x], outputs=[ad.zeros(4, device="cuda")])   # unchecked
    with pytest.raises(ad.BoundsError) as err:
        ad.synchronize()
    assert err.value.kernel == "far" and f"{__file__}:{first}" in str(err.value)
    assert "1 later launch(es) faulted too" in str(err.value)
    ad.synchronize()


@needs_cuda
def test_a_clean_launch_then_a_faulting_one_names_the_faulting_one(kernel_module):
    m = kernel_module(KERNELS)
    x, idx, good = _arrays()
    out = ad.zeros(4, device="cuda")
    ad.launch(m.gather, 4, inputs=[good, x], outputs=[out])
    ad.launch(m.gather, 4, inputs=[idx, x], outputs=[out])
    bad = _this_line() - 1
    assert pending.pending() == 2
    with pytest.raises(ad.BoundsError) as err:
        out.numpy()
    assert f"{__file__}:{bad}" in str(err.value) and "later launch" not in str(err.value)


@needs_cuda
def test_after_a_reported_fault_the_next_launches_are_clean(kernel_module):
    m = kernel_module(KERNELS)
    x, idx, good = _arrays()
    out = ad.zeros(4, device="cuda")
    for _ in range(2):                  # the faulted row is zeroed and reused: reported again
        ad.launch(m.gather, 4, inputs=[idx, x], outputs=[out])
        with pytest.raises(ad.BoundsError):
            out.numpy()
        assert pending.pending() == 0
        ad.launch(m.gather, 4, inputs=[good, x], outputs=[out])
        np.testing.assert_array_equal(out.numpy(), np.array([3.0, 2.0, 1.0, 0.0]) ** 2)
    assert not pending._rows[0].copy_to_host().any()      # every status row zeroed again


@needs_cuda
def test_a_launch_that_does_not_fault_never_waits(kernel_module, monkeypatch):
    """Checked launches (forward, an adjoint launch, a recorded forward) copy nothing to
    the host and do not synchronize; the first read waits once for all of them: one
    copy of the status rows, then the array's."""
    from numba import cuda
    m = kernel_module(KERNELS)
    x, _, good = _arrays()
    out = ad.zeros(4, requires_grad=True, device="cuda")
    m.gather.spec_for("cuda")
    ad.launch(m.gather, 4, inputs=[good, x], outputs=[out])   # (compiled, pool made)
    ad.synchronize()
    cls = type(out.data)
    copies, syncs = [], []
    original, original_sync = cls.copy_to_host, cuda.synchronize

    def counted(self, *args, **kwargs):
        copies.append(tuple(self.shape))
        return original(self, *args, **kwargs)

    def counted_sync(*args, **kwargs):
        syncs.append(1)
        return original_sync(*args, **kwargs)
    monkeypatch.setattr(cls, "copy_to_host", counted)
    monkeypatch.setattr(cuda, "synchronize", counted_sync)
    def no_new_array(*args, **kwargs):
        raise AssertionError("a host array was copied to the device")
    monkeypatch.setattr(cuda, "to_device", no_new_array)   # (no status array per launch)
    for _ in range(3):
        ad.launch(m.gather, 4, inputs=[good, x], outputs=[out])
    ad.launch(m.gather, 4, inputs=[good, x], outputs=[out], adjoint=True,
              adj_inputs=[None, None], adj_outputs=[out.grad])
    with ad.Tape():
        ad.launch(m.gather, 4, inputs=[good, x], outputs=[out])
    assert copies == [] and syncs == [] and pending.pending() == 5
    values = out.numpy()
    assert len(copies) == 2 and copies[1] == (4,) and pending.pending() == 0
    np.testing.assert_array_equal(values, np.array([3.0, 2.0, 1.0, 0.0]) ** 2)
    out.numpy()                         # nothing pending: the array's copy alone
    assert len(copies) == 3 and syncs == []


@needs_cuda
def test_an_adjoint_launch_does_not_wait_either(kernel_module):
    m = kernel_module(KERNELS)
    x, idx, _ = _arrays()
    out = ad.zeros(4, requires_grad=True, device="cuda")
    ad.launch(m.gather, 4, inputs=[idx, x], outputs=[out], adjoint=True)
    assert pending.pending() == 1
    with pytest.raises(ad.BoundsError, match="gather_backward"):
        x.grad.numpy()


@needs_cuda
def test_a_copy_to_the_host_reports_the_fault(kernel_module):
    """A copy into a CPU array (adjoint's own device-to-host copy) raises it too."""
    m = kernel_module(KERNELS)
    x, idx, _ = _arrays()
    out = ad.zeros(4, device="cuda")
    ad.launch(m.gather, 4, inputs=[idx, x], outputs=[out])
    host = ad.zeros(4, device="cpu")
    with pytest.raises(ad.BoundsError, match="found by a copy of a device array to the host"):
        host.assign(out)
    assert not host.numpy().any()


@needs_cuda
def test_a_full_pool_checks_at_the_next_launch(kernel_module):
    """With every status row pending, the next checked launch checks first (and so raises
    an earlier launch's fault there)."""
    m = kernel_module(KERNELS)
    x, idx, good = _arrays()
    out = ad.zeros(4, device="cuda")
    ad.launch(m.gather, 4, inputs=[good, x], outputs=[out])
    ad.synchronize()
    held = []
    try:
        while len(pending._free) > 1:       # (taken, never launched nor registered)
            held.append(pending.take()[0])
        ad.launch(m.gather, 4, inputs=[idx, x], outputs=[out])
        bad = _this_line() - 1
        assert not pending._free and pending.pending() == 1
        with pytest.raises(ad.BoundsError) as err:
            ad.launch(m.gather, 4, inputs=[good, x], outputs=[out])
        assert f"{__file__}:{bad}" in str(err.value)
        assert f"found by a CUDA launch ({pending.SLOTS} checked launches were pending)" \
            in str(err.value)
        ad.launch(m.gather, 4, inputs=[good, x], outputs=[out])   # a row is free again
        np.testing.assert_array_equal(out.numpy(), np.array([3.0, 2.0, 1.0, 0.0]) ** 2)
    finally:
        for k in held:
            pending.discard(k)
    assert len(pending._free) == pending.SLOTS


@needs_cuda
@pytest.mark.levels_skip("its threads run outside the rerun's backend scope (contextvars), "
                         "and read arrays in any order")
def test_a_fault_on_another_thread_is_reported_once(kernel_module):
    """One registry per process, as the GPU has one launch order: a fault launched on
    one thread is raised by the first check on any thread, and only once."""
    m = kernel_module(KERNELS)
    x, idx, good = _arrays()
    m.gather.spec_for("cuda")
    seen = []

    def work(bad):
        try:
            out = ad.zeros(4, device="cuda")
            for _ in range(3):
                ad.launch(m.gather, 4, inputs=[idx if bad else good, x], outputs=[out])
            out.numpy()
            seen.append("clean")
        except ad.BoundsError as exc:
            seen.append(exc.index)
    threads = [threading.Thread(target=work, args=(k == 0,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ad.synchronize()
    assert 9 in seen and len(seen) == 3 and set(seen) <= {9, "clean"}, seen
    assert pending.pending() == 0


@pytest.mark.parametrize("cpu", ["python", "numba"])
def test_cpu_backends_raise_at_the_launch(kernel_module, cpu):
    m = kernel_module(KERNELS)
    with ad.backend_scope(cpu):
        x, idx, _ = _arrays("cpu")
        with pytest.raises(ad.BoundsError, match="kernel 'gather'") as err:
            ad.launch(m.gather, 4, inputs=[idx, x], outputs=[ad.zeros(4, device="cpu")])
        assert "found by" not in str(err.value)
        assert pending.pending() == 0
