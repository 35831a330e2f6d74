"""Kernels of the mass-spring example (``springs.py``).

``springs_grad.py`` is generated from this file and committed:

    adjoint generate examples/springs_kernels.py -o examples/springs_grad.py

and CI runs ``adjoint check examples/springs_grad.py`` so it never goes stale.
"""
import math

import adjoint as ad


@ad.func
def spring_force(dx: float, dy: float, rest: float, stiffness: float):
    """The force on a spring's first end, as (fx, fy): Hooke's law along the spring."""
    length = math.sqrt(dx * dx + dy * dy)
    scale = stiffness * (length - rest) / length
    return scale * dx, scale * dy


@ad.kernel
def spring_forces(x: ad.array(dtype=float, ndim=2),
                  ends: ad.array(dtype=ad.int64, ndim=2),
                  rest: ad.array(dtype=float),
                  stiffness: float,
                  f: ad.array(dtype=float, ndim=2)):
    """Accumulate each spring's force into ``f`` at both of its ends."""
    s = ad.tid()
    i = ends[s, 0]
    j = ends[s, 1]
    fx, fy = spring_force(x[j, 0] - x[i, 0], x[j, 1] - x[i, 1], rest[s], stiffness)
    ad.atomic_add(f, i, 0, fx)
    ad.atomic_add(f, i, 1, fy)
    ad.atomic_sub(f, j, 0, fx)
    ad.atomic_sub(f, j, 1, fy)


@ad.kernel
def integrate(x: ad.array(dtype=float, ndim=2),
              v: ad.array(dtype=float, ndim=2),
              f: ad.array(dtype=float, ndim=2),
              pinned: ad.array(dtype=ad.int64),
              gravity: float, damping: float, dt: float,
              x_new: ad.array(dtype=float, ndim=2),
              v_new: ad.array(dtype=float, ndim=2)):
    """One semi-implicit Euler step of unit masses; pinned particles stay put."""
    p = ad.tid()
    if pinned[p] == 1:
        vx = 0.0
        vy = 0.0
    else:
        vx = damping * (v[p, 0] + dt * f[p, 0])
        vy = damping * (v[p, 1] + dt * (f[p, 1] - gravity))
    v_new[p, 0] = vx
    v_new[p, 1] = vy
    x_new[p, 0] = x[p, 0] + dt * vx
    x_new[p, 1] = x[p, 1] + dt * vy


@ad.kernel
def shape_loss(x: ad.array(dtype=float, ndim=2),
               target: ad.array(dtype=float, ndim=2),
               loss: ad.array(dtype=float)):
    """loss[0] += squared distance of each particle to its target position."""
    p = ad.tid()
    dx = x[p, 0] - target[p, 0]
    dy = x[p, 1] - target[p, 1]
    ad.atomic_add(loss, 0, dx * dx + dy * dy)
