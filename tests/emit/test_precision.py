"""Float32 kernels compute in float32: literals, adjoint variables and loop stacks.

numba types a bare float literal as float64, and ``x * 0.5`` with a float32 ``x``
would then run in float64 (half the SIMD width on a CPU, far slower on most GPUs).
A kernel whose float parameters are all float32 gets ``rt.float32(c)`` literals
(int literals too where they meet a float, as in ``2 * x`` or ``x ** 2``), float32
adjoint variables and float32 loop stacks; other kernels are unchanged.
"""
import os
import re

import numpy as np
import pytest

import adjoint as ad
from tests.conftest import central_fd, run_ptx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TEMPLATE = '''
@ad.kernel
def chain_{T}(n: int, a: ad.{T}, x: ad.array(dtype=ad.{T}), out: ad.array(dtype=ad.{T})):
    i = ad.tid()
    v = x[i] * 0.5 + a
    acc = 0
    for k in range(n):
        v = v * 0.75 + ad.sqrt(v * v + 1) * 0.25
        acc = acc + v / (k + 1)
    out[i] = v * v - 2 * x[i] ** 2 + acc
'''
FUNCS = '''
@ad.func
def soft(a: float, b: float) -> float:
    c = a * 0.5
    for k in range(2):
        c = c * 0.75 + b / (k + 1)
    return c + twice(b)


@ad.func
def twice(u: float) -> float:
    return 2 * u + 0.25


@ad.func
def cube(u: float) -> float:
    return u * u * u


@ad.func_grad(cube)
def cube_grad(u: float, adj_ret: float):
    return 3.0 * u * u * adj_ret


@ad.kernel
def with_funcs_float32(x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    out[i] = soft(x[i], 0.3) + cube(x[i])


@ad.kernel
def with_funcs_float64(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = soft(x[i], 0.3) + cube(x[i])
'''
MIXED = '''
@ad.kernel
def mixed(s: ad.float64, x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    out[i] = x[i] * 0.5 * s
'''
# a ``float`` scalar is weak (issue 39): it takes the precision of the arrays it meets
WEAK = '''
@ad.kernel
def weak_{name}(s: {s}, x: ad.array(dtype=ad.{x}), out: ad.array(dtype=ad.{out})):
    i = ad.tid()
    v = x[i] * s + 0.1
    for k in range(2):
        v = v * 0.75 + ad.sqrt(v * v + s) * 0.25
    out[i] = v
'''
WEAK_FORMS = {"f32": ("float", "float32", "float32"),
              "strong32": ("ad.float32", "float32", "float32"),
              "f64": ("float", "float64", "float64"),
              "strong64": ("ad.float64", "float64", "float64"),
              "mixed32": ("ad.float64", "float32", "float32"),
              "arrays": ("float", "float32", "float64")}


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


@pytest.fixture
def weak(kernel_module):
    return kernel_module("".join(WEAK.format(name=n, s=s, x=x, out=o)
                                 for n, (s, x, o) in WEAK_FORMS.items()))


def _weak_run(kernel, dtype, out_dtype, s=0.3):
    x = ad.array(np.linspace(-1.0, 2.0, 7).astype(dtype), requires_grad=True)
    out = ad.zeros(7, dtype=out_dtype, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, 7, inputs=[s, x], outputs=[out])
    tape.backward(grads={out: np.linspace(0.5, 1.5, 7)})
    return out.numpy(), x.grad.numpy()


def test_a_float_scalar_takes_the_precision_of_float32_arrays(backend, weak):
    """``s: float`` beside float32 arrays is a float32 scalar: the kernel computes in
    float32, bit for bit what ``s: ad.float32`` computes (the value given rounded to
    float32), and its gradient agrees with the float64 kernel's and central differences.
    ``ad.float64`` stays float64 (a mixed kernel), and so does ``float`` beside float32 and
    float64 arrays."""
    for name, f32 in (("f32", True), ("strong32", True), ("mixed32", False), ("arrays", False),
                      ("f64", False)):
        text = ad.source(getattr(weak, f"weak_{name}"), "backward")
        assert ("rt.float32(0.75)" in text) == f32, (name, text)
    got = _weak_run(weak.weak_f32, np.float32, np.float32)
    want = _weak_run(weak.weak_strong32, np.float32, np.float32)
    assert got[0].dtype == got[1].dtype == np.float32
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    out64, g64 = _weak_run(weak.weak_f64, np.float64, np.float64)
    np.testing.assert_allclose(got[0], out64, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got[1], g64, rtol=2e-5, atol=2e-6)
    seed = np.linspace(0.5, 1.5, 7)

    def f(x):
        out = ad.zeros(7, dtype=np.float64)
        ad.launch(weak.weak_f64, 7, inputs=[0.3, ad.array(x)], outputs=[out])
        return float(np.dot(seed, out.numpy()))
    np.testing.assert_allclose(g64, central_fd(f, np.linspace(-1.0, 2.0, 7)), rtol=1e-6,
                               atol=1e-8)


def test_float64_kernels_are_unchanged_by_the_weak_rule(weak):
    """A ``float`` scalar in a float64 kernel is float64: the generated module is the one
    ``ad.float64`` gives, character for character apart from the kernel's name and the
    line numbers its comments cite (so its results are bit for bit those of before the
    rule)."""
    def text(kernel, part):
        text = ad.source(kernel, part).replace(kernel.name, "K")
        return re.sub(r"(\.py:|line )\d+", r"\1", text)
    for part in ("forward", "backward", "jvp"):
        assert text(weak.weak_f64, part) == text(weak.weak_strong64, part), part


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


def test_funcs_called_from_a_float32_kernel_get_float32_variants(backend, kernel_module):
    """Funcs are shared by kernels of both precisions: a float32 kernel calls
    ``<func>_forward_f32``/``_adjoint_f32`` (nested funcs and custom gradients too),
    the float64 kernel the plain ones; both agree with each other."""
    m = kernel_module(FUNCS)
    got = {}
    for kernel, dtype in ((m.with_funcs_float32, np.float32), (m.with_funcs_float64, np.float64)):
        x = ad.array(np.array([0.3, -0.7, 1.2], dtype), requires_grad=True)
        out = ad.zeros(3, dtype=dtype, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(kernel, 3, inputs=[x], outputs=[out])
        tape.backward(grads={out: np.array([1.0, 2.0, 0.5])})
        got[dtype] = (out.numpy(), x.grad.numpy())
    for k in range(2):
        np.testing.assert_allclose(got[np.float32][k], got[np.float64][k], rtol=2e-6, atol=2e-6)
    text = open(m.with_funcs_float32.modules[backend].__file__).read()
    for fn in ("soft_forward_f32", "soft_adjoint_f32", "twice_adjoint_f32", "cube_adjoint_f32"):
        assert f"def {fn}(" in text
    assert "def soft_forward(" in text          # the float64 kernel's


def test_numba_keeps_a_float32_kernel_in_float32(kernels):
    """Every named variable of the compiled backward (the thread function is inlined into
    the grid function, or its serial variant for a small launch) is float32: none was
    widened by a float64 literal."""
    with ad.backend_scope("numba"):
        _run(kernels.chain_float32, np.float32, [0.1, 0.2, 0.3])
        module = kernels.chain_float32.modules["numba"]
    # a small launch runs the serial variant, compiled on its first call (lazily)
    parts = [getattr(module, n) for n in ("chain_float32_backward",
                                          "chain_float32_backward_small") if hasattr(module, n)]
    overloads = [o for fn in parts for o in fn.overloads.values()]
    assert overloads, "compiled in this run (a fresh cache), so types are known"
    for overload in overloads:
        typemap = overload.type_annotation.typemap
        wide = [v for v, t in typemap.items() if str(t) == "float64" and "const" not in v]
        assert not wide, wide
        assert any(str(t) == "float32" and "adj_" in v for v, t in typemap.items())


def test_float32_cuda_kernel_has_no_float64_instructions(tmp_path, kernels):
    src = tmp_path / "k32.py"
    src.write_text("import adjoint as ad\n" + TEMPLATE.format(T="float32") + FUNCS)
    out = tmp_path / "k32_cuda.py"
    out.write_text(ad.generate(str(src), str(out), target="cuda"))
    proc = run_ptx("--f64", out, cwd=ROOT)
    if proc.returncode == 2:
        pytest.skip(f"no PTX compiler here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "chain_float32_forward: 0 float64 instructions" in proc.stdout, proc.stdout
    assert "chain_float32_backward: 0 float64 instructions" in proc.stdout, proc.stdout
    assert "with_funcs_float32_forward: 0 float64 instructions" in proc.stdout, proc.stdout
    assert "with_funcs_float32_backward: 0 float64 instructions" in proc.stdout, proc.stdout


def _rule_groups():
    from tests.rules import test_rules
    return test_rules, test_rules.build_groups()


@pytest.mark.parametrize("index", range(len(_rule_groups()[1])))
def test_every_rule_in_float32_matches_float64(backend, kernel_module, index):
    """The rules table (tests/rules/test_rules.py: every rule, with constants, repeated
    operands and non-differentiable ops fed into arithmetic) as float32 kernels:
    values and gradients agree with the float64 kernels to float32 rounding."""
    tr, groups = _rule_groups()
    g = groups[index]
    src64 = tr.kernel_source(g)
    src32 = src64.replace("dtype=float", "dtype=ad.float32").replace(
        f"def rules_{g.index}(", f"def rules32_{g.index}(")
    # the float64 kernel is tests/rules/test_rules.py's own (the same source), compiled once
    # a session
    k64 = tr.group_kernel(g, kernel_module)
    k32 = getattr(kernel_module(src32), f"rules32_{g.index}")
    a0 = tr.sample_inputs(g)
    got = {}
    for kernel, dtype in ((k64, np.float64), (k32, np.float32)):
        a = ad.array(a0.astype(dtype), requires_grad=True)
        out = ad.zeros((len(g.variants), a0.shape[1]), dtype=dtype, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(kernel, a0.shape[1], inputs=[a], outputs=[out])
        seed = np.random.default_rng(index).uniform(0.5, 1.5, out.shape)
        tape.backward(grads={out: seed})
        got[dtype] = (out.numpy(), a.grad.numpy())
    for k, what in enumerate(("values", "gradients")):
        x32 = got[np.float32][k].astype(np.float64)
        x64 = got[np.float64][k]
        assert got[np.float32][k].dtype == np.float32
        err = np.abs(x32 - x64) / (np.abs(x64) + 1e-3)
        assert err.max() < 1e-5, f"group {index} {what}: worst {err.max():.1e}"
