"""A new backend is one ``Target`` plus its runtime module (runtime/targets.py).

The skeleton here is a fourth target, defined in this file: the plain-Python target under
another name, with its own runtime module (a copy of backend_python's whose decorators
count what they compile). Registered for the test only, it runs a kernel's forward and
backward -- through ``ad.backend_scope``, the generated CPU module bound to its runtime
module -- and the gradient matches central differences in float64; then every kernel of
the corpus (tests/corpus.py) runs through it, checked as the gradient tier checks it.
"""
import dataclasses
import sys
import types

import numpy as np
import pytest
from tests import corpus
from tests.conftest import central_fd
from tests.derive.test_control_flow import check

import adjoint as ad
from adjoint.runtime import backend_python, jit, names, targets

pytestmark = pytest.mark.levels_skip("the skeleton target is its own backend: "
                                     "tests/levels.py's python scope would not apply")

RUNTIME = "adjoint_test_skeleton_runtime"

LOOPED = '''
@ad.kernel
def looped(x: ad.array(dtype=float), w: float, out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    for k in range(3):          # a loop whose values the backward reads from its stack
        v = ad.sin(v) * w + x[i] * v
    out[i] = v * x[(i + 1) % 4]
'''


def _runtime_module():
    """backend_python's names in a module of their own, its decorators counting."""
    mod = types.ModuleType(RUNTIME)
    mod.__dict__.update({k: v for k, v in vars(backend_python).items()
                         if not k.startswith("__") or k == "__getattr__"})
    mod.compiled = []

    def counting(deco):
        def wrap(fn):
            mod.compiled.append(fn.__name__)
            return deco(fn)
        return wrap
    for deco in ("jit", "jit_inline", "jit_small", "jit_grid"):
        setattr(mod, deco, counting(getattr(backend_python, deco)))
    mod.NAME = "skeleton"
    return mod


@pytest.fixture
def skeleton():
    """The fourth target, registered (and its runtime importable) for one test."""
    mod = _runtime_module()
    sys.modules[RUNTIME] = mod
    t = targets.register(dataclasses.replace(targets.PYTHON, name="skeleton", runtime=RUNTIME,
                                             jit="nothing: plain Python, counted"))
    try:
        yield t, mod
    finally:
        targets.unregister("skeleton")
        del sys.modules[RUNTIME]


def test_registered_target_is_a_backend(skeleton):
    t, mod = skeleton
    assert "skeleton" in jit.BACKENDS and jit.BACKENDS["skeleton"] == RUNTIME
    assert names.BACKEND_TARGET["skeleton"] == "cpu"
    missing = [n for n in names.required("cpu") if not hasattr(mod, n)]
    assert not missing, f"the skeleton runtime lacks {missing}"
    with ad.backend_scope("skeleton"):
        assert ad.backend_name() == "skeleton"
        assert jit.cpu_backend_name() == "skeleton"
        assert jit.default_device() == "cpu"
        assert jit.backend() is mod
    with pytest.raises(ValueError, match="already registered"):
        targets.register(t)


def test_forward_and_backward_run_through_the_skeleton(skeleton, kernel_module):
    _, mod = skeleton
    m = kernel_module(LOOPED)
    x0 = np.array([0.3, -0.7, 1.1, 0.5])
    w0, seed = 0.8, np.array([1.0, -2.0, 0.5, 1.5])

    def loss(x):
        out = ad.zeros(4)
        ad.launch(m.looped, 4, inputs=[ad.array(x), w0], outputs=[out], record_tape=False)
        return float(np.sum(seed * out.numpy()))

    with ad.backend_scope("skeleton"):
        x = ad.array(x0, requires_grad=True)
        out = ad.zeros(4, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(m.looped, 4, inputs=[x, w0], outputs=[out])
        tape.backward(grads={out: seed})
        got = x.grad.numpy().copy()
        fd = central_fd(loss, x0)
        spec = m.looped.spec
    # the kernel ran through the skeleton's runtime: its module is bound to it, and its
    # decorators compiled the forward's and backward's functions
    assert m.looped.modules["skeleton"].rt is mod
    assert {"looped_forward", "looped_backward"} <= set(mod.compiled)
    assert spec is m.looped.modules["skeleton"].looped
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-9)
    # the same gradient as the built-in plain-Python target, bit for bit
    with ad.backend_scope("python"):
        x = ad.array(x0, requires_grad=True)
        out = ad.zeros(4, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(m.looped, 4, inputs=[x, w0], outputs=[out])
        tape.backward(grads={out: seed})
        np.testing.assert_array_equal(x.grad.numpy(), got)


@pytest.mark.parametrize("case", corpus.CASES, ids=lambda c: c.name)
def test_the_corpus_runs_through_the_skeleton(skeleton, case):
    """Forward against the case's reference, gradient against central differences."""
    _, mod = skeleton
    with ad.backend_scope("skeleton"):
        for inputs in case.runs:
            check(case.kernel, case.dim, inputs, case.out_shape, ref=case.ref,
                  out_dtype=case.out_dtype)
    assert case.kernel.modules["skeleton"].rt is mod
    assert any(f.startswith(f"{case.name}_backward") for f in mod.compiled), mod.compiled
