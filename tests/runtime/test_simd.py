"""Vector math on the CPU (runtime/simd.py): a loop of math functions calls glibc's libmvec
variants, within glibc's error bound, with the C functions' special values, and computes
what a scalar call computes (numba only: the other backends compile nothing)."""
import math
import os
import re
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import backend_numba, simd

needs_libmvec = pytest.mark.skipif(not simd.VARIANTS,
                                   reason=f"no vector math functions here ({simd.MODE})")

# where each function is defined and finite, for the accuracy check
DOMAINS = {"sin": (-30, 30), "cos": (-30, 30), "tan": (-1.5, 1.5), "asin": (-1, 1),
           "acos": (-1, 1), "atan": (-50, 50), "sinh": (-80, 80), "cosh": (-80, 80),
           "tanh": (-12, 12), "asinh": (-1e4, 1e4), "acosh": (1, 1e4), "atanh": (-0.999, 0.999),
           "exp": (-80, 80), "expm1": (-20, 80), "log": (1e-20, 1e20), "log1p": (-0.999, 1e5),
           "log2": (1e-20, 1e20), "log10": (1e-20, 1e20), "erf": (-4, 4), "erfc": (-4, 9)}
# the C functions' special values: zeros, infinities, nan, outside the domain, poles, overflow
SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 2.0, -2.0, 0.5, 1.0, -1.0, 1000.0,
            -1000.0, 1e-300, 1e300]


def _all_functions():
    """A numba function whose k-th loop sets ``out[k, i] = FUNCTIONS[k](x[k, i])`` (one
    compile for every function)."""
    loops = "".join(f"    for i in range(x.shape[1]):\n        out[{k}, i] = rt.{name}(x[{k}, i])\n"
                    for k, name in enumerate(simd.FUNCTIONS))
    scope = {"rt": backend_numba}
    exec(f"def apply(x, out):\n{loops}", scope)
    return numba.njit(scope["apply"])


APPLY = _all_functions()


def _inputs(dtype, n, rng):
    rows = []
    for name in simd.FUNCTIONS:
        lo, hi = DOMAINS[name]
        if name.startswith("log") and name != "log1p" or name in ("asinh", "acosh"):
            row = np.exp(rng.uniform(np.log(max(lo, 1e-20)), np.log(hi), n))
            row *= rng.choice([-1.0, 1.0], n) if name == "asinh" else 1.0
        else:
            row = rng.uniform(lo, hi, n)
        rows.append(row)
    return np.array(rows, dtype=dtype)


@needs_libmvec
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_loop_of_math_functions_calls_their_vector_variants(dtype):
    x = _inputs(dtype, 16, np.random.default_rng(0))
    APPLY(x, np.empty_like(x))
    ir = APPLY.inspect_llvm(APPLY.signatures[-1])
    suffix = "f" if dtype == np.float32 else ""
    for name in simd.FUNCTIONS:
        vname, lanes = simd.VARIANTS[name + suffix]
        element = "float" if dtype == np.float32 else "double"
        assert re.search(rf"call <{lanes} x {element}> @{vname}\(", ir), name


@needs_libmvec
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_variants_are_within_glibcs_error_bound(dtype):
    """glibc bounds its vector functions' error by 4 ulp. The reference is Python's
    ``math`` in float64 (within 1 ulp of float64: exact enough for float32; for float64
    the bound is widened by that ulp)."""
    x = _inputs(dtype, 4096, np.random.default_rng(1))
    out = np.empty_like(x)
    APPLY(x, out)
    bound = 4.0 if dtype == np.float32 else 5.0
    for k, name in enumerate(simd.FUNCTIONS):
        ref = np.array([getattr(math, name)(float(v)) for v in x[k]])
        ulp = np.spacing(np.abs(ref).astype(dtype)).astype(np.float64)
        err = np.abs(out[k].astype(np.float64) - ref) / ulp
        assert np.all(np.isfinite(out[k])), name
        assert err.max() <= bound, (name, float(err.max()), x[k][np.argmax(err)])


@needs_libmvec
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_vectorized_loop_computes_what_a_scalar_call_does(dtype):
    """Every lane of a vectorized loop, and its scalar remainder, equals ``rt.<name>``
    called on its own (compiled alone: a scalar call), bit for bit: a forward and a JVP,
    a parallel and a serial launch compute the same values."""
    rng = np.random.default_rng(3)
    x = np.concatenate([_inputs(dtype, 61, rng), np.tile(_specials(dtype), (len(simd.FUNCTIONS), 1))],
                       axis=1)
    out = np.empty_like(x)
    APPLY(x, out)
    with np.errstate(all="ignore"):
        for k, name in enumerate(simd.FUNCTIONS):
            scalar = getattr(backend_numba, name)
            want = np.array([scalar(v) for v in x[k]], dtype=dtype)
            np.testing.assert_array_equal(out[k].view(_bits(dtype)), want.view(_bits(dtype)),
                                          err_msg=name)


@needs_libmvec
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_variants_have_the_c_functions_special_values(dtype):
    """Where the argument or the C function's result is zero, infinite or nan (outside the
    domain, at a pole, on overflow), each lane gives the C function's value (the Python
    backend's ``rt.<name>``), sign of zero included. Each value fills a whole vector."""
    from adjoint.runtime import ieee
    x = np.tile(np.repeat(_specials(dtype), 16), (len(simd.FUNCTIONS), 1))
    out = np.empty_like(x)
    APPLY(x, out)
    compared = 0
    for k, name in enumerate(simd.FUNCTIONS):
        for v, got in zip(x[k], out[k]):
            want = dtype(getattr(ieee, name)(v))
            if math.isfinite(v) and v != 0 and math.isfinite(want) and want != 0:
                continue        # a finite result: the accuracy test's
            compared += 1
            same = (np.isnan(want) and np.isnan(got)) or \
                (want == got and np.signbit(want) == np.signbit(got))
            assert same, f"{name}({v!r}): {got!r}, the C function {want!r}"
    assert compared > 16 * 5 * len(simd.FUNCTIONS)


def _specials(dtype):
    return np.array([v if abs(v) < 1e30 or dtype == np.float64 else math.copysign(1e30, v)
                     for v in SPECIALS], dtype=dtype)


def _bits(dtype):
    return np.uint32 if dtype == np.float32 else np.uint64


WAVE = '''
@ad.kernel
def wave_loss(x: ad.array(dtype=ad.float32), loss: ad.array(dtype=ad.float32)):
    i = ad.tid()
    v = x[i]
    ad.atomic_add(loss, 0, ad.sin(v) * ad.exp(-v * v) + v)
'''


@needs_libmvec
def test_a_kernels_math_functions_are_vectorized(kernel_module, monkeypatch, tmp_path):
    """The commonest kernel, a loss accumulated by every thread into one element: its
    forward calls libmvec's sines and exponentials, and so does the forward a tape runs
    with its VJP (runtime/eager.py), which calls libmvec's cosines too. Loss and gradient
    are checked against float64."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))    # compiled here: IR to inspect
    m = kernel_module(WAVE)
    n = 1000
    x0 = np.random.default_rng(2).uniform(-3, 3, n).astype(np.float32)
    with ad.backend_scope("numba"):
        x = ad.array(x0, requires_grad=True)
        loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(m.wave_loss, n, inputs=[x], outputs=[loss])
        tape.backward(grads={loss: np.ones(1, np.float32)})
        assert tape.steps[0].eager is not None
        plain = ad.zeros(1, dtype=ad.float32)
        ad.launch(m.wave_loss, n, inputs=[x], outputs=[plain])
    assert plain.numpy()[0] == loss.numpy()[0]
    (gen,) = m.wave_loss.modules.values()
    lanes = simd.VARIANTS["sinf"][1]
    for fn, names in ((gen.wave_loss_forward_small, ("sinf", "expf")),
                      (gen.wave_loss_forward_vjp_small, ("sinf", "expf", "cosf"))):
        ir = "".join(fn.inspect_llvm().values())
        for f in names:
            assert re.search(rf"call <{lanes} x float> @{simd.VARIANTS[f][0]}\(", ir), f
    v = x0.astype(np.float64)
    want = np.sum(np.sin(v) * np.exp(-v * v) + v)
    np.testing.assert_allclose(loss.numpy(), [want], rtol=1e-5)
    grad = np.cos(v) * np.exp(-v * v) - 2 * v * np.sin(v) * np.exp(-v * v) + 1
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-5, atol=1e-6)


def _runtime_says(env, code):
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_adjoint_vector_math_0_turns_it_off():
    """``ADJOINT_VECTOR_MATH=0``: no vector variants, and a different cache key (the
    runtime's fingerprint), so that nothing compiled with them is reused."""
    code = textwrap.dedent("""\
        from adjoint.runtime import backend_numba, simd
        print(simd.MODE, len(simd.VARIANTS), backend_numba.RUNTIME_FINGERPRINT)""")
    mode, count, fingerprint = _runtime_says({"ADJOINT_VECTOR_MATH": "0"}, code).split()
    assert (mode, count) == ("off", "0")
    assert fingerprint != backend_numba.RUNTIME_FINGERPRINT


@needs_libmvec
def test_a_target_without_avx_calls_the_sse_variants():
    """A ``<8 x float>`` argument travels in one register only where the target has AVX:
    where numba compiles for a named CPU, the four-lane SSE variants."""
    code = "from adjoint.runtime import simd; print(simd.MODE, simd.VARIANTS['sinf'][0])"
    assert _runtime_says({"NUMBA_CPU_NAME": "x86-64"}, code) == \
        "libmvec-b128 _ZGVbN4v_sinf"


CONSTANT_ARGUMENT = '''
@ad.func
def relax(a: float) -> float:
    w = 0
    while True:
        w += 1
        if w > 3:
            break
        t = math.pow(1.5 + math.sin(0.75), 2.0)
        a -= 0.5 * (a - t)
    return a

@ad.kernel
def relaxed(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = relax(x[i]) + ad.sin(x[i])
'''


@needs_libmvec
def test_a_constant_argument_compiles(kernel_module, monkeypatch, tmp_path):
    """A func calling ``sin`` of a constant in a loop, in a kernel calling ``sin`` too:
    the module verifies (with internal linkage LLVM's optimizer changed adjoint's
    scalar function, and its variant attribute no longer named it: 'invalid name for a
    VFABI variant', found by the fuzzer). Value and gradient against float64."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))    # compiled here, not cached
    m = kernel_module(CONSTANT_ARGUMENT)
    x0 = np.linspace(-1.0, 1.0, 10)
    with ad.backend_scope("numba"):
        x = ad.array(x0, requires_grad=True)
        out = ad.zeros(10, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(m.relaxed, 10, inputs=[x], outputs=[out])
        tape.backward(grads={out: np.ones(10)})
    t = (1.5 + math.sin(0.75)) ** 2
    a = x0.copy()
    for _ in range(3):
        a -= 0.5 * (a - t)
    np.testing.assert_allclose(out.numpy(), a + np.sin(x0), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(x.grad.numpy(), 0.125 + np.cos(x0), rtol=1e-14, atol=1e-15)
