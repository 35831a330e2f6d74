"""``print`` in kernels and funcs (issue 13): the forward prints, and the JVP (which
runs instead of the forward); a backward's replay prints nothing. Gradients are those
of the same kernel without the print. On a GPU, whose threads' prints come out only
when the host waits for it, a launch of a kernel that prints waits (its launcher's
``prints=True``), so what it printed is there when the launch returns."""
import numpy as np
import pytest
from tests.gpu_tolerance import real_gpu

import adjoint as ad
from adjoint.emit.spec import prints
from adjoint.errors import TransformError

SOURCE = '''
@ad.func
def cube(v: float) -> float:
    print("cube of", v)
    return v * v * v


@ad.func
def twice(v: float) -> float:
    return 2.0 * v


@ad.func
def via(v: float) -> float:
    return cube(v) + 1.0


@ad.kernel
def shout(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    y = x[i] * 2.0
    print("thread", i, "y =", y)
    out[i] = cube(y)


@ad.kernel
def quiet(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = twice(x[i])


@ad.kernel
def deep(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = via(x[i])
'''


def _printed(text, backend):
    """What was printed: its lines, sorted; under the CUDA simulator, which runs a
    block's threads as Python threads whose prints interleave argument by argument, its
    characters other than blanks, sorted; on a GPU, whose ``printf`` spells a float
    ``%f`` (2.000000), its lines sorted with every number read as a float."""
    if backend == "cuda" and not real_gpu(backend):
        return sorted(c for c in text if not c.isspace())
    if backend == "cuda":
        return sorted(" ".join(_number(w) for w in line.split())
                      for line in text.splitlines() if line.strip())
    return sorted(line for line in text.splitlines() if line.strip())


def _number(word):
    try:
        return repr(float(word))
    except ValueError:
        return word


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
    if backend == "cuda":   # the launches that print wait for the GPU, the others do not
        with open(k.shout.modules["cuda"].__file__, encoding="utf-8") as fh:
            spec = fh.read().split("shout = adjoint.runtime.KernelSpec(")[1]
        launchers = {line.split("=")[0].strip(): line for line in spec.splitlines()
                     if "rt.launcher(" in line}
        assert {name for name, line in launchers.items() if "prints=True" in line} == \
            {"forward", "jvp"}, launchers


def test_which_kernels_print(kernel_module):
    """A print in the kernel, in a func it calls or in one that func calls; none in
    ``quiet`` or what it calls."""
    k = kernel_module(SOURCE)
    assert prints(k.shout.transformed) and prints(k.deep.transformed)
    assert not prints(k.quiet.transformed)


def test_print_is_a_statement_only(kernel_module):
    with pytest.raises(TransformError, match=r"print\(\) cannot be used here") as err:
        kernel_module('''
@ad.kernel
def bad(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = print(x[i])
''').bad.transformed
    assert ".py:" in str(err.value) and "bad" in str(err.value)
