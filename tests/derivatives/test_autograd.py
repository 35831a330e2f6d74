"""ad.autograd: Jacobians (AD and FD), gradcheck, gradcheck_tape (reference case 5).

Expected Jacobians are closed forms; gradcheck failures come from a
deliberately wrong hand-written rule, so they are known to be wrong.
"""
import numpy as np
import pytest

import adjoint as ad

KERNELS = '''
@ad.kernel
def two_outputs(a: ad.array(dtype=float), b: ad.array(dtype=float),
                out1: ad.array(dtype=float), out2: ad.array(dtype=float)):
    i = ad.tid()
    out1[i] = a[i] * b[i]
    out2[i] = a[i] * math.sin(b[i])

@ad.kernel
def scaled_sum(x: ad.array(dtype=float), scale: float, idx: ad.array(dtype=ad.int64),
               s: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(s, idx[i], scale * x[i] * x[i])

@ad.func
def sq(x: float) -> float:
    return x * x

@ad.func_grad(sq)
def sq_grad(x: float, g: float) -> float:
    return 3.0 * x * g              # wrong on purpose: d(x*x)/dx is 2*x

@ad.kernel
def uses_sq(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = sq(x[i])

@ad.kernel
def cube(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] * x[i] * x[i]
'''

A = np.array([0.5, -1.0, 2.0, 1.5])
B = np.array([1.0, 0.3, -0.7, 2.5])


@pytest.fixture
def k(kernel_module):
    return kernel_module(KERNELS)


def _args():
    return ([ad.array(A, requires_grad=True), ad.array(B, requires_grad=True)],
            [ad.zeros(4, requires_grad=True), ad.zeros(4, requires_grad=True)])


CLOSED_FORM = {(0, 0): np.diag(B), (1, 0): np.diag(A),
               (0, 1): np.diag(np.sin(B)), (1, 1): np.diag(A * np.cos(B))}


@pytest.mark.parametrize("mask", [[("a", "out1"), ("b", "out2")], [(0, 0), (1, 1)],
                                  [("a", "out1"), (1, 1)], [(0, "out1"), ("b", 1)]],
                         ids=["names", "ints", "mixed", "mixed-within-pair"])
def test_jacobian_mask_names_ints_and_mixed_reference_5(backend, k, mask):
    inputs, outputs = _args()
    jac = ad.autograd.jacobian(k.two_outputs, 4, inputs, outputs, input_output_mask=mask)
    assert sorted(jac) == [(0, 0), (1, 1)]
    for key, block in jac.items():
        assert block.shape == (4, 4)
        np.testing.assert_allclose(block, CLOSED_FORM[key], rtol=1e-12, atol=1e-15)
    fd = ad.autograd.jacobian_fd(k.two_outputs, 4, inputs, outputs, input_output_mask=mask)
    assert sorted(fd) == [(0, 0), (1, 1)]
    for key, block in fd.items():
        np.testing.assert_allclose(block, CLOSED_FORM[key], atol=1e-8)


def test_jacobian_default_mask_has_every_float_pair(backend, k):
    inputs, outputs = _args()
    jac = ad.autograd.jacobian(k.two_outputs, 4, inputs, outputs)
    assert sorted(jac) == sorted(CLOSED_FORM)
    for key, block in jac.items():
        np.testing.assert_allclose(block, CLOSED_FORM[key], rtol=1e-12, atol=1e-15)


def test_jacobian_leaves_arrays_and_tape_alone(backend, k):
    inputs, outputs = _args()
    outputs[0].fill_(5.0)
    with ad.Tape() as tape:
        ad.autograd.jacobian(k.two_outputs, 4, inputs, outputs)
        ad.autograd.jacobian_fd(k.two_outputs, 4, inputs, outputs)
    assert tape.steps == []
    np.testing.assert_array_equal(inputs[0].numpy(), A)
    np.testing.assert_array_equal(outputs[0].numpy(), np.full(4, 5.0))
    for a in inputs + outputs:
        assert not a.grad.numpy().any()


def test_jacobian_non_square_with_scalars_and_int_arrays(backend, k):
    # s[idx[i]] += scale * x[i]^2 with idx = [0, 1, 0, 1]: block shape (2, 4)
    x = ad.array(A, requires_grad=True)
    idx = ad.array(np.array([0, 1, 0, 1], dtype=np.int64))
    s = ad.zeros(2, requires_grad=True)
    expected = np.array([[2 * 3.0 * A[0], 0, 2 * 3.0 * A[2], 0],
                         [0, 2 * 3.0 * A[1], 0, 2 * 3.0 * A[3]]])
    jac = ad.autograd.jacobian(k.scaled_sum, 4, [x, 3.0, idx], [s])
    assert sorted(jac) == [(0, 0)]
    np.testing.assert_allclose(jac[(0, 0)], expected, rtol=1e-12)
    by_name = ad.autograd.jacobian(k.scaled_sum, 4, [x, 3.0, idx], [s],
                                   input_output_mask=[("x", "s")])
    np.testing.assert_array_equal(by_name[(0, 0)], jac[(0, 0)])
    fd = ad.autograd.jacobian_fd(k.scaled_sum, 4, [x, 3.0, idx], [s], eps=1e-5)
    np.testing.assert_allclose(fd[(0, 0)], expected, atol=1e-7)
    assert ad.autograd.gradcheck(k.scaled_sum, 4, [x, 3.0, idx], [s])


def test_bad_mask_entries_are_explained(k):
    inputs, outputs = _args()
    with pytest.raises(ValueError, match="no input named 'c'.*a, b"):
        ad.autograd.jacobian(k.two_outputs, 4, inputs, outputs, input_output_mask=[("c", 0)])
    with pytest.raises(ValueError, match="output index 2 is out of range"):
        ad.autograd.jacobian(k.two_outputs, 4, inputs, outputs, input_output_mask=[(0, 2)])
    x, idx, s = ad.array(A), ad.array(np.zeros(4, dtype=np.int64)), ad.zeros(2)
    with pytest.raises(ValueError, match="'scale'.*has no gradient"):
        ad.autograd.jacobian(k.scaled_sum, 4, [x, 3.0, idx], [s],
                             input_output_mask=[("scale", "s")])


def test_gradcheck_passes_on_a_correct_kernel(backend, k):
    inputs, outputs = _args()
    assert ad.autograd.gradcheck(k.two_outputs, 4, inputs, outputs) is True
    assert ad.autograd.gradcheck(k.two_outputs, 4, inputs, outputs,
                                 input_output_mask=[("b", 1)]) is True


def test_wrong_func_grad_makes_gradcheck_fail_with_a_report(backend, k, capsys):
    x = ad.array([0.5, -1.0, 4.0], requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    assert ad.autograd.gradcheck(k.uses_sq, 3, [x], [out], raise_exception=False) is False
    report = capsys.readouterr().out
    lines = report.splitlines()
    assert "gradcheck of kernel 'uses_sq'" in lines[0] and "3 of 9" in lines[0]
    # worst first: x = 4 gives AD 12 against FD 8
    assert lines[2].startswith("  out[2] / x[2]: AD 12  FD 8")
    assert "out[0] / x[0]: AD 1.5  FD 1" in report
    with pytest.raises(ad.autograd.GradcheckError, match="AD 12  FD 8"):
        ad.autograd.gradcheck(k.uses_sq, 3, [x], [out])
    with pytest.raises(AssertionError):
        ad.autograd.gradcheck(k.uses_sq, 3, [x], [out])


def test_gradcheck_tape_names_the_first_launch_that_disagrees(backend, k, capsys):
    x = ad.array([0.5, -1.0, 4.0], requires_grad=True)
    y, z, w = (ad.zeros(3, requires_grad=True) for _ in range(3))
    with ad.Tape() as tape:
        ad.launch(k.cube, 3, inputs=[x], outputs=[y])       # correct
        ad.launch(k.uses_sq, 3, inputs=[y], outputs=[z])    # wrong rule
        ad.launch(k.uses_sq, 3, inputs=[z], outputs=[w])    # wrong rule too
    assert ad.autograd.gradcheck_tape(tape, raise_exception=False) is False
    report = capsys.readouterr().out
    assert report.startswith("launch #1 of kernel 'uses_sq'")
    assert "launch #2" not in report
    with pytest.raises(ad.autograd.GradcheckError, match="launch #1 of kernel 'uses_sq'"):
        ad.autograd.gradcheck_tape(tape)


def test_gradcheck_tape_passes_and_checks_the_values_each_launch_read(backend, k):
    x = ad.array([0.5, -1.0, 2.0], requires_grad=True)
    c = ad.array([3.0, 1.0, -2.0], requires_grad=True)
    y, z = ad.zeros(3, requires_grad=True), ad.zeros(3, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(k.cube, 3, inputs=[x], outputs=[y])
        ad.copy(x, c)                                        # overwrite what cube read
        ad.launch(k.cube, 3, inputs=[x], outputs=[z])
    assert ad.autograd.gradcheck_tape(tape) is True
    np.testing.assert_array_equal(x.numpy(), c.numpy())      # the tape's arrays untouched


def test_func_grad_with_the_documented_adj_ret_name(backend, kernel_module):
    m = kernel_module('''
        @ad.func
        def sq(x: float) -> float:
            return x * x

        @ad.func_grad(sq)
        def sq_grad(x: float, adj_ret: float) -> float:
            return 2.0 * x * adj_ret

        @ad.kernel
        def uses_sq(x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            out[i] = sq(x[i])
        ''')
    x, out = ad.array([1.0, 2.0], requires_grad=True), ad.zeros(2, requires_grad=True)
    assert ad.autograd.gradcheck(m.uses_sq, 2, [x], [out])
