"""Shared fixtures: every gradient test runs once per backend.

``backend`` switches adjoint's backend for one test: pure Python, numba CPU,
and CUDA (numba's simulator unless NUMBA_ENABLE_CUDASIM=0), where new
arrays default to device="cuda".
``kernel_module`` writes kernel source to a real file and imports it, because
the transformer reads source files (as it does for users).
"""
import importlib.util
import itertools
import os
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

BACKENDS = ["python", "numba", "cuda"]
_counter = itertools.count()


def run_ptx(*args, cwd=None):
    """``python -m adjoint.ptx ARGS`` in a process without numba's simulator."""
    import subprocess
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    return subprocess.run([sys.executable, "-m", "adjoint.ptx", *map(str, args)], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=900)


def pytest_sessionfinish(session, exitstatus):
    """The simulator runs generated CUDA kernels as Python; numba.cuda must also accept
    them. Compile every CUDA module this run generated to PTX (needs NVVM, not a GPU;
    skipped with a note where there is none, or with ADJOINT_TEST_PTX=0)."""
    session.config._adjoint_ptx = None
    if os.environ.get("ADJOINT_TEST_PTX", "1") == "0" or not _session_cache:
        return
    from adjoint.ptx import cuda_modules
    if not cuda_modules([_session_cache[0]]):
        return
    proc = run_ptx(_session_cache[0])
    text = (proc.stdout + proc.stderr).strip()
    session.config._adjoint_ptx = (proc.returncode, text)
    if proc.returncode == 1 and session.exitstatus == 0:
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
def _cache_dir(tmp_path_factory):
    """Generated modules of the test run go to a private cache directory."""
    import os
    old = os.environ.get("ADJOINT_CACHE_DIR")
    os.environ["ADJOINT_CACHE_DIR"] = str(tmp_path_factory.mktemp("adjoint-cache"))
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
