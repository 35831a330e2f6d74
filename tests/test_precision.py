"""Float32 kernels compute in float32: literals, adjoint variables and loop stacks.

numba types a bare float literal as float64, and ``x * 0.5`` with a float32 ``x``
would then run in float64 (half the SIMD width on a CPU, far slower on most GPUs).
A kernel whose float parameters are all float32 gets ``rt.float32(c)`` literals,
float32 adjoint variables and float32 loop stacks; other kernels are unchanged.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import adjoint as ad
from conftest import central_fd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TEMPLATE = '''
@ad.kernel
def chain_{T}(n: int, a: ad.{T}, x: ad.array(dtype=ad.{T}), out: ad.array(dtype=ad.{T})):
    i = ad.tid()
    v = x[i] * 0.5 + a
    for k in range(n):
        v = v * 0.75 + ad.sqrt(v * v + 1.0) * 0.25
    out[i] = v * v - 2.0 * x[i]
'''
MIXED = '''
@ad.kernel
def mixed(s: float, x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    out[i] = x[i] * 0.5 * s
'''


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(TEMPLATE.format(T="float32") + TEMPLATE.format(T="float64") + MIXED)


def test_only_all_float32_kernels_get_float32_literals(kernels):
    f32 = ad.source(kernels.chain_float32, "backward")
    assert "rt.float32(0.5)" in f32 and "rt.float32(0.0)" in f32
    assert "rt.stack_new_float32(" in f32
    f64 = ad.source(kernels.chain_float64, "backward")
    assert "rt.float32" not in f64 and "rt.stack_new_float(" in f64
    assert "rt.float32" not in ad.source(kernels.mixed, "backward")   # a float64 scalar


def _run(kernel, dtype, x, a=0.3, n=3):
    x = ad.array(np.asarray(x, dtype), requires_grad=True)
    out = ad.zeros(x.shape, dtype=dtype, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, x.size, inputs=[n, a, x], outputs=[out])
    seed = np.linspace(0.5, 1.5, x.size)
    tape.backward(grads={out: seed})
    return out.numpy(), x.grad.numpy()


def test_float32_results_match_float64_and_finite_differences(backend, kernels):
    xs = np.array([-1.3, -0.2, 0.4, 0.9, 2.1])
    out32, g32 = _run(kernels.chain_float32, np.float32, xs)
    out64, g64 = _run(kernels.chain_float64, np.float64, xs)
    assert out32.dtype == np.float32 and g32.dtype == np.float32
    np.testing.assert_allclose(out32, out64, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(g32, g64, rtol=2e-6, atol=2e-6)
    seed = np.linspace(0.5, 1.5, xs.size)
    fd = central_fd(lambda x: float(np.dot(seed, _run(kernels.chain_float64, np.float64, x)[0])),
                    xs)
    np.testing.assert_allclose(g64, fd, rtol=1e-6, atol=1e-8)


def test_numba_keeps_a_float32_kernel_in_float32(kernels):
    """Every named variable of the compiled backward (the thread function is inlined into
    the grid function) is float32: none was widened by a float64 literal."""
    with ad.backend_scope("numba"):
        _run(kernels.chain_float32, np.float32, [0.1, 0.2, 0.3])
        module = kernels.chain_float32.modules["numba"]
    grid = module.chain_float32_backward
    assert grid.overloads, "compiled in this run (a fresh cache), so types are known"
    for overload in grid.overloads.values():
        typemap = overload.type_annotation.typemap
        wide = [v for v, t in typemap.items() if str(t) == "float64" and "const" not in v]
        assert not wide, wide
        assert any(str(t) == "float32" and "adj_" in v for v, t in typemap.items())


def test_float32_cuda_kernel_has_no_float64_instructions(tmp_path, kernels):
    src = tmp_path / "k32.py"
    src.write_text("import adjoint as ad\n" + TEMPLATE.format(T="float32"))
    out = tmp_path / "k32_cuda.py"
    out.write_text(ad.generate(str(src), str(out), target="cuda"))
    proc = subprocess.run([sys.executable, "-m", "adjoint.ptx", "--f64", str(out)], cwd=ROOT,
                          env=dict(os.environ, NUMBA_ENABLE_CUDASIM="0"), capture_output=True,
                          text=True, timeout=600)
    if proc.returncode == 2:
        pytest.skip(f"no PTX compiler here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "chain_float32_forward: 0 float64 instructions" in proc.stdout, proc.stdout
    assert "chain_float32_backward: 0 float64 instructions" in proc.stdout, proc.stdout
