"""Control flow, funcs, grids, dtypes and indexing: AD against central finite differences.

The gradient tier of the kernel corpus (tests/corpus.py: branches, loops with runtime
bounds, while, break and continue, carried values, funcs, grids, gathers, scatters and
atomics). Every kernel there takes its inputs first and one output array last.
``check`` records one launch, seeds the output with random weights ``w`` and compares
each float input's gradient with the central difference of ``sum(w * out)`` taken
through forward launches. Where a closed form or a plain-Python reference is cheap, the
forward values are checked against it too, so a wrong forward cannot hide behind a
self-consistent gradient. Then exact values where a closed form gives them (the reference
cases' exact values are tests/system/test_reference_cases.py's, on the same kernels), a
refusal, and hand-written func adjoints.
"""
import inspect
import math

import numpy as np
import pytest
from tests.conftest import central_fd
from tests import corpus

import adjoint as ad
from adjoint.errors import TransformError


def _to_array(a, requires_grad):
    if isinstance(a, np.ndarray):
        return ad.array(a, requires_grad=requires_grad and a.dtype.kind == "f")
    return a


def forward(kernel, dim, inputs, out_shape, out_dtype=np.float64):
    ins = [_to_array(a, False) for a in inputs]
    out = ad.zeros(out_shape, dtype=out_dtype)
    ad.launch(kernel, dim, inputs=ins, outputs=[out], record_tape=False)
    return out.numpy().copy()


def check(kernel, dim, inputs, out_shape, ref=None, rtol=1e-5, atol=1e-6, seed=0,
          out_dtype=np.float64):
    """Forward vs ``ref(*inputs)`` (when given) and AD vs central FD for every float input.

    Returns the AD gradients (a list with ``None`` for non-float inputs)."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.5, 1.5, out_shape)
    ins = [_to_array(a, True) for a in inputs]
    out = ad.zeros(out_shape, dtype=out_dtype, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, dim, inputs=ins, outputs=[out])
    if ref is not None:
        np.testing.assert_allclose(out.numpy(), ref(*inputs), rtol=1e-12, atol=1e-12)
    tape.backward(grads={out: w.astype(out_dtype)})
    grads = []
    for k, a in enumerate(inputs):
        if not (isinstance(a, np.ndarray) and a.dtype.kind == "f"):
            grads.append(None)
            continue

        def f(xk, k=k):
            args = list(inputs)
            args[k] = xk
            return float(np.sum(w * forward(kernel, dim, args, out_shape)))
        fd = central_fd(f, a)
        got = ins[k].grad.numpy()
        np.testing.assert_allclose(got, fd, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {k}")
        grads.append(got.copy())
    return grads


# --------------------------------------------------------------------------- the corpus

@pytest.mark.parametrize("case", corpus.CASES, ids=lambda c: c.name)
def test_gradient_against_central_differences(backend, case):
    for inputs in case.runs:
        check(case.kernel, case.dim, inputs, case.out_shape, ref=case.ref,
              out_dtype=case.out_dtype)


def gradients(kernel, dim, inputs, out_shape):
    """The gradient of ``sum(out)`` for every float array of ``inputs`` (None for others)."""
    ins = [_to_array(a, True) for a in inputs]
    out = ad.zeros(out_shape, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, dim, inputs=ins, outputs=[out])
    tape.backward(grads={out: np.ones(out_shape)})
    return [a.grad.numpy() if isinstance(a, ad.Array) and a.requires_grad else None
            for a in ins]


# --------------------------------------------------------------------------- exact values

def test_zero_trip_ranges_give_zero_gradients(backend):
    """The corpus's (start, stop, step) of ``ranged``: a loop that runs leaves a gradient,
    one that does not (an empty range, a step the wrong way) leaves none."""
    for a, b, s, x in corpus.BY_NAME["ranged"].runs:
        grad = gradients(corpus.ranged, 4, [a, b, s, x], 4)[3]
        if len(range(a, b, s)) == 0:
            np.testing.assert_array_equal(grad, 0.0)
        else:
            assert np.all(grad != 0.0)


def test_fibonacci_tuple_assignment(backend):
    """b_n = F(n-1) + F(n) x is linear in x: its gradient is the Fibonacci number F(n+1)."""
    n = 7
    fibs = [0, 1]
    while len(fibs) < n + 3:
        fibs.append(fibs[-1] + fibs[-2])
    grad = gradients(corpus.fib, 2, [n, np.array([0.5, 2.0])], 2)[1]
    np.testing.assert_array_equal(grad, [fibs[n + 1]] * 2)


def test_global_numeric_constants(backend):
    """``SCALE`` and ``STEPS`` are module constants of tests/corpus.py: y = x 2.5^3 + ..."""
    grad = gradients(corpus.consts, 3, [np.array([0.1, -1.0, 2.0])], 3)[0]
    np.testing.assert_allclose(grad, 2.5 ** 3, rtol=1e-14)


# --------------------------------------------------------------------------- refused

def test_variable_defined_in_some_branches_only(backend, kernel_module):
    """``t`` is assigned only when ``flag == 1``; no static rule sees that correlation, so
    the read is refused at its line (it used to read an invented 0.0 on other paths);
    assigned first (the corpus's ``partial``), the kernel is differentiated."""
    source = inspect.getsource(corpus.partial.pyfunc)
    bad = kernel_module(source.replace("    t = 0.0\n", ""))    # (t not assigned first)
    with pytest.raises(TransformError, match=r"'t' may be used before it is assigned") as err:
        ad.launch(bad.partial, 4, inputs=[ad.zeros(4)], outputs=[ad.zeros(4)])
    assert err.value.source_line.strip() == "y = t * 2.0"


# --------------------------------------------------------------------------- funcs

def test_funcs_callable_from_plain_python():
    assert corpus.sq(3.0) == 9.0
    assert corpus.poly(2.0, 3.0) == 4.0 * 3.0 + 9.0
    r, t = corpus.polar(3.0, 4.0)
    assert r == 5.0 and t == math.atan2(4.0, 3.0)
    assert corpus.first_above(1.0, 10, 3.0) == 2.0 * 4.75   # 1 -> 2.5 -> 4.75 > 3
    assert corpus.first_above(0.1, 2, 3.0) == (0.1 * 1.5 + 0.1) * 1.5 + 0.1
    assert corpus.sign_sqrt(-4.0) == -2.0


@pytest.mark.parametrize("adj_name", [
    "g",
    "adj_ret",
])
def test_func_grad_hand_written_adjoint_is_used(backend, kernel_module, adj_name):
    """DESIGN.md: ``def g(<f's params>, adj_ret)``; each rule here is twice the truth."""
    m = kernel_module('''
        @ad.func
        def cube(x: float) -> float:
            return x * x * x


        @ad.func_grad(cube)
        def cube_grad(x: float, ADJ: float):
            return 2.0 * (3.0 * x * x * ADJ)   # deliberately twice the true adjoint


        @ad.func
        def mix(a: float, b: float) -> float:
            return a * b + a


        @ad.func_grad(mix)
        def mix_grad(a: float, b: float, ADJ: float):
            return 2.0 * ADJ * (b + 1.0), 2.0 * ADJ * a


        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = cube(x[i]) + mix(x[i], y[i])
        '''.replace("ADJ", adj_name))
    xs = np.array([0.5, -1.0, 2.0])
    ys = np.array([1.5, 0.25, -3.0])
    x = ad.array(xs, requires_grad=True)
    y = ad.array(ys, requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.k, 3, inputs=[x, y], outputs=[out])
    np.testing.assert_allclose(out.numpy(), xs ** 3 + xs * ys + xs, rtol=1e-14)
    tape.backward(grads={out: np.ones(3)})
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * (3 * xs ** 2 + ys + 1.0), rtol=1e-14)
    np.testing.assert_allclose(y.grad.numpy(), 2.0 * xs, rtol=1e-14)


# --------------------------------------------------------------------------- dtypes

def test_float32_arrays(backend):
    xs = np.array([0.5, -1.0, 2.0, 0.1], dtype=np.float32)
    x = ad.array(xs, requires_grad=True)
    out = ad.zeros(4, dtype=ad.float32, requires_grad=True)
    assert x.dtype == np.float32 and out.grad.dtype == np.float32
    tape = ad.Tape()
    with tape:
        ad.launch(corpus.f32, 4, inputs=[x], outputs=[out])
    x64 = xs.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), np.sin(x64) * x64 + x64 * x64, rtol=1e-5)
    tape.backward(grads={out: np.ones(4, dtype=np.float32)})
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x64) * x64 + np.sin(x64) + 2 * x64,
                               rtol=1e-5, atol=1e-6)
