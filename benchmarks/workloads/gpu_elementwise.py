"""The elementwise workload on the GPU (``run.py --device cuda``): a hand-written
``numba.cuda`` forward/adjoint pair, and the CPU module's adjoint, Warp and JAX
systems on the device. Apart from the CPU module so that importing it (as the
cold-start measurement does) does not import numba.cuda."""
import math

import numpy as np
from numba import cuda

from . import gpu
from .elementwise import Adjoint, AdjointUnchecked, Jax, Warp


# -- GPU: a hand-written numba.cuda pair (run.py --device cuda) -------------------
@cuda.jit
def _fwd_cuda(x, out):
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        out[i] = math.sin(v) * math.exp(-v * v) + v


@cuda.jit
def _bwd_cuda(x, adj_out, adj_x):
    """One thread per element, each writing its own adj_x[i]: a plain store."""
    i = cuda.grid(1)
    if i < x.size:
        v = x[i]
        e = math.exp(-v * v)
        adj_x[i] = adj_out[i] * (math.cos(v) * e - (v + v) * math.sin(v) * e + np.float32(1.0))


class NumbaCuda:
    def __init__(self, p):
        n = p.inputs["x"].size
        self.x = gpu.to_device(p.inputs["x"])
        self.out = gpu.zeros(n)
        self.adj_x = gpu.zeros(n)
        self.grid = gpu.grid_1d(n)
        self.seeds = gpu.DeviceSeeds()

    def forward(self):
        _fwd_cuda[self.grid](self.x, self.out)

    def fwd_bwd(self, seed):
        self.forward()
        _bwd_cuda[self.grid](self.x, self.seeds(seed, "out"), self.adj_x)

    sync = staticmethod(gpu.sync_cuda)

    def result(self):
        return {"out": self.out.copy_to_host()}, {"x": self.adj_x.copy_to_host()}


CUDA_SYSTEMS = {"adjoint": gpu.adjoint_on_cuda(Adjoint),
                "adjoint-unchecked": gpu.adjoint_on_cuda(AdjointUnchecked),
                "numba-cuda": NumbaCuda, "warp": gpu.warp_on_cuda(Warp), "jax": Jax}
