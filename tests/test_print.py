"""``print`` in kernels and funcs (issue 13): the forward prints, and the JVP (which
runs instead of the forward); a backward's replay prints nothing. Gradients are those
of the same kernel without the print."""
import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import TransformError

SOURCE = '''
@ad.func
def cube(v: float) -> float:
    print("cube of", v)
    return v * v * v


@ad.kernel
def shout(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    y = x[i] * 2.0
    print("thread", i, "y =", y)
    out[i] = cube(y)
'''


def _lines(text):
    """The printed words, sorted: the CUDA simulator runs a block's threads as Python
    threads, and one print's arguments may interleave with another thread's."""
    return sorted(text.split())


def test_forward_and_jvp_print_the_backward_does_not(backend, kernel_module, capfd):
    k = kernel_module(SOURCE)
    device = "cuda" if backend == "cuda" else "cpu"
    x = ad.array([1.0, 2.0], requires_grad=True, device=device)
    out = ad.zeros(2, requires_grad=True, device=device)
    capfd.readouterr()
    with ad.Tape() as tape:
        ad.launch(k.shout, 2, [x], [out])
    printed = _lines(capfd.readouterr().out)
    assert printed == sorted("cube of 2.0 cube of 4.0 thread 0 y = 2.0 thread 1 y = 4.0".split())
    tape.backward(grads={out: np.ones(2)})
    assert _lines(capfd.readouterr().out) == []
    np.testing.assert_allclose(x.grad.numpy(), 24.0 * np.array([1.0, 2.0]) ** 2)  # d(8x^3)
    dots = ad.launch(k.shout, 2, [x], [out], record_tape=False,
                     tangents={"x": ad.array(np.ones(2), device=device)})
    assert _lines(capfd.readouterr().out) == printed
    np.testing.assert_allclose(dots["out"].numpy(), 24.0 * np.array([1.0, 2.0]) ** 2)


def test_print_is_a_statement_only(kernel_module):
    with pytest.raises(TransformError, match=r"print\(\) cannot be used here") as err:
        kernel_module('''
@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = print(x[i])
''').bad.transformed
    assert ".py:" in str(err.value) and "bad" in str(err.value)
