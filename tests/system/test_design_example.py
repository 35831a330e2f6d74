import numpy as np

import adjoint as ad


def test_design_example(backend, kernel_module):
    m = kernel_module('''
        @ad.func
        def soft_abs(x: float) -> float:
            if x > 0.0:
                y = x
            else:
                y = -x
            return y

        @ad.kernel
        def energy(x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            a = x[i]
            b = a
            out[i] = soft_abs(b) * math.sin(b)
        ''')
    xs = np.linspace(-1.0, 1.0, 8)
    x = ad.array(xs, requires_grad=True)
    out = ad.zeros(8, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.energy, dim=8, inputs=[x], outputs=[out])
    np.testing.assert_allclose(out.numpy(), np.abs(xs) * np.sin(xs))
    tape.backward(grads={out: np.ones(8)})
    expected = np.sign(xs) * np.sin(xs) + np.abs(xs) * np.cos(xs)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)
