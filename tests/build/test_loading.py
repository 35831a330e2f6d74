"""Loading kernels: many threads and processes making a first launch at once, and a
cache folder that repairs itself (truncated or edited modules, damaged numba caches).

Each test uses its own fresh cache folder, so the first launch really generates,
writes and imports the module."""
import glob
import os
import subprocess
import sys
import textwrap
import threading
import traceback

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_cuda, backend_numba

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_THREADS = 6

KERNEL = '''
@ad.kernel
def wave(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i] * x[i] * 3.0 + math.sin(x[i])
'''


def expected(x):
    """y and dy/dx of ``wave``, by hand."""
    return 3.0 * x * x + np.sin(x), 6.0 * x + np.cos(x)


@pytest.fixture
def busy_switching():
    """Threads switch every few microseconds, so races show up on every run."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("ADJOINT_CACHE_DIR", str(folder))
    return folder


def device_for(backend):
    return "cuda" if backend == "cuda" else "cpu"


def run_wave(kernel, x, device):
    """Forward and an explicit adjoint launch (no tape: tapes are per-thread state)."""
    xa = ad.array(x, device=device)
    y = ad.zeros(len(x), device=device)
    ad.launch(kernel, len(x), inputs=[xa], outputs=[y])
    gx = ad.zeros(len(x), device=device)
    ad.launch(kernel, len(x), inputs=[xa], outputs=[y], adjoint=True,
              adj_inputs=[gx], adj_outputs=[ad.ones(len(x), device=device)])
    return y.numpy(), gx.numpy()


def check_wave(kernel, x, device):
    y, gx = run_wave(kernel, x, device)
    want_y, want_g = expected(x)
    np.testing.assert_allclose(y, want_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx, want_g, rtol=1e-12, atol=1e-12)


def forget_loaded(kernel):
    """What a new process sees: nothing of the kernel's modules is imported yet."""
    for module in kernel.modules.values():
        sys.modules.pop(module.__name__, None)
    kernel.modules.clear()
    kernel._specs.clear()


def first_launch_at_once(kernel, device, errors):
    """``N_THREADS`` threads make ``kernel``'s first launch at once; the specs they got."""
    # numba's simulator runs one kernel at a time: there the threads load at once and
    # take turns to launch (a real GPU, NUMBA_ENABLE_CUDASIM=0, launches at once too)
    turns = threading.Lock() if device == "cuda" and backend_cuda.simulated() else None
    start = threading.Barrier(N_THREADS)
    specs = []

    def work(k):
        try:
            x = np.linspace(-1.0, 1.0, 7) + k
            start.wait()
            specs.append(kernel.spec_for(device))
            if turns is None:
                check_wave(kernel, x, device)
            else:
                with turns:
                    check_wave(kernel, x, device)
        except BaseException as exc:  # noqa: BLE001 - reported by the test, with its thread
            where = "".join(traceback.format_tb(exc.__traceback__)[-4:])
            errors.append(f"thread {k}: {exc!r}\n{where}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return specs


@pytest.mark.levels_skip("threads read arrays in any order (tests/levels.py compares in order)")
def test_threads_make_a_first_launch_at_once(backend, kernel_module, fresh_cache,
                                              busy_switching):
    device = device_for(backend)
    rounds = 2 if backend == "numba" else 5      # each round: a new kernel, new module
    for r in range(rounds):
        errors = []
        specs = first_launch_at_once(kernel_module(KERNEL).wave, device, errors)
        assert errors == [], f"round {r}"
        assert len(specs) == N_THREADS and all(s is specs[0] for s in specs)
    assert len(glob.glob(str(fresh_cache / "adjoint_gen_wave_*.py"))) == rounds
    assert glob.glob(str(fresh_cache / "*.tmp")) == []


class FakeDeviceArray:
    """What runtime/watch.py reads of a real numba device array (its device pointer,
    shape and dtype): the simulator's arrays are host memory, named another way. (The
    CUDA device of runtime/devices.py holds what has numba's two copy methods.)"""
    copy_to_host = copy_to_device = None
    _next = [1 << 20]
    _lock = threading.Lock()

    def __init__(self, n):
        self.shape, self.dtype = (n,), np.dtype(np.float64)
        with self._lock:
            ptr = self._next[0]
            self._next[0] += 8 * n + 256
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": self.shape,
                                         "typestr": "<f8", "version": 3}


def test_threads_zero_and_write_device_memory_at_once(busy_switching):
    """Threads allocating zeroed device arrays (``watch.mark_clean``) while others write
    or hand out theirs (``before_write``, ``mark_dirty``: they forget the clean device
    spans they overlap) share watch.py's tables. On a GPU, where every thread's first
    launch does both, that was a "dictionary changed size during iteration"; the
    simulator's host-memory keys never reach that table, hence the stand-in arrays."""
    from adjoint.runtime import watch
    start, errors = threading.Barrier(N_THREADS), []

    def work(k):
        try:
            start.wait()
            for _ in range(2000):
                a = FakeDeviceArray(16)
                watch.mark_clean(a)
                assert watch.is_clean(a)
                watch.before_write(a, "a launch")
                assert not watch.is_clean(a)
                watch.mark_clean(a)
                watch.mark_dirty(a)
                assert not watch.is_clean(a)
        except BaseException as exc:  # noqa: BLE001 - reported by the test, with its thread
            errors.append(f"thread {k}: {exc!r}\n{traceback.format_exc()}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


PROCESS = '''
import sys, threading
import numpy as np
import adjoint as ad
sys.setswitchinterval(1e-6)
sys.path.insert(0, {folder!r})
import shared_kernels as m
if {backend!r} != "python":
    ad.use_backend({backend!r})
device = "cuda" if {backend!r} == "cuda" else "cpu"
start, errors = threading.Barrier(4), []

def work(k):
    try:
        start.wait()
        m.wave.spec_for(device)
    except BaseException as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
assert not errors, errors
x = ad.array(np.linspace(-1.0, 1.0, 5), device=device)
y = ad.zeros(5, device=device)
ad.launch(m.wave, 5, inputs=[x], outputs=[y])
print("Y", repr(y.numpy().tolist()))
'''


def test_processes_with_threads_share_one_fresh_cache(backend, tmp_path, fresh_cache):
    (tmp_path / "shared_kernels.py").write_text("import math\nimport adjoint as ad\n" + KERNEL)
    env = dict(os.environ, PYTHONPATH=ROOT, ADJOINT_JIT="0" if backend == "python" else "1")
    code = textwrap.dedent(PROCESS.format(folder=str(tmp_path), backend=backend))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    want = expected(np.linspace(-1.0, 1.0, 5))[0]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        y = eval(out.split("Y", 1)[1])
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    assert len(glob.glob(str(fresh_cache / "adjoint_gen_wave_*.py"))) == 1
    assert glob.glob(str(fresh_cache / "*.tmp")) == []


def cached_module(kernel, backend):
    return kernel.modules[backend].__file__


def test_a_truncated_cached_module_is_regenerated(backend, kernel_module, fresh_cache):
    m = kernel_module(KERNEL)
    device, x = device_for(backend), np.linspace(-2.0, 2.0, 9)
    check_wave(m.wave, x, device)
    path = cached_module(m.wave, backend)
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(text[:len(text) // 2])
    forget_loaded(m.wave)
    check_wave(m.wave, x, device)
    with open(path) as fh:
        assert fh.read() == text


def test_a_hand_edited_cached_module_is_regenerated(backend, kernel_module, fresh_cache):
    m = kernel_module(KERNEL)
    device, x = device_for(backend), np.linspace(-2.0, 2.0, 9)
    check_wave(m.wave, x, device)
    path = cached_module(m.wave, backend)
    with open(path) as fh:
        text = fh.read()
    assert text.count("3.0") >= 1
    with open(path, "w") as fh:
        fh.write(text.replace("3.0", "4.0"))    # same length: only the text tells
    later = os.stat(path).st_mtime + 5         # as an edit made later would be
    os.utime(path, (later, later))
    forget_loaded(m.wave)
    check_wave(m.wave, x, device)
    with open(path) as fh:
        assert fh.read() == text


def numba_cache_files(folder, suffix):
    return sorted(glob.glob(str(folder / "__pycache__" / f"adjoint_gen_wave_*.{suffix}")))


@pytest.mark.parametrize("damage,suffix", [("truncate", "nbi"), ("truncate", "nbc"),
                                           ("garble", "nbi"), ("empty", "nbc")])
def test_a_damaged_numba_cache_is_cleared_and_recompiled(kernel_module, fresh_cache, damage,
                                                         suffix):
    m = kernel_module(KERNEL)
    x = np.linspace(-2.0, 2.0, 9)
    with ad.backend_scope("numba"):
        check_wave(m.wave, x, "cpu")
        files = numba_cache_files(fresh_cache, suffix)
        assert files, "numba wrote no cache files"
        for f in files:
            with open(f, "rb") as fh:
                data = fh.read()
            data = {"truncate": data[:len(data) // 2],
                    "garble": data[:40] + bytes(range(200, 256)) * 4 + data[40:],
                    "empty": b""}[damage]
            with open(f, "wb") as fh:
                fh.write(data)
        forget_loaded(m.wave)
        check_wave(m.wave, x, "cpu")
    for f in numba_cache_files(fresh_cache, "nbi"):   # numba wrote whole ones again
        with open(f, "rb") as fh:
            assert len(fh.read()) > 40


def _cache_counts(kernel):
    """numba's (hits, misses) of the on-disk cache for ``kernel``'s numba functions."""
    hits = misses = 0
    for module in kernel.modules.values():
        for value in vars(module).values():
            stats = getattr(value, "stats", None)      # numba's dispatchers
            if stats is not None and hasattr(stats, "cache_hits"):
                hits += sum(stats.cache_hits.values())
                misses += sum(stats.cache_misses.values())
    return hits, misses


def test_a_changed_runtime_is_compiled_again_not_loaded_from_numba_cache(
        kernel_module, fresh_cache, monkeypatch):
    """numba's cache of a generated module has the runtime helpers it calls compiled in
    (add_chunks, block_count, signed); a runtime whose source changed must not run the
    old ones from the cache. The key holds a hash of the runtime's source."""
    m = kernel_module(KERNEL)
    x = np.linspace(-2.0, 2.0, 9)
    with ad.backend_scope("numba"):
        check_wave(m.wave, x, "cpu")
        forget_loaded(m.wave)
        check_wave(m.wave, x, "cpu")          # the same runtime: numba's cache is used
        hits, misses = _cache_counts(m.wave)
        assert hits > 0 and misses == 0
        monkeypatch.setattr(backend_numba, "RUNTIME_FINGERPRINT", "a changed runtime")
        forget_loaded(m.wave)
        check_wave(m.wave, x, "cpu")          # a changed runtime: compiled again
        hits, misses = _cache_counts(m.wave)
        assert hits == 0 and misses > 0


REPAIR_RUN = '''
import sys
import numpy as np
import adjoint as ad
sys.path.insert(0, {folder!r})
import shared_kernels as m
x = ad.array(np.linspace(-1.0, 1.0, 5))
y = ad.zeros(5)
ad.launch(m.wave, 5, inputs=[x], outputs=[y])
print("Y", repr(y.numpy().tolist()))
'''


def test_every_later_run_works_after_the_cache_was_damaged(tmp_path, fresh_cache):
    """The user's story: a crash left truncated files; the next runs just work."""
    (tmp_path / "shared_kernels.py").write_text("import math\nimport adjoint as ad\n" + KERNEL)
    env = dict(os.environ, PYTHONPATH=ROOT, ADJOINT_JIT="1")
    code = textwrap.dedent(REPAIR_RUN.format(folder=str(tmp_path)))
    want = expected(np.linspace(-1.0, 1.0, 5))[0]

    def run():
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        np.testing.assert_allclose(eval(r.stdout.split("Y", 1)[1]), want, rtol=1e-12)
    run()
    damaged = numba_cache_files(fresh_cache, "nbi") + \
        glob.glob(str(fresh_cache / "adjoint_gen_wave_*.py"))
    assert len(damaged) >= 2
    for f in damaged:
        with open(f, "rb") as fh:
            data = fh.read()
        with open(f, "wb") as fh:
            fh.write(data[:len(data) // 3])
    run()
    run()
