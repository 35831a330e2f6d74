"""Calls of an ``@ad.func`` with keyword arguments and defaults.

A func's parameter may default to a number; a call inside a kernel or func may name
its arguments. The call is completed where it is parsed (frontend/parse.py ``_bind``):
the generated code calls the func with every argument in its parameters' order. Here,
on every backend: values, gradient (tape) and JVP against an independent NumPy
reference and central differences; ``ad.grad``/``ad.jvp``/``ad.hessian`` and
``ad.grad(ad.grad(f))`` from Python with defaults;
and the errors, each naming the file and line.
"""
import textwrap

import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import TransformError
from tests.conftest import central_fd

SRC = '''
    @ad.func
    def g(a: float, b: float = 2.0, n: int = 3, on: bool = True) -> float:
        s = 0.0
        for k in range(n):
            s += a * b
        if not on:
            s = -s
        return s

    @ad.kernel
    def k(x: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
        v = x[i]
        out[i] = g(v) + g(v, n=1) + g(b=v * v, a=0.5) + g(v, -1.5, 2) + g(v, on=False, b=v)
'''

X0 = np.array([0.3, -0.7, 1.1, 0.45])


@pytest.fixture(params=["python", "numba"])
def cpu(request):
    """Funcs called from plain Python run on the CPU backends."""
    with ad.backend_scope(request.param):
        yield request.param


def reference(x):
    return 6.0 * x + 2.0 * x + 1.5 * x * x - 3.0 * x - 3.0 * x * x


def test_keywords_and_defaults_in_kernels(backend, kernel_module):
    m = kernel_module(SRC)
    dev = "cuda" if backend == "cuda" else "cpu"
    x = ad.array(X0, device=dev, requires_grad=True)
    out = ad.zeros(len(X0), device=dev, requires_grad=True)
    seed = np.array([0.5, -1.0, 2.0, 0.25])
    with ad.Tape() as tape:
        ad.launch(m.k, dim=len(X0), inputs=[x], outputs=[out])
    np.testing.assert_allclose(out.numpy(), reference(X0), rtol=1e-14)
    tape.backward(grads={out: seed})
    np.testing.assert_allclose(x.grad.numpy(), central_fd(lambda v: seed @ reference(v), X0),
                               rtol=1e-7)
    dx = np.array([1.0, 0.5, -2.0, 0.3])
    dots = ad.launch(m.k, dim=len(X0), inputs=[ad.array(X0, device=dev)],
                     outputs=[ad.zeros(len(X0), device=dev)],
                     tangents={"x": ad.array(dx, device=dev)})
    h = 1e-6
    np.testing.assert_allclose(dots["out"].numpy(),
                               (reference(X0 + h * dx) - reference(X0 - h * dx)) / (2 * h),
                               rtol=1e-7)


def test_defaults_from_python(cpu, kernel_module):
    g = kernel_module(SRC).g
    assert g(1.5) == 9.0
    assert ad.grad(g)(1.5) == 6.0 and ad.grad(g, 1)(1.5) == 4.5
    assert ad.value_and_grad(g)(1.5, 3.0) == (13.5, 9.0)
    assert ad.jvp(g, (1.5,), (1.0,)) == (9.0, 6.0)
    assert ad.jvp(g, (1.5, 3.0, 1), (0.0, 1.0, 0.0)) == (4.5, 1.5)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        ad.grad(g)()
    # second derivatives of a call leaving the defaults out (g = n * a * b here)
    for mode in ("fwd-rev", "rev-fwd"):
        assert ad.hessian(g, (0, 1), mode=mode)(1.5) == ((0.0, 3.0), (3.0, 0.0))
        assert ad.hessian(g, 1, mode=mode)(1.5, 2.0, 4) == 0.0
    assert ad.grad(ad.grad(g))(1.5) == 0.0 and ad.grad(ad.grad(g), 1)(1.5) == 3.0
    assert ad.grad(ad.grad(g), 1)(1.5, 2.0, 5) == 5.0


def _refused(kernel_module, src, message):
    m = kernel_module(src)
    with pytest.raises(TransformError) as err:
        ad.launch(m.k, dim=2, inputs=[ad.zeros(2)], outputs=[ad.zeros(2)])
    assert message in str(err.value), str(err.value)
    assert f"{m.__file__}:" in str(err.value)


HEAD = '''
    @ad.func
    def g(a: float, b: float = 2.0) -> float:
        return a * b

    @ad.kernel
    def k(x: ad.array(dtype=float), out: ad.array(dtype=float)):
        i = ad.tid()
'''


@pytest.mark.parametrize("call, message", [
    ("g(x[i], c=1.0)", "func 'g' (a, b) has no parameter 'c'"),
    ("g(x[i], a=1.0)", "func 'g' (a, b): parameter 'a' is given twice"),
    ("g(b=1.0)", "func 'g' (a, b): parameter 'a' is not given"),
    ("g(x[i], 1.0, 2.0)", "func 'g' (a, b) takes 2 arguments, got 3"),
    ("g(b=g(x[i]), a=g(1.0))", "keyword arguments that call functions are evaluated in the "
                               "parameters' order here, not as written"),
])
def test_bad_calls_are_refused(kernel_module, call, message):
    _refused(kernel_module, HEAD + f"        out[i] = {call}\n", message)


def test_a_call_in_the_parameters_order_may_call_functions(cpu, kernel_module):
    m = kernel_module(HEAD + "        out[i] = g(a=g(x[i]), b=g(1.0, b=x[i]))\n")
    out = ad.zeros(2)
    ad.launch(m.k, dim=2, inputs=[ad.array([0.5, 2.0])], outputs=[out])
    np.testing.assert_array_equal(out.numpy(), [0.5, 8.0])


@pytest.mark.parametrize("signature, message", [
    ("a: float, b: float = None", "the default of parameter 'b' must be a number"),
    ("a: float, b: float = 1.0 + 1.0", "the default of parameter 'b' must be a number"),
    ("a: float, *rest", "*args, **kwargs and keyword-only arguments are not supported"),
])
def test_bad_defaults_are_refused(kernel_module, signature, message):
    src = HEAD.replace("a: float, b: float = 2.0", signature).replace("return a * b",
                                                                      "return a * 2.0")
    _refused(kernel_module, src + "        out[i] = g(x[i], 1.0)\n", message)


def test_a_kernel_has_no_defaults(kernel_module):
    _refused(kernel_module, '''
    @ad.kernel
    def k(x: ad.array(dtype=float), out: ad.array(dtype=float), s: float = 1.0):
        i = ad.tid()
        out[i] = s * x[i]
''', "default arguments are not supported in a kernel (a launch passes every argument)")


def test_a_generated_module_calls_a_func_with_its_defaults(cpu, tmp_path):
    """The func a generated module exports keeps its defaults and takes keywords (its
    forward prints them on the CPU), and the module's kernel makes the calls it was
    written with."""
    import importlib.util
    from adjoint.generate import generate
    src, out = tmp_path / "funcs_src.py", tmp_path / "funcs_grad.py"
    src.write_text("import math\nimport adjoint as ad\n" + textwrap.dedent(SRC))
    text = generate(str(src), str(out))
    assert "def g_forward(a, b=2.0, n=3, on=True):" in text
    out.write_text(text)
    spec = importlib.util.spec_from_file_location("funcs_grad", out)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (mod.g(1.5), mod.g(1.5, n=1), mod.g(1.5, 3.0), mod.g(1.5, on=False)) == \
        (9.0, 3.0, 13.5, -9.0)
    y = ad.zeros(len(X0))
    ad.launch(mod.k, dim=len(X0), inputs=[ad.array(X0)], outputs=[y])
    np.testing.assert_allclose(y.numpy(), reference(X0), rtol=1e-14)
