"""Every test's kernels run again with no optimization, and what the test looked at must agree.

A pytest plugin. After a test passes, it runs the test
function again, in the same process and with the same fixtures, under
``passes.optimizing(False)`` (every optimization pass of adjoint/build/passes.py off: the
plain rule-by-rule code), and compares what the two runs *observed*: every array a
test read back (``Array.numpy()``, ``np.asarray(array)``), in order. A test's own
assertions in the unoptimized run do not count (a test may assert on optimized
code's text); a value it read that differs does.

- A test run on the python backend (``backend`` = python) is compared with its own
  run. A test with no ``backend`` parameter runs twice more on the python backend, with
  the optimizations on and then off, and those two are compared (the first run
  may have been numba's: compiling every kernel twice more would not fit CI). The
  numba and CUDA variants of a parametrized test are not rerun: their python variant
  runs the same kernels.
- Equal means bit for bit, unless a kernel the test launched had an optimization
  applied that documents other rounding (``pipeline.inexact``: order, reciprocal, gather,
  eager, jam, zero_tangents where ``Pass.exact`` is false and the pass changed
  something); then to
  ``1e-9`` in float64 and ``2e-4`` in float32, relative to the array's largest magnitude
  (at least 1). NaN equals NaN.
- A test that launched no kernel (it reads generated text, or runs no launch) is not
  rerun.
- On a sample of tests (one in ``SAMPLE``), each optimization pass alone is turned off
  too and compared with the optimized run.

``ADJOINT_TEST_LEVELS=0`` turns it off (a quicker local run); CI runs it. (tests/conftest.py
imports its hooks.) ``ADJOINT_TEST_LEVELS=numba`` compares on numba instead: a test run on
the numba backend is compared with its own run unoptimized on numba, a test with no
``backend`` parameter runs twice more on numba, and the python and CUDA variants are not
rerun (the compiled side of the comparison, every kernel compiled twice: hours of a
2-core machine for the whole suite, too long for CI).
"""
import contextlib
import os
import random
import sys
import zlib

import numpy as np
import pytest

import adjoint as ad
from adjoint import passes
from adjoint.api import Kernel
from adjoint.build.pipeline import inexact
from adjoint.runtime.array import Array

SAMPLE = 25
MODE = os.environ.get("ADJOINT_TEST_LEVELS", "1")
ENABLED = MODE != "0"
ON = "numba" if MODE == "numba" else "python"   # the backend the comparisons run on


class _Log:
    """What one run of a test observed, and the optimizations its kernels had applied."""

    def __init__(self):
        self.values = []
        self.sites = []             # (file, line) that read each array
        self.launched = 0           # kernel launches (a test that launches none is not rerun)
        self.applied = set()        # the optimization passes applied to its kernels
        self.inexact = set()        # ... those of them that may round otherwise


_log = [None]       # the run being recorded (None: not recording)


def _observe(value):
    log = _log[0]
    if log is not None and isinstance(value, np.ndarray):
        caller = sys._getframe(2)       # (past observed_numpy: who asked for the values)
        log.values.append(np.array(value, copy=True))
        log.sites.append((caller.f_code.co_filename, caller.f_lineno))


def _install():
    numpy = Array.numpy
    spec_for = Kernel.spec_for

    def observed_numpy(self):
        out = numpy(self)
        _observe(out)
        return out

    def noted_spec_for(self, device):
        log = _log[0]
        if log is not None:
            log.launched += 1
            log.applied.update(self.transformed.applied)
            log.inexact.update(inexact(self.transformed))
        return spec_for(self, device)

    Array.numpy = observed_numpy
    Kernel.spec_for = noted_spec_for


class _Random:
    """The random generators a test draws from, to be put back as they were before each
    run: numpy's and Python's global ones, and every ``np.random.Generator``,
    ``RandomState`` or ``random.Random`` among its module's globals and its fixtures'
    values (a module-level ``RNG = np.random.default_rng(11)`` would give the rerun other
    inputs)."""

    def __init__(self, item):
        self.seed = zlib.crc32(item.nodeid.encode())
        values = list(vars(item.module).values()) + list(getattr(item, "funcargs", {}).values())
        self.generators = [(g, _state(g)) for g in {id(v): v for v in values
                                                    if _state(v) is not None}.values()]

    def restore(self):
        np.random.seed(self.seed)
        random.seed(self.seed)
        for g, state in self.generators:
            if isinstance(g, np.random.Generator):
                g.bit_generator.state = state
            else:
                g.setstate(state) if isinstance(g, random.Random) else g.set_state(state)


def _state(v):
    if isinstance(v, np.random.Generator):
        return v.bit_generator.state
    if isinstance(v, np.random.RandomState):
        return v.get_state()
    if isinstance(v, random.Random):
        return v.getstate()
    return None


def _run(item, setting, backend=None):
    """Run ``item``'s test function once more under ``setting`` (passes.optimizing) and,
    if given, the backend: ``(log, error or None)``."""
    log = _Log()
    item._levels_random.restore()
    _log[0] = log
    error = None
    scope = ad.backend_scope(backend) if backend else contextlib.nullcontext()
    try:
        with scope, passes.optimizing(setting):
            item.runtest()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - the test's own outcome does not count here
        error = exc              # (pytest.raises' Failed and pytest.skip are BaseExceptions)
    finally:
        _log[0] = None
    return log, error


def _tolerance(dtype, inexact):
    if not inexact:
        return 0.0
    return 2e-4 if dtype == np.float32 else 1e-9


def compare(a, b, what):
    """A message naming the first observation where ``b`` differs from ``a``, or None. The
    runs are compared while they read their arrays at the same places: a run that took
    another path (the unoptimized run failing an assertion on optimized code, whose
    message reads the arrays it prints) is compared up to there."""
    for k, (x, y) in enumerate(zip(a.values, b.values)):
        if a.sites and b.sites and a.sites[k] != b.sites[k]:
            return None
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{what}: observation {k} has shape/dtype {x.shape}/{x.dtype} optimized, " \
                   f"{y.shape}/{y.dtype} unoptimized"
        if x.dtype.kind not in "fc":
            if not np.array_equal(x, y):
                return f"{what}: observation {k} differs: {x!r} against {y!r}"
            continue
        tol = _tolerance(x.dtype, a.inexact | b.inexact)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if tol:
            with np.errstate(invalid="ignore", over="ignore"):     # (inf - inf: not same)
                finite = np.abs(x[np.isfinite(x)])
                scale = max(1.0, float(finite.max(initial=0.0)))
                same |= np.abs(x - y) <= tol * scale
        if not same.all():
            where = tuple(int(v) for v in np.argwhere(~same)[0])
            return (f"{what}: observation {k} (array #{k + 1} the test read) differs at "
                    f"{where}: {x[where]!r} optimized, {y[where]!r} unoptimized "
                    f"(optimizations applied: {sorted(a.applied) or 'none'}, of which "
                    f"may round otherwise: {sorted(a.inexact) or 'none'}; "
                    f"{'bit for bit' if not tol else f'tolerance {tol:g}'})")
    return None


def _backend_of(item):
    spec = getattr(item, "callspec", None)
    return spec.params.get("backend") if spec is not None else None


def _levels(item):
    """The runs to compare for ``item``: ``(reference backend or None, compare with the
    test's own run)``, or None when it is not rerun."""
    if not ENABLED or not isinstance(item, pytest.Function) or \
            item.get_closest_marker("levels_skip"):
        return None
    return plan(_backend_of(item), ON)


def plan(backend, on):
    """The runs to compare for a test parametrized with ``backend`` (None: not
    parametrized) when the comparisons run on the backend ``on``: see ``_levels``."""
    if backend is None:
        return on, False        # (the test's own run may have been on any backend)
    if backend == on:
        return None, True
    return None                 # (its variant on ``on`` runs the same kernels)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    plan = _levels(item)
    if plan is None:
        return (yield)
    backend, own = plan
    first = _Log()
    item._levels_random = _Random(item)
    if own:
        item._levels_random.restore()
    _log[0] = first
    try:
        result = yield              # (a test that fails by itself raises here)
    finally:
        _log[0] = None
    if not first.launched:
        return result               # no kernel ran: nothing to compare
    if not own:
        first, error = _run(item, True, backend)
        if error is not None and not first.values:
            return result           # it does not run on the python backend
    second, _ = _run(item, False, backend)
    problem = compare(first, second, "optimized against ADJOINT_OPTIMIZE=0")
    if problem is None and zlib.crc32(item.nodeid.encode()) % SAMPLE == 0:
        for name in sorted(first.applied):
            alone, _ = _run(item, f"-{name}", backend)
            problem = compare(first, alone, f"optimized against -{name} alone")
            if problem:
                break
    if problem:
        raise AssertionError(f"{item.nodeid}: the optimized and unoptimized code disagree: "
                             f"{problem}")
    return result


def pytest_configure(config):
    config.addinivalue_line("markers", "levels_skip: not rerun unoptimized (tests/levels.py), "
                                       "with the reason")
    if ENABLED:
        _install()
