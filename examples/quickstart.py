"""adjoint in one screen: differentiate a kernel, show its backward, check it.

Run:  python examples/quickstart.py
"""
import math

import numpy as np

import adjoint as ad


@ad.func
def soft_abs(x: float) -> float:
    if x > 0.0:
        y = x
    else:
        y = -x
    return y


@ad.kernel
def energy(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    a = x[i]
    b = a                      # an alias: gradients must still flow
    s = 0.0
    for k in range(n):         # a loop with a carried value
        s = s * 0.5 + soft_abs(b) * math.sin(b + k)
    out[i] = s


def total(xs, n=3):
    """Forward only: the sum of the kernel's outputs for inputs ``xs``."""
    x = ad.array(xs)
    out = ad.zeros(len(xs))
    ad.launch(energy, dim=len(xs), inputs=[n, x], outputs=[out])
    return out.numpy().sum()


def main():
    xs = np.linspace(-1.0, 1.0, 8)
    x = ad.array(xs, requires_grad=True)
    out = ad.zeros(8, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(energy, dim=8, inputs=[3, x], outputs=[out])
    tape.backward(grads={out: np.ones(8)})

    eps = 1e-6
    fd = np.array([(total(xs + eps * e) - total(xs - eps * e)) / (2 * eps) for e in np.eye(8)])
    err = np.max(np.abs(fd - x.grad.numpy()))

    print("the backward of 'energy', one thread, rule by rule (every statement's adjoint in\n"
          "reverse order; `adjoint show examples/quickstart.py:energy --optimized` shows the\n"
          "optimized code that runs, grid and all):\n")
    print(ad.source(energy, stage="backward", optimize=False))
    print("forward  out      =", np.array2string(out.numpy(), precision=6))
    print("gradient d(sum)/dx =", np.array2string(x.grad.numpy(), precision=6))
    print("finite differences =", np.array2string(fd, precision=6))
    print(f"max |AD - FD| = {err:.2e} -> {'OK' if err < 1e-6 else 'MISMATCH'}")
    if err >= 1e-6:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
