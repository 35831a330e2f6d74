"""One thread of a kernel, its linearized program next to its transpose (docs/transpose.md)."""
import math

import numpy as np

import adjoint as ad


@ad.kernel
def wave(x: ad.array(dtype=float), a: float, y: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y[i] = a * math.sin(v) + v * v


if __name__ == "__main__":     # (`adjoint trace docs/transpose_kernel.py:wave` imports it)
    x = ad.array(np.array([0.5, 1.0, 2.0]))
    y = ad.zeros(3)
    view = ad.transpose_view(wave, 3, inputs=[x, 2.0], outputs=[y], thread=1)
    print(view)
