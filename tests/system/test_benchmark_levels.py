"""Every benchmark workload's adjoint system, with its optimizations and without.

The workloads of benchmarks/ (the five tuned kernels and the same five as a user
writes them) run their forward + backward with every optimization pass on and with
none (``passes.optimizing(False)``), on the python and numba backends at the smallest
size, and their outputs, gradients and JVPs must agree: bit for bit where every pass
that applied is exact, else to the rounding tests/levels.py allows (the same
comparison the rest of the suite gets from that plugin: a workload runs in a child of
``benchmarks/run.py``, which the plugin does not see).
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint import passes
from adjoint.build.pipeline import inexact
from benchmarks.workloads import ALL, load
from tests.levels import _Log, compare


def _observe(system_cls, problem):
    """The log of a system's outputs, gradients, JVP values and tangents, and of the
    passes applied to every kernel it launched."""
    launched = set()
    spec_for = ad.Kernel.spec_for

    def noted(self, device):
        launched.add(self)
        return spec_for(self, device)
    ad.Kernel.spec_for = noted
    try:
        return _run(system_cls, problem, launched)
    finally:
        ad.Kernel.spec_for = spec_for


def _run(system_cls, problem, launched):
    system = system_cls(problem)
    system.fwd_bwd(problem.check_seed)
    outs, grads = system.result()
    log = _Log()
    log.values = [np.array(outs[n], copy=True) for n in problem.outputs] + \
        [np.array(grads[n], copy=True) for n in problem.diff]
    if hasattr(system, "jvp") and problem.tangent is not None:
        system.jvp()
        outs, dots = system.jvp_result()
        log.values += [np.array(v, copy=True) for n in problem.outputs for v in (outs[n], dots[n])]
    for k in launched:
        log.applied.update(k.transformed.applied)
        log.inexact.update(inexact(k.transformed))
    return log


@pytest.mark.levels_skip("compares the two levels itself")
@pytest.mark.parametrize("backend_name", ["python", "numba"])
@pytest.mark.parametrize("name", ALL)
def test_a_workload_with_and_without_optimizations(name, backend_name):
    from benchmarks import harness
    wl = load(name)
    problem = wl.make(np.random.default_rng(42), **wl.SIZES["micro"])
    harness.set_tangent(problem, np.random.default_rng(43))
    system_cls = wl.SYSTEMS["adjoint"]
    with ad.backend_scope(backend_name):
        optimized = _observe(system_cls, problem)
        with passes.optimizing(False):
            plain = _observe(system_cls, problem)
    assert plain.applied == set()
    assert len(optimized.values) == len(plain.values)
    problem_text = compare(optimized, plain, f"{name} optimized against ADJOINT_OPTIMIZE=0")
    assert problem_text is None, problem_text
