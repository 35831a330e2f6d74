"""The heat stencil of ``stencil.py`` with periodic boundaries, as a user writes it.

Used by the ``stencil-user`` workload (``user.py``): 50 launches of
``heat_periodic`` (the neighbours of the first and last rows and columns wrap
around: ``ip = i + 1; if ip == n0: ip = 0``), then one launch of ``field_sum``
adding every point of the final field into a one-element loss. Here: those two
kernels, the float64 reference and the hand-written numba pair (the adjoint of a
periodic stencil is the same stencil, so its parallel form gathers).
"""
import numba
import numpy as np

import adjoint as ad

from . import optional, stencil

NAME = "stencil"
SIZES = stencil.SIZES
ALPHA = stencil.ALPHA
TITLE = "50 launches of a periodic 2-D heat stencil on a tape"
USER_TITLE = ("50 launches of a periodic heat stencil (ip = i + 1; if ip == n0: ip = 0) "
              "and a 51st summing the field into the loss")
make = stencil.make


@ad.kernel
def heat_periodic(alpha: float, u: ad.array(dtype=ad.float32, ndim=2),
                  out: ad.array(dtype=ad.float32, ndim=2)):
    i, j = ad.tid()
    n0 = u.shape[0]
    n1 = u.shape[1]
    ip = i + 1
    if ip == n0:
        ip = 0
    im = i - 1
    if im < 0:
        im = n0 - 1
    jp = j + 1
    if jp == n1:
        jp = 0
    jm = j - 1
    if jm < 0:
        jm = n1 - 1
    c = u[i, j]
    out[i, j] = c + alpha * (u[ip, j] + u[im, j] + u[i, jp] + u[i, jm] - 4.0 * c)


@ad.kernel
def field_sum(u: ad.array(dtype=ad.float32, ndim=2), loss: ad.array(dtype=ad.float32)):
    i, j = ad.tid()
    ad.atomic_add(loss, 0, u[i, j])


def _step64(u):
    return u + ALPHA * (np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1)
                        + np.roll(u, -1, 1) - 4.0 * u)


def ref_forward(inp):
    u = np.asarray(inp["u0"], np.float64)
    for _ in range(inp["steps"]):
        u = _step64(u)
    return {"u": u}


def reference(p, seed):
    g = seed["u"].astype(np.float64)
    for _ in range(p.inputs["steps"]):
        g = _step64(g)            # the periodic stencil is symmetric: its own transpose
    return ref_forward(p.inputs), {"u0": g}


@numba.njit(cache=True)
def _step_ser(alpha, u, out):
    nx, ny = u.shape
    for i in range(nx):
        ip = i + 1 if i + 1 < nx else 0
        im = i - 1 if i > 0 else nx - 1
        for j in range(ny):
            jp = j + 1 if j + 1 < ny else 0
            jm = j - 1 if j > 0 else ny - 1
            c = u[i, j]
            out[i, j] = c + alpha * (u[ip, j] + u[im, j] + u[i, jp] + u[i, jm] - 4 * c)


@numba.njit(cache=True, parallel=True)
def _step_par(alpha, u, out):
    nx, ny = u.shape
    for i in numba.prange(nx):
        ip = i + 1 if i + 1 < nx else 0
        im = i - 1 if i > 0 else nx - 1
        for j in range(ny):
            jp = j + 1 if j + 1 < ny else 0
            jm = j - 1 if j > 0 else ny - 1
            c = u[i, j]
            out[i, j] = c + alpha * (u[ip, j] + u[im, j] + u[i, jp] + u[i, jm] - 4 * c)


class NumbaSerial(stencil.NumbaSerial):
    """The adjoint of each step is the step itself (gather form, race-free)."""
    step, step_bwd = staticmethod(_step_ser), staticmethod(_step_ser)


class NumbaParallel(stencil.NumbaSerial):
    step, step_bwd = staticmethod(_step_par), staticmethod(_step_par)


class Warp(stencil.Warp):
    """Warp's tape over 50 launches of the same periodic kernel (Warp's ``if``s, as above)."""

    def __init__(self, p):
        super().__init__(p)
        self.kern = optional.warp_kernels().heat_periodic
