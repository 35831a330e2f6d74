"""A kernel's Hessian, one Hessian-vector product per column (run by
docs/derivatives.md)."""
import numpy as np

import adjoint as ad


@ad.kernel
def ring(x: ad.array(dtype=float), e: ad.array(dtype=float)):
    i = ad.tid()
    j = (i + 1) % 3
    ad.atomic_add(e, 0, x[i] * x[i] * x[j])     # e = sum_i x_i² x_(i+1)


x = np.array([0.5, -1.0, 2.0])
H = np.zeros((3, 3))
for j, v in enumerate(np.eye(3)):               # column j = H e_j
    hv, = ad.autograd.hvp(ring, 3, inputs=[x], outputs=[np.zeros(1)], v=[v])
    H[:, j] = hv
print("H from 3 HVPs:\n", H)

by_hand = np.zeros((3, 3))                      # d²e/dx_i² = 2 x_(i+1), d²e/dx_i dx_(i+1) = 2 x_i
for i in range(3):
    j = (i + 1) % 3
    by_hand[i, i] = 2 * x[j]
    by_hand[i, j] = by_hand[j, i] = 2 * x[i]
print("by hand:\n", by_hand)
