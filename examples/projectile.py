"""Aim a volley of projectiles: optimise launch velocities so each one, flying
through air drag and bouncing off the ground, is at its target when time is up.

Every time step of the simulation is a kernel launch recorded on an
``ad.Tape``; ``tape.backward`` carries the miss distance back through all of
them (and through the bounce, a branch in the kernel) to the launch
velocities, which an Adam optimiser then updates.

Run:  python examples/projectile.py [--iters 60] [--out projectile.png]
"""
import argparse
import math
import os
import sys

import numpy as np

import adjoint as ad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import adam, save_figure  # noqa: E402

GRAVITY, DRAG, RESTITUTION, DT = 9.81, 0.05, 0.7, 0.01


@ad.kernel
def step(x: ad.array(dtype=float, ndim=2), v: ad.array(dtype=float, ndim=2),
         gravity: float, drag: float, restitution: float, dt: float,
         x_new: ad.array(dtype=float, ndim=2), v_new: ad.array(dtype=float, ndim=2)):
    """One explicit Euler step with quadratic drag and a bounce off the ground y = 0."""
    p = ad.tid()
    vx = v[p, 0]
    vy = v[p, 1]
    speed = math.sqrt(vx * vx + vy * vy)
    vx = vx - dt * drag * speed * vx
    vy = vy - dt * (gravity + drag * speed * vy)
    px = x[p, 0] + dt * vx
    py = x[p, 1] + dt * vy
    if py < 0.0:                     # hit the ground: reflect, losing some speed
        py = -py
        vy = -restitution * vy
    x_new[p, 0] = px
    x_new[p, 1] = py
    v_new[p, 0] = vx
    v_new[p, 1] = vy


@ad.kernel
def miss(x: ad.array(dtype=float, ndim=2), target: ad.array(dtype=float, ndim=2),
         loss: ad.array(dtype=float)):
    """loss[0] += squared distance of each projectile to its target."""
    p = ad.tid()
    dx = x[p, 0] - target[p, 0]
    dy = x[p, 1] - target[p, 1]
    ad.atomic_add(loss, 0, dx * dx + dy * dy)


def fly(v0, steps, target=None, loss=None, keep_path=False):
    """Simulate from the origin with launch velocities ``v0``; return the final
    positions (and every position when ``keep_path``)."""
    n = v0.shape[0]
    x, v = ad.zeros((n, 2)), v0
    path = [x.numpy().copy()]
    for _ in range(steps):
        x_new, v_new = ad.zeros((n, 2)), ad.zeros((n, 2))
        ad.launch(step, dim=n, inputs=[x, v, GRAVITY, DRAG, RESTITUTION, DT],
                  outputs=[x_new, v_new])
        x, v = x_new, v_new
        if keep_path:
            path.append(x.numpy().copy())
    if target is not None:
        ad.launch(miss, dim=n, inputs=[x, target], outputs=[loss])
    return (x, np.array(path)) if keep_path else x


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=60, help="optimisation steps")
    p.add_argument("--steps", type=int, default=150, help="time steps of each flight")
    p.add_argument("--out", default="projectile.png", help="where to save the plot")
    args = p.parse_args(argv)

    # Three targets, each to be hit in mid-air when the time is up.
    target = ad.array([[3.1, 1.1], [5.9, 2.0], [8.9, 1.2]])
    velocity = np.array([[4.0, 9.5]] * 3)          # first guess: all the same
    update = adam(lr=0.2)
    losses = []
    for it in range(args.iters):
        v0 = ad.array(velocity, requires_grad=True)
        loss = ad.zeros(1, requires_grad=True)
        with ad.Tape() as tape:
            fly(v0, args.steps, target, loss)
        tape.backward(loss=loss)
        losses.append(float(loss.numpy()[0]))
        update(velocity, v0.grad.numpy())
        if it % 10 == 0 or it == args.iters - 1:
            print(f"iter {it:3d}  miss {losses[-1]:.6f}")
    print(f"squared miss distance: {losses[0]:.6f} -> {losses[-1]:.6f}")
    print("launch velocities:\n", np.array2string(velocity, precision=3))

    def draw(plt):
        _, path = fly(ad.array(velocity), args.steps, keep_path=True)
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        a.semilogy(losses)
        a.set(title="squared miss distance", xlabel="iteration")
        t = target.numpy()
        for k in range(path.shape[1]):
            b.plot(path[:, k, 0], path[:, k, 1], label=f"projectile {k}")
        b.plot(t[:, 0], t[:, 1], "k*", markersize=12, label="targets")
        b.axhline(0.0, color="grey", lw=0.8)
        b.set(title=f"trajectories after {len(losses)} steps", xlabel="x", ylabel="y")
        b.legend(fontsize="small")
        return fig
    save_figure(args.out, draw)
    return losses


if __name__ == "__main__":
    main()
