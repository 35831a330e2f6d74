"""First and second derivatives of a func, and a Hessian-vector product of a kernel.

``ad.grad``, ``ad.hessian`` and ``ad.grad(ad.grad(f))`` differentiate ``spiral``,
a func with a loop and a branch, called from plain Python on floats;
``ad.autograd.hvp`` gives a Hessian-vector product of ``pair_energy``, a kernel
with a loop and a branch. Each is checked against central finite differences in
float64: the gradient against differences of the func, the second derivatives
against differences of the gradient (checked first), the HVP against differences
of the kernel's gradient along the direction. Exits non-zero on a mismatch.

Run:  python examples/derivatives.py
"""
import math

import numpy as np

import adjoint as ad


@ad.func
def spiral(x: float, y: float) -> float:
    s = x
    for k in range(4):
        if s > 1.0:                      # a branch on a value the loop carries
            s = math.sqrt(s) * y + 0.1 * k
        else:
            s = s * s + y * math.sin(x)
    return s * y


@ad.kernel
def pair_energy(n: int, x: ad.array(dtype=float), e: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for j in range(n):                   # every thread reads every input
        d = x[j] - x[i]
        if d > 0.0:
            s = s + d * d * d
        else:
            s = s + math.cos(d)
    ad.atomic_add(e, 0, s * x[i])


EPS = 1e-6
RTOL = 1e-6


def close(a, b, rtol=RTOL):
    """``a`` and ``b`` agree to ``rtol`` relative to the larger of them (or to 1)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return bool(np.all(np.abs(a - b) <= rtol * np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))))


def fd(fn, args, k, eps=EPS):
    """Central difference of ``fn(*args)`` in argument ``k``."""
    up, down = list(args), list(args)
    up[k] += eps
    down[k] -= eps
    return (np.asarray(fn(*up), float) - np.asarray(fn(*down), float)) / (2 * eps)


def kernel_gradient(x, n):
    """d sum(e) / d x of ``pair_energy``, by its backward (a tape)."""
    xa, e = ad.array(x, requires_grad=True), ad.zeros(1, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(pair_energy, dim=n, inputs=[n, xa], outputs=[e])
    tape.backward(loss=e)
    return xa.grad.numpy()


def main():
    checks = []
    point = (0.7, 1.3)

    grad = ad.grad(spiral, argnums=(0, 1))(*point)
    grad_fd = [fd(spiral, point, k) for k in (0, 1)]
    checks.append(("ad.grad", close(grad, grad_fd)))

    hess = np.array(ad.hessian(spiral, argnums=(0, 1))(*point))
    dgrad = lambda x, y: ad.grad(spiral, argnums=(0, 1))(x, y)   # noqa: E731
    hess_fd = np.stack([fd(dgrad, point, j) for j in (0, 1)], axis=1)
    checks.append(("ad.hessian", close(hess, hess_fd)))

    d2x = ad.grad(ad.grad(spiral))(*point)
    d2x_fd = fd(ad.grad(spiral), point, 0)
    checks.append(("ad.grad(ad.grad(f))", close(d2x, d2x_fd) and close(d2x, hess[0, 0])))

    x = np.array([0.3, 0.9, -0.4, 0.6])
    v = np.array([1.0, 0.5, -2.0, 0.25])
    n = len(x)
    _, hv = ad.autograd.hvp(pair_energy, n, [n, x], [np.zeros(1)], [None, v])
    hv_fd = (kernel_gradient(x + EPS * v, n) - kernel_gradient(x - EPS * v, n)) / (2 * EPS)
    checks.append(("ad.autograd.hvp", close(hv, hv_fd)))

    print(f"spiral{point} = {spiral(*point):.8f}")
    print(f"ad.grad, argnums=(0, 1):   ({grad[0]:.8f}, {grad[1]:.8f})")
    print(f"ad.hessian, argnums=(0, 1): [[{hess[0, 0]:.8f}, {hess[0, 1]:.8f}],")
    print(f"                             [{hess[1, 0]:.8f}, {hess[1, 1]:.8f}]]")
    print(f"ad.grad(ad.grad(spiral)):  {d2x:.8f}")
    print(f"pair_energy: H v = {np.array2string(hv, precision=8, floatmode='fixed')}")
    # the size of a difference depends on the machine's rounding: print the check, not it
    for what, ok in checks:
        print(f"{what:<22} agrees with central differences (rtol {RTOL:g}): {ok}")
    bad = [what for what, ok in checks if not ok]
    print("-> OK" if not bad else f"-> MISMATCH: {', '.join(bad)}")
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
