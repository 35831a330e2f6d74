"""What the GPU systems of every workload share (``run.py --device cuda``).

``adjoint_on_cuda(Adjoint)`` and ``warp_on_cuda(Warp)`` turn a workload's CPU
system classes into GPU ones: adjoint's arrays are made while ``run.py`` has
switched adjoint to its CUDA backend (new arrays default to ``device="cuda"``),
Warp's on ``cuda:0``, and each gets the ``sync()`` the harness calls before it
reads the clock, since GPU launches return before the GPU is done (adjoint's is
``ad.synchronize()``, which also raises a fault a checked launch found).
``grid_1d``/``grid_2d``, ``zero``, ``DeviceSeeds`` and ``sync_cuda`` are what
the hand-written ``numba.cuda`` systems use.
"""
import numpy as np
from numba import cuda

THREADS_1D = 256
THREADS_2D = (16, 16)


def _simulated():
    import numba
    return bool(numba.config.ENABLE_CUDASIM)


def sync_cuda():
    cuda.synchronize()


@cuda.jit
def _zero(flat):
    i = cuda.grid(1)
    if i < flat.size:
        flat[i] = 0


def zero(arr):
    """Zero a device array on the device."""
    flat = arr.reshape(arr.size)
    blocks, threads = grid_1d(flat.size)
    _zero[blocks, threads](flat)


def zeros(shape, dtype=np.float32):
    arr = cuda.device_array(shape, dtype)
    zero(arr)
    return arr


class DeviceSeeds:
    """The GPU copy of each seed array, made once (the seed dicts live all run long)."""

    def __init__(self):
        self._seen = {}

    def __call__(self, seed, key):
        if id(seed) not in self._seen:
            self._seen[id(seed)] = (seed, {k: cuda.to_device(v) for k, v in seed.items()})
        return self._seen[id(seed)][1][key]


def grid_1d(n):
    """``(blocks, threads)`` covering ``n`` threads (smaller blocks in the simulator)."""
    threads = 32 if _simulated() else THREADS_1D
    return (n + threads - 1) // threads, threads


def grid_2d(rows, cols):
    threads = (8, 4) if _simulated() else THREADS_2D
    return ((rows + threads[0] - 1) // threads[0], (cols + threads[1] - 1) // threads[1]), threads


def adjoint_on_cuda(cls):
    """``cls`` (a workload's adjoint system) timed on the GPU. Its seeds (numpy arrays)
    are copied to the GPU once, not in every timed round."""
    import adjoint as ad

    def fwd_bwd(self, seed):
        cache = self.__dict__.setdefault("_device_seeds", {})
        if id(seed) not in cache:      # the seed dict is kept, so its id is not reused
            cache[id(seed)] = (seed, {k: ad.array(v, device="cuda") for k, v in seed.items()})
        return cls.fwd_bwd(self, cache[id(seed)][1])

    # sync: ad.synchronize() waits as cuda.synchronize() does, and raises the fault of a
    # checked launch the round made (a launch does not wait to read it: one left unread
    # would surface in a later round, or at a timed launch once 256 are pending)
    return type(f"{cls.__name__}Cuda", (cls,), {"fwd_bwd": fwd_bwd,
                                                "sync": lambda self: ad.synchronize()})


def warp_on_cuda(cls):
    """``cls`` (a workload's Warp system) on Warp's ``cuda:0`` device."""
    def sync(self):
        self.wp.synchronize_device(self.device)
    return type(f"{cls.__name__}Cuda", (cls,), {"device": "cuda:0", "sync": sync})


def to_device(arr):
    return cuda.to_device(np.ascontiguousarray(arr))
