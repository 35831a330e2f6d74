"""The springs workload on the GPU (``run.py --device cuda``): a hand-written
``numba.cuda`` forward/adjoint pair, and the CPU module's adjoint, Warp and JAX
systems on the device. Apart from the CPU module so that importing it (as the
cold-start measurement does) does not import numba.cuda."""
import math

import numpy as np
from numba import cuda

from . import gpu
from .springs import K, Adjoint, AdjointUnchecked, Jax, Warp


# -- GPU: a hand-written numba.cuda pair (run.py --device cuda) -------------------
@cuda.jit
def _fwd_cuda(a, b, rest, k, pos, energy):
    s = cuda.grid(1)
    if s < a.size:
        i, j = a[s], b[s]
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        dz = pos[i, 2] - pos[j, 2]
        d = math.sqrt(dx * dx + dy * dy + dz * dz) - rest[s]
        cuda.atomic.add(energy, 0, k * d * d)


@cuda.jit
def _bwd_cuda(a, b, rest, k, pos, adj_energy, adj_rest, adj_pos):
    s = cuda.grid(1)
    if s < a.size:
        i, j = a[s], b[s]
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        dz = pos[i, 2] - pos[j, 2]
        length = math.sqrt(dx * dx + dy * dy + dz * dz)
        d = length - rest[s]
        gd = adj_energy[0] * (k + k) * d
        adj_rest[s] = -gd
        c = gd / length
        cuda.atomic.add(adj_pos, (i, 0), c * dx)
        cuda.atomic.add(adj_pos, (i, 1), c * dy)
        cuda.atomic.add(adj_pos, (i, 2), c * dz)
        cuda.atomic.add(adj_pos, (j, 0), -c * dx)
        cuda.atomic.add(adj_pos, (j, 1), -c * dy)
        cuda.atomic.add(adj_pos, (j, 2), -c * dz)


class NumbaCuda:
    def __init__(self, p):
        inp = p.inputs
        self.a, self.b, self.rest, self.pos = (gpu.to_device(inp[k])
                                               for k in ("a", "b", "rest", "pos"))
        self.k = np.float32(K)
        self.energy = gpu.zeros(1)
        self.adj_rest = gpu.zeros(inp["rest"].shape)
        self.adj_pos = gpu.zeros(inp["pos"].shape)
        self.grid = gpu.grid_1d(inp["a"].size)
        self.seeds = gpu.DeviceSeeds()

    def forward(self):
        gpu.zero(self.energy)
        _fwd_cuda[self.grid](self.a, self.b, self.rest, self.k, self.pos, self.energy)

    def fwd_bwd(self, seed):
        gpu.zero(self.adj_pos)
        self.forward()
        _bwd_cuda[self.grid](self.a, self.b, self.rest, self.k, self.pos,
                             self.seeds(seed, "energy"), self.adj_rest, self.adj_pos)

    sync = staticmethod(gpu.sync_cuda)

    def result(self):
        return ({"energy": self.energy.copy_to_host()},
                {"pos": self.adj_pos.copy_to_host(), "rest": self.adj_rest.copy_to_host()})


CUDA_SYSTEMS = {"adjoint": gpu.adjoint_on_cuda(Adjoint),
                "adjoint-unchecked": gpu.adjoint_on_cuda(AdjointUnchecked),
                "numba-cuda": NumbaCuda, "warp": gpu.warp_on_cuda(Warp), "jax": Jax}
