"""The nbody workload on the GPU (``run.py --device cuda``): a hand-written
``numba.cuda`` forward/adjoint pair, and the CPU module's adjoint, Warp and JAX
systems on the device. Apart from the CPU module so that importing it (as the
cold-start measurement does) does not import numba.cuda."""
import math

import numba
import numpy as np
from numba import cuda

from . import gpu
from .nbody import EPS2, Adjoint, AdjointUnchecked, Jax, Warp


# -- GPU: a hand-written numba.cuda pair (run.py --device cuda) -------------------
@cuda.jit
def _fwd_cuda(eps2, mass, pos, out, e_out):
    i = cuda.grid(1)
    n = mass.size
    if i < n:
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        e = numba.float32(0.0)          # float32 accumulators (float64 is slow on most GPUs)
        for j in range(n):
            dx, dy, dz = pos[j, 0] - xi, pos[j, 1] - yi, pos[j, 2] - zi
            e += mass[j] / math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
        e_out[i] = e
        out[i] = -mass[i] * e


@cuda.jit
def _bwd_cuda(eps2, mass, pos, e_in, adj_out, adj_mass, adj_pos):
    """The gather form of ``_bwd_par``: thread i owns body i's adjoints and stores
    them (no atomics, no zeroing)."""
    i = cuda.grid(1)
    n = mass.size
    if i < n:
        gi = adj_out[i]
        mi = mass[i]
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        am = numba.float32(0.0)
        ax = numba.float32(0.0)
        ay = numba.float32(0.0)
        az = numba.float32(0.0)
        for j in range(n):
            dx, dy, dz = pos[j, 0] - xi, pos[j, 1] - yi, pos[j, 2] - zi
            r = math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
            inv = numba.float32(1.0) / r
            gj = adj_out[j]
            am += gj * mass[j] * inv
            w = mi * mass[j] * (gi + gj) * inv * inv * inv
            ax += w * dx
            ay += w * dy
            az += w * dz
        adj_mass[i] = -gi * e_in[i] - am
        adj_pos[i, 0] = -ax
        adj_pos[i, 1] = -ay
        adj_pos[i, 2] = -az


class NumbaCuda:
    def __init__(self, p):
        self.pos, self.mass = gpu.to_device(p.inputs["pos"]), gpu.to_device(p.inputs["mass"])
        self.eps2 = np.float32(EPS2)
        n = p.inputs["mass"].size
        self.out = gpu.zeros(n)
        self.e = gpu.zeros(n)                  # kept by the forward for the adjoint
        self.adj_mass, self.adj_pos = gpu.zeros(n), gpu.zeros(p.inputs["pos"].shape)
        self.grid = gpu.grid_1d(n)
        self.seeds = gpu.DeviceSeeds()

    def forward(self):
        _fwd_cuda[self.grid](self.eps2, self.mass, self.pos, self.out, self.e)

    def fwd_bwd(self, seed):
        self.forward()
        _bwd_cuda[self.grid](self.eps2, self.mass, self.pos, self.e, self.seeds(seed, "out"),
                             self.adj_mass, self.adj_pos)

    sync = staticmethod(gpu.sync_cuda)

    def result(self):
        return ({"out": self.out.copy_to_host()},
                {"pos": self.adj_pos.copy_to_host(), "mass": self.adj_mass.copy_to_host()})


CUDA_SYSTEMS = {"adjoint": gpu.adjoint_on_cuda(Adjoint),
                "adjoint-unchecked": gpu.adjoint_on_cuda(AdjointUnchecked),
                "numba-cuda": NumbaCuda, "warp": gpu.warp_on_cuda(Warp), "jax": Jax}
