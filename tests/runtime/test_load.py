"""Fewer threads on a busy machine (runtime/load.py, issue 39): numba's thread count
follows the cores other runnable work leaves, never changes a result, leaves a count
the user set alone, and is off with ``ad.config.load_governor = False``."""
import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import config, load

numba = pytest.importorskip("numba")

SOURCE = """
@ad.kernel
def total(x: ad.array(dtype=ad.float64), out: ad.array(dtype=ad.float64)):
    i = ad.tid()
    ad.atomic_add(out, 0, ad.sin(x[i]) * x[i])
"""


@pytest.fixture
def governed(monkeypatch):
    """The governor of a fresh thread state, reading ``seen[0]`` as the load."""
    seen = [0]
    monkeypatch.setattr(load, "_local", type(load._local)())
    monkeypatch.setattr(load, "others", lambda: seen[0])
    monkeypatch.setattr(load, "cores", lambda: 2)
    monkeypatch.setattr(load, "INTERVAL", 0.0)
    monkeypatch.setattr(config, "load_governor", True)
    most = numba.config.NUMBA_NUM_THREADS
    before = numba.get_num_threads()
    numba.set_num_threads(most)
    yield seen, most
    numba.set_num_threads(before)


def test_threads_for_the_cores_left():
    assert load.threads_for(0, 8) == min(8, load.cores())
    assert load.threads_for(load.cores() + 3, 8) == 1
    assert load.threads_for(0.4, 1) == 1


def test_busy_machine_runs_on_fewer_threads(governed):
    seen, most = governed
    if most < 2:
        pytest.skip("numba runs one thread here")
    seen[0] = 1                 # one core busy elsewhere: one thread
    for _ in range(3):
        load.govern()
    assert numba.get_num_threads() == 1
    seen[0] = 0                 # quiet again: back to every core (the mean decays)
    for _ in range(8):
        load.govern()
    assert numba.get_num_threads() == min(2, most)


def test_a_count_the_user_set_is_theirs(governed):
    seen, most = governed
    load.govern()
    numba.set_num_threads(1)
    seen[0] = 0
    for _ in range(5):
        load.govern()
    assert numba.get_num_threads() == 1


def test_off(governed, monkeypatch):
    seen, most = governed
    monkeypatch.setattr(config, "load_governor", False)
    seen[0] = 5
    for _ in range(3):
        load.govern()
    assert numba.get_num_threads() == most


def test_results_do_not_depend_on_the_thread_count(kernel_module, monkeypatch):
    """A privatized sum (chunks fixed by NUMBA_NUM_THREADS) and its gradient, bit for bit
    on one thread and on all of them."""
    with ad.backend_scope("numba"):
        m = kernel_module(SOURCE)
        x = np.random.default_rng(0).uniform(-1, 1, 100_000)
        monkeypatch.setattr(config, "load_governor", False)
        got = []
        for threads in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(threads)
            xa, out = ad.array(x, requires_grad=True), ad.zeros(1, dtype=ad.float64,
                                                               requires_grad=True)
            with ad.Tape() as tape:
                ad.launch(m.total, x.size, inputs=[xa], outputs=[out])
            tape.backward(grads={out: np.array([0.5])})
            got.append((out.numpy().copy(), xa.grad.numpy().copy()))
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        assert got[0][0].tobytes() == got[1][0].tobytes()
        assert got[0][1].tobytes() == got[1][1].tobytes()
        np.testing.assert_allclose(got[0][0], [np.sum(np.sin(x) * x)], rtol=1e-12)


def test_others_reads_the_process_s_threads_only_when_the_machine_runs_more(monkeypatch):
    """``others()``: /proc/loadavg's running tasks less this process's running threads;
    where the machine runs one task (the caller) that is 0 without reading the threads."""
    running = [b"1"]
    own = []
    monkeypatch.setattr(load, "_read", lambda path: b"0.50 0.40 0.30 %s/345 678\n" % running[0])
    monkeypatch.setattr(load, "_own_running", lambda: own.append(1) or 2)
    assert load.others() == 0 and not own
    running[0] = b"5"
    assert load.others() == 3 and own
    running[0] = b"x"
    assert load.others() is None


@pytest.mark.skipif(not __import__("os").path.exists("/proc/loadavg"), reason="not Linux")
def test_others_on_this_machine():
    seen = load.others()
    assert isinstance(seen, int) and seen >= 0
    assert load._own_running() >= 1
