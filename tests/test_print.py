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


def _printed(text, backend):
    """What was printed: its lines, sorted; under the CUDA simulator, which runs a
    block's threads as Python threads whose prints interleave argument by argument, its
    characters other than blanks, sorted."""
    if backend == "cuda":
        return sorted(c for c in text if not c.isspace())
    return sorted(line for line in text.splitlines() if line.strip())


def test_forward_and_jvp_print_the_backward_does_not(backend, kernel_module, capfd):
    k = kernel_module(SOURCE)
    device = "cuda" if backend == "cuda" else "cpu"
    x = ad.array([1.0, 2.0], requires_grad=True, device=device)
    out = ad.zeros(2, requires_grad=True, device=device)
    capfd.readouterr()
    with ad.Tape() as tape:
        ad.launch(k.shout, 2, [x], [out])
    printed = _printed(capfd.readouterr().out, backend)
    assert printed == _printed("cube of 2.0\ncube of 4.0\nthread 0 y = 2.0\nthread 1 y = 4.0\n",
                               backend)
    tape.backward(grads={out: np.ones(2)})
    assert _printed(capfd.readouterr().out, backend) == []
    np.testing.assert_allclose(x.grad.numpy(), 24.0 * np.array([1.0, 2.0]) ** 2)  # d(8x^3)
    dots = ad.launch(k.shout, 2, [x], [out], record_tape=False,
                     tangents={"x": ad.array(np.ones(2), device=device)})
    assert _printed(capfd.readouterr().out, backend) == printed
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
