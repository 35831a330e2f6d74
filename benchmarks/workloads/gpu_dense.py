"""The dense workload on the GPU (``run.py --device cuda``): a hand-written
``numba.cuda`` forward/adjoint pair, and the CPU module's adjoint, Warp and JAX
systems on the device. Apart from the CPU module so that importing it (as the
cold-start measurement does) does not import numba.cuda."""
import math

import numba
from numba import cuda

from . import gpu
from .dense import Adjoint, AdjointUnchecked, Jax, Warp


# -- GPU: a hand-written numba.cuda pair (run.py --device cuda) -------------------
@cuda.jit
def _fwd_cuda(W, x, b, y):
    i = cuda.grid(1)
    if i < W.shape[0]:
        s = b[i]
        for k in range(x.size):
            s += W[i, k] * x[k]
        y[i] = math.tanh(s)


@cuda.jit
def _bwd_cuda_rows(y, adj_y, adj_b):
    """adj_b[i] = g_i = adj_y[i] (1 - y[i]^2); the two kernels below read g from adj_b."""
    i = cuda.grid(1)
    if i < y.size:
        adj_b[i] = adj_y[i] * (numba.float32(1.0) - y[i] * y[i])


@cuda.jit
def _bwd_cuda_W(x, adj_b, adj_W):
    """One thread per entry (k along the fast thread index, so the stores coalesce)."""
    k, i = cuda.grid(2)
    if i < adj_W.shape[0] and k < adj_W.shape[1]:
        adj_W[i, k] = adj_b[i] * x[k]


@cuda.jit
def _bwd_cuda_x(W, adj_b, adj_x):
    """The gather form of the transpose: thread k stores adj_x[k] = sum_i g_i W[i, k]
    (neighbouring threads read neighbouring columns of a row; no atomics)."""
    k = cuda.grid(1)
    if k < W.shape[1]:
        acc = numba.float32(0.0)
        for i in range(W.shape[0]):
            acc += adj_b[i] * W[i, k]
        adj_x[k] = acc


class NumbaCuda:
    def __init__(self, p):
        self.W, self.x, self.b = (gpu.to_device(p.inputs[k]) for k in ("W", "x", "b"))
        m, n = p.inputs["W"].shape
        self.y = gpu.zeros(m)
        self.adj_W, self.adj_x, self.adj_b = gpu.zeros((m, n)), gpu.zeros(n), gpu.zeros(m)
        self.rows, self.cols = gpu.grid_1d(m), gpu.grid_1d(n)
        self.entries = gpu.grid_2d(n, m)
        self.seeds = gpu.DeviceSeeds()

    def forward(self):
        _fwd_cuda[self.rows](self.W, self.x, self.b, self.y)

    def fwd_bwd(self, seed):
        self.forward()
        _bwd_cuda_rows[self.rows](self.y, self.seeds(seed, "y"), self.adj_b)
        _bwd_cuda_W[self.entries](self.x, self.adj_b, self.adj_W)
        _bwd_cuda_x[self.cols](self.W, self.adj_b, self.adj_x)

    sync = staticmethod(gpu.sync_cuda)

    def result(self):
        return ({"y": self.y.copy_to_host()},
                {"W": self.adj_W.copy_to_host(), "x": self.adj_x.copy_to_host(),
                 "b": self.adj_b.copy_to_host()})


CUDA_SYSTEMS = {"adjoint": gpu.adjoint_on_cuda(Adjoint),
                "adjoint-unchecked": gpu.adjoint_on_cuda(AdjointUnchecked),
                "numba-cuda": NumbaCuda, "warp": gpu.warp_on_cuda(Warp), "jax": Jax}
