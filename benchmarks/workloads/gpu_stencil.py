"""The stencil workload on the GPU (``run.py --device cuda``): a hand-written
``numba.cuda`` forward/adjoint pair, and the CPU module's adjoint, Warp and JAX
systems on the device. Apart from the CPU module so that importing it (as the
cold-start measurement does) does not import numba.cuda."""

import numpy as np
from numba import cuda

from . import gpu
from .stencil import ALPHA, Adjoint, AdjointUnchecked, Jax, Warp


# -- GPU: a hand-written numba.cuda pair (run.py --device cuda) -------------------
# One thread per grid point; the thread's x index runs along a row (j), so that
# neighbouring threads touch neighbouring addresses.
@cuda.jit
def _step_cuda(alpha, u, out):
    j, i = cuda.grid(2)
    nx, ny = u.shape
    if i < nx and j < ny:
        c = u[i, j]
        if 0 < i < nx - 1 and 0 < j < ny - 1:
            out[i, j] = c + alpha * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]
                                     - np.float32(4.0) * c)
        else:
            out[i, j] = c


@cuda.jit(device=True)
def _interior_cuda(i, j, nx, ny):
    return 0 < i < nx - 1 and 0 < j < ny - 1


@cuda.jit
def _step_bwd_cuda(alpha, adj_out, adj_u):
    """Gather form (race-free, no atomics): input point (i, j) collects from the
    outputs that read it and stores its own adj_u[i, j]."""
    j, i = cuda.grid(2)
    nx, ny = adj_out.shape
    if i < nx and j < ny:
        a = adj_out[i, j]
        g = a - np.float32(4.0) * alpha * a if _interior_cuda(i, j, nx, ny) else a
        if i > 0 and _interior_cuda(i - 1, j, nx, ny):
            g += alpha * adj_out[i - 1, j]
        if i < nx - 1 and _interior_cuda(i + 1, j, nx, ny):
            g += alpha * adj_out[i + 1, j]
        if j > 0 and _interior_cuda(i, j - 1, nx, ny):
            g += alpha * adj_out[i, j - 1]
        if j < ny - 1 and _interior_cuda(i, j + 1, nx, ny):
            g += alpha * adj_out[i, j + 1]
        adj_u[i, j] = g


class NumbaCuda:
    """A Python loop of 50 launches of the step kernel, all fields kept on the GPU
    (as on a tape); the adjoint sweeps back with two ping-pong buffers."""

    def __init__(self, p):
        u0, self.steps = p.inputs["u0"], p.inputs["steps"]
        nx, ny = u0.shape
        self.alpha = np.float32(ALPHA)
        u = np.zeros((self.steps + 1, nx, ny), np.float32)
        u[0] = u0
        self.u = gpu.to_device(u)
        self.fields = [self.u[k] for k in range(self.steps + 1)]
        self.adj = [gpu.zeros((nx, ny)), gpu.zeros((nx, ny))]
        self.grid = gpu.grid_2d(ny, nx)         # x along j (columns), y along i (rows)
        self.seeds = gpu.DeviceSeeds()
        self.grad = None

    def forward(self):
        for k in range(self.steps):
            _step_cuda[self.grid](self.alpha, self.fields[k], self.fields[k + 1])

    def fwd_bwd(self, seed):
        self.forward()
        a, b = self.seeds(seed, "u"), self.adj[0]
        for k in range(self.steps):
            _step_bwd_cuda[self.grid](self.alpha, a, b)
            a, b = b, self.adj[(k + 1) % 2]
        self.grad = a

    sync = staticmethod(gpu.sync_cuda)

    def result(self):
        return {"u": self.fields[-1].copy_to_host()}, {"u0": self.grad.copy_to_host()}


CUDA_SYSTEMS = {"adjoint": gpu.adjoint_on_cuda(Adjoint),
                "adjoint-unchecked": gpu.adjoint_on_cuda(AdjointUnchecked),
                "numba-cuda": NumbaCuda, "warp": gpu.warp_on_cuda(Warp), "jax": Jax}
