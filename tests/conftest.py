"""Shared fixtures: every gradient test runs once per backend.

``backend`` switches adjoint's backend for one test: pure Python, numba CPU,
and CUDA (numba's simulator unless NUMBA_ENABLE_CUDASIM=0), where new
arrays default to device="cuda".
``kernel_module`` writes kernel source to a real file and imports it, because
the transformer reads source files (as it does for users).
Under pytest-xdist (``-n auto``) every worker writes generated modules to one
cache folder the controller chose, and the controller alone runs the PTX check.
"""
import gc
import importlib.util
import itertools
import os
import re
import subprocess
import sys
import textwrap

# The CUDA backend runs in numba's simulator unless the caller chose otherwise
# (NUMBA_ENABLE_CUDASIM=0 on a machine with a GPU runs the same tests for real).
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# Every launch on the Python backend checks its parallel plan for races (and takes the
# parallel path whatever its size): see adjoint/runtime/racecheck.py. ADJOINT_RACECHECK=0
# turns it off. Numba and CUDA launches are not affected.
os.environ.setdefault("ADJOINT_RACECHECK", "1")

import numpy as np
import pytest

import adjoint as ad
# every test's kernels again with no optimization pass, compared (tests/levels.py)
from tests.levels import pytest_configure, pytest_runtest_call  # noqa: F401, E402 - hooks

BACKENDS = ["python", "numba", "cuda"]
_counter = itertools.count()


def run_ptx(*args, cwd=None):
    """``python -m adjoint.ptx ARGS`` in a process without numba's simulator."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    return subprocess.run([sys.executable, "-m", "adjoint.ptx", *map(str, args)], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=900)


def _ptx_check(folder, processes=1):
    """``(returncode, text)`` of ``python -m adjoint.ptx`` over the CUDA modules in
    ``folder``, split over ``processes`` processes run at once; None when there are none.
    Return code: 1 if any process found a failure, else 0 if all passed, else the first
    other code (no NVVM here: skipped)."""
    from adjoint.ptx import cuda_modules, distinct
    modules, repeats = distinct(cuda_modules([folder]))
    if not modules:
        return None
    chunks = [modules[k::processes] for k in range(min(processes, len(modules)))]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    procs = [subprocess.Popen([sys.executable, "-m", "adjoint.ptx", *chunk], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for chunk in chunks]
    try:
        outs = [proc.communicate(timeout=1800)[0].strip() for proc in procs]
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        return 1, "python -m adjoint.ptx did not finish in 30 minutes"
    codes = [proc.returncode for proc in procs]
    code = 1 if 1 in codes else 0 if set(codes) == {0} else next(c for c in codes if c)
    tallies = [_PTX_TALLY.search(out) for out in outs]
    note = [f"({repeats} more module{'s' if repeats > 1 else ''} the same code as one of "
            "these but for comments and source names: not compiled again)"] if repeats else []
    if len(outs) == 1 or not all(tallies):
        return code, "\n".join(outs + note)
    lines = [line for out in outs for line in out.splitlines() if not _PTX_TALLY.match(line)]
    passed, total = (sum(int(t.group(k)) for t in tallies) for k in (1, 2))
    lines.append(f"{passed} of {total} CUDA grid kernels compiled to PTX for compute "
                 f"capability {tallies[0].group(3)} ({len(outs)} processes)")
    lines += note
    return code, "\n".join(lines)


_PTX_TALLY = re.compile(r"^(\d+) of (\d+) CUDA grid kernels compiled to PTX for compute "
                        r"capability (\S+)$", re.MULTILINE)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist's controller, once per worker: every worker stores its generated
    modules in one cache folder (the cache is safe across processes, and numba's cache
    files of a module one worker compiled serve the others), which the PTX check reads
    once at the end."""
    config = node.config
    if getattr(config, "_adjoint_shared_cache", None) is None:
        config._adjoint_shared_cache = str(config._tmp_path_factory.mktemp("adjoint-cache"))
        config._adjoint_workers = 0
    config._adjoint_workers += 1
    node.workerinput["adjoint_cache_dir"] = config._adjoint_shared_cache


def pytest_sessionfinish(session, exitstatus):
    """The simulator runs generated CUDA kernels as Python; numba.cuda must also accept
    them. Compile every CUDA module this run generated to PTX (needs NVVM, not a GPU;
    skipped with a note where there is none, or with ADJOINT_TEST_PTX=0). Under
    pytest-xdist the controller checks the workers' shared cache folder, as many
    processes at once as there were workers; a worker checks nothing, nor does a run
    stopped with Ctrl-C."""
    config = session.config
    config._adjoint_ptx = None
    if (os.environ.get("ADJOINT_TEST_PTX", "1") == "0" or hasattr(config, "workerinput")
            or exitstatus == pytest.ExitCode.INTERRUPTED):
        return
    shared = getattr(config, "_adjoint_shared_cache", None)
    folder = shared or (_session_cache[0] if _session_cache else None)
    if folder is None:
        return
    result = _ptx_check(folder, config._adjoint_workers if shared else 1)
    if result is None:
        return
    config._adjoint_ptx = result
    if result[0] == 1 and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, config):
    result = getattr(config, "_adjoint_ptx", None)
    if result is None:
        return
    code, text = result
    title = {0: "PTX check passed", 1: "PTX check FAILED"}.get(code, "PTX check skipped")
    terminalreporter.section(title)
    terminalreporter.write_line(text)


def pytest_collection_modifyitems(items):
    """A variable numba would share between parallel workers is a race: fail, never warn.
    (Here, not in setup.cfg, so numba is imported only after the simulator is chosen.)"""
    mark = pytest.mark.filterwarnings("error::numba.core.errors.NumbaParallelSafetyWarning")
    for item in items:
        item.add_marker(mark)


@pytest.fixture(params=BACKENDS)
def backend(request):
    with ad.backend_scope(request.param):
        yield request.param


@pytest.fixture
def no_gc():
    """The cycle collector off for one test, which counts what is still watched or kept
    and so must free what it drops by reference counting alone (``del``), with no
    collection of earlier tests' garbage changing the count under it. (These tests
    called ``gc.collect()``: late in a worker's run each call took 25-55 s, a full
    collection of everything the worker's earlier tests had left.)"""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@pytest.fixture(autouse=True)
def _no_fault_left_pending():
    """A CUDA launch does not wait for its kernel: a fault is raised where the host next
    waits (runtime/pending.py). One still pending when a test ends would be raised in
    whichever test reads a device array next; it fails the test that made it instead."""
    yield
    from adjoint.runtime import pending
    if pending.pending():
        try:
            pending.check("the end of the test (tests/conftest.py)")
        except ad.AdjointError as exc:
            pytest.fail(f"a CUDA launch of this test faulted and nothing reported it: {exc}",
                        pytrace=False)


@pytest.fixture
def kernel_module(tmp_path):
    """``kernel_module(source) -> module``: import kernels written as source text."""
    def load(source):
        name = f"adjoint_test_kernels_{next(_counter)}"
        path = tmp_path / f"{name}.py"
        path.write_text("import math\nimport numpy as np\nimport adjoint as ad\n\n" +
                        textwrap.dedent(source))
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    return load


_session_cache = []


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(request, tmp_path_factory):
    """Generated modules of the test run go to a private cache directory (under
    pytest-xdist, one the controller chose for all its workers)."""
    old = os.environ.get("ADJOINT_CACHE_DIR")
    folder = getattr(request.config, "workerinput", {}).get("adjoint_cache_dir")
    os.environ["ADJOINT_CACHE_DIR"] = folder or str(tmp_path_factory.mktemp("adjoint-cache"))
    _session_cache.append(os.environ["ADJOINT_CACHE_DIR"])
    yield
    if old is None:
        os.environ.pop("ADJOINT_CACHE_DIR", None)
    else:
        os.environ["ADJOINT_CACHE_DIR"] = old


def central_fd(f, x, eps=1e-6):
    """Central finite-difference gradient of scalar ``f`` at float64 ``x``."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    flat = x.reshape(-1)
    gf = g.reshape(-1)
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + eps
        fp = f(x.copy())
        flat[k] = old - eps
        fm = f(x.copy())
        flat[k] = old
        gf[k] = (fp - fm) / (2 * eps)
    return g
