"""The backend, the default device and race checking are context-local (runtime/jit.py).

Two threads launch on two backends at once, in lockstep, each seeing its own; a
``backend_scope`` (or ``racecheck``, ``wp.ScopedDevice``) in one thread or asyncio task
is not seen by another; ``use_backend`` sets the process default, which threads outside
a scope and new threads see; a ``concurrent.futures`` worker sees the submitter's scope
only when the function is submitted through ``contextvars.copy_context().run``.
"""
import asyncio
import contextvars
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp
from adjoint.runtime import backend_cuda, backend_numba, backend_python
from adjoint.runtime.racecheck import enabled, racecheck

pytestmark = pytest.mark.levels_skip("threads read arrays in any order, and each thread "
                                     "chooses its backend itself (tests/levels.py reruns "
                                     "under a python scope)")

SQUARES = '''
@ad.kernel
def scaled_square(s: float, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = s * x[i] * x[i]
'''

TIMEOUT = 600       # seconds a thread may wait for the other (a first numba compile)


def run_threads(*targets, barrier=None):
    """Run each target on its own thread, all at once; raise the first error any raised
    (after breaking ``barrier``, so that the others stop waiting)."""
    errors = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                errors.append(exc)
                if barrier is not None:
                    barrier.abort()
        return run
    threads = [threading.Thread(target=guarded(fn)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if errors:
        raise errors[0]


def lockstep(parties=2):
    return threading.Barrier(parties, timeout=TIMEOUT)


def in_new_thread(fn):
    """``fn()`` called on a thread started now."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(TIMEOUT)
    return out[0]


def process_default():
    return in_new_thread(ad.backend_name)


def other_cpu(name):
    return "python" if name == "numba" else "numba"


class CallsOf:
    """The Python functions of kernel ``prefix``'s generated code called on this thread
    while it is active (``sys.setprofile`` is per thread): the python backend runs them as
    Python, numba runs compiled code."""

    def __init__(self, prefix):
        self.prefix, self.names = prefix + "_", []

    def __enter__(self):
        def profile(frame, event, arg):
            if event == "call" and frame.f_code.co_name.startswith(self.prefix):
                self.names.append(frame.f_code.co_name)
        sys.setprofile(profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


def test_two_threads_launch_on_two_backends_at_once(kernel_module):
    k = kernel_module(SQUARES).scaled_square
    rounds, b = 12, lockstep()
    seen = {}

    def worker(name, s):
        def run():
            with ad.backend_scope(name), CallsOf("scaled_square") as calls:
                for r in range(rounds):
                    b.wait()                                  # both launch at once
                    assert ad.backend_name() == name
                    assert ad.zeros(1).device == "cpu"
                    xs = np.linspace(-1.0, 1.0, 16) + r
                    x = ad.array(xs, requires_grad=True)
                    out = ad.zeros(16, requires_grad=True)
                    with ad.Tape() as tape:
                        ad.launch(k, dim=16, inputs=[s, x], outputs=[out])
                    b.wait()                                  # both backward at once
                    tape.backward(grads={out: np.ones(16)})
                    np.testing.assert_allclose(out.numpy(), s * xs * xs, rtol=1e-14)
                    np.testing.assert_allclose(x.grad.numpy(), 2.0 * s * xs, rtol=1e-14)
                    assert ad.backend_name() == name
            seen[name] = calls.names
        return run
    run_threads(worker("python", 2.0), worker("numba", 3.0), barrier=b)
    # the python thread ran the generated thread functions as Python, every round; the
    # numba thread ran none of them as Python (its compiled grids ran them)
    assert sum(n.endswith("_thread") for n in seen["python"]) >= 2 * rounds
    assert not any(n.endswith("_thread") for n in seen["numba"])
    # each backend's module was imported on its own thread and bound its own helpers
    assert sorted(m.rt.__name__ for m in k.modules.values()) == [
        backend_numba.__name__, backend_python.__name__]


@pytest.mark.skipif(not backend_cuda.available(), reason="needs a GPU or numba's simulator")
def test_a_cuda_thread_and_a_cpu_thread_have_their_own_default_device(kernel_module):
    k = kernel_module(SQUARES).scaled_square
    b = lockstep()

    def worker(name):
        def run():
            device = "cuda" if name == "cuda" else "cpu"
            with ad.backend_scope(name):
                for r in range(3):
                    b.wait()
                    x = ad.array(np.arange(4.0) + r)        # on the default device here
                    out = ad.zeros(4)
                    assert (x.device, out.device) == (device, device)
                    ad.launch(k, dim=4, inputs=[0.5, x], outputs=[out])
                    np.testing.assert_allclose(out.numpy(), 0.5 * (np.arange(4.0) + r) ** 2)
                    assert wp.get_device().alias == ("cuda:0" if device == "cuda" else "cpu")
        return run
    run_threads(worker("cuda"), worker(process_default()), barrier=b)


def test_a_scope_in_one_thread_is_not_seen_in_another():
    default = process_default()
    other = other_cpu(default)
    b = lockstep()
    seen = []

    def scoped():
        with ad.backend_scope(other):
            b.wait()                        # the scope is open ...
            b.wait()                        # ... while the other thread looks
            seen.append(("scoped", ad.backend_name()))
        seen.append(("after", ad.backend_name()))

    def plain():
        b.wait()
        seen.append(("plain", ad.backend_name()))
        b.wait()
    run_threads(scoped, plain, barrier=b)
    assert sorted(seen) == [("after", default), ("plain", default), ("scoped", other)]


def test_a_thread_started_inside_a_scope_starts_from_the_process_default():
    default = process_default()
    with ad.backend_scope(other_cpu(default)):
        assert ad.backend_name() == other_cpu(default)
        assert in_new_thread(ad.backend_name) == default


def test_a_pool_worker_sees_the_scope_only_through_copy_context():
    default = process_default()
    other = other_cpu(default)
    with ThreadPoolExecutor(1) as pool, ad.backend_scope(other):
        assert pool.submit(ad.backend_name).result() == default
        ctx = contextvars.copy_context()
        assert pool.submit(ctx.run, ad.backend_name).result() == other
        assert pool.submit(ad.backend_name).result() == default    # (nothing stuck to it)


def test_asyncio_tasks_each_see_their_own_scope():
    log = []

    async def task(name):
        with ad.backend_scope(name):
            for _ in range(5):
                log.append((name, ad.backend_name()))
                await asyncio.sleep(0)          # the other task runs here

    async def child():
        return ad.backend_name()

    async def main():
        await asyncio.gather(task("python"), task("numba"))
        with ad.backend_scope("python"):
            inherited = asyncio.create_task(child())    # copies the context now
        with ad.backend_scope("numba"):
            return await inherited

    assert asyncio.run(main()) == "python"
    assert all(name == seen for name, seen in log)
    assert [name for name, _ in log[:4]] == ["python", "numba", "python", "numba"]


def test_use_backend_sets_the_process_default_and_a_scope_overrides_it():
    default = process_default()
    other = other_cpu(default)
    b = lockstep(3)
    seen = {}

    def scoped():
        with ad.backend_scope(default):
            b.wait()
            b.wait()                            # the main thread switched meanwhile
            seen["scoped"] = ad.backend_name()

    def plain():
        b.wait()
        b.wait()
        seen["plain"] = ad.backend_name()

    threads = [threading.Thread(target=fn) for fn in (scoped, plain)]
    for t in threads:
        t.start()
    try:
        b.wait()
        ad.use_backend(other)
        b.wait()
        for t in threads:
            t.join(TIMEOUT)
        assert seen == {"scoped": default, "plain": other}
        assert ad.backend_name() == other and process_default() == other
        # inside a scope: the scope's backend is replaced too; leaving it restores what
        # the context had before it (an outer scope's, else the new default)
        with ad.backend_scope(other):
            with ad.backend_scope(other):
                ad.use_backend(default)
                assert ad.backend_name() == default
            assert ad.backend_name() == other
        assert ad.backend_name() == default and process_default() == default
    finally:
        b.abort()                               # (a thread still waiting stops)
        ad.use_backend(default)
    assert ad.backend_name() == default
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        ad.use_backend("tpu")
    with pytest.raises(ValueError, match="unknown backend"):
        with ad.backend_scope("tpu"):
            pass
    assert ad.backend_name() == default


def test_racecheck_in_one_thread_is_not_seen_in_another():
    default = in_new_thread(enabled)
    b = lockstep()
    seen = []

    def checking():
        with racecheck(not default):
            b.wait()
            b.wait()
            seen.append(("checking", enabled()))

    def plain():
        b.wait()
        seen.append(("plain", enabled()))
        b.wait()
    run_threads(checking, plain, barrier=b)
    assert sorted(seen) == [("checking", not default), ("plain", default)]


def test_warp_scoped_device_is_a_scope_of_its_thread():
    default = process_default()
    b = lockstep()
    seen = []
    target = "cuda" if backend_cuda.available() else "cpu"

    def scoped():
        with wp.ScopedDevice(target) as device:
            b.wait()
            b.wait()
            seen.append(("scoped", str(device), ad.backend_name()))
        seen.append(("after", str(wp.get_device()), ad.backend_name()))

    def plain():
        b.wait()
        seen.append(("plain", str(wp.get_device()), ad.backend_name()))
        b.wait()
    run_threads(scoped, plain, barrier=b)
    inside = "cuda" if target == "cuda" else default
    assert sorted(seen) == [("after", "cpu", default), ("plain", "cpu", default),
                            ("scoped", "cuda:0" if target == "cuda" else "cpu", inside)]
    assert process_default() == default
