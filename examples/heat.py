"""Recover the initial temperature of a rod from its temperature some time later.

The 1-D heat equation u_t = alpha * u_xx is stepped explicitly (insulated
ends), one kernel launch per time step, all recorded on an ``ad.Tape``. The
loss compares the simulated final state with the observed one, plus a small
smoothness penalty on the initial state (the inverse problem is ill-posed:
diffusion erases fine detail, so some prior is needed); its gradient with
respect to every cell's initial temperature drives gradient descent.

Run:  python examples/heat.py [--iters 150] [--out heat.png]
"""
import argparse
import os
import sys

import numpy as np

import adjoint as ad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import save_figure  # noqa: E402

CELLS, RATE, SMOOTHNESS = 64, 0.2, 1e-3    # RATE = alpha * dt / dx**2 (stable below 0.5)


@ad.kernel
def diffuse(u: ad.array(dtype=float), rate: float, u_new: ad.array(dtype=float)):
    """One explicit step; the ends are insulated (zero flux)."""
    i = ad.tid()
    n = u.shape[0]
    left = u[i]
    right = u[i]
    if i > 0:
        left = u[i - 1]
    if i < n - 1:
        right = u[i + 1]
    u_new[i] = u[i] + rate * (left - 2.0 * u[i] + right)


@ad.kernel
def misfit(u: ad.array(dtype=float), observed: ad.array(dtype=float),
           loss: ad.array(dtype=float)):
    """loss[0] += squared difference to the observation."""
    i = ad.tid()
    d = u[i] - observed[i]
    ad.atomic_add(loss, 0, d * d)


@ad.kernel
def roughness(u: ad.array(dtype=float), weight: float, loss: ad.array(dtype=float)):
    """loss[0] += weight * squared jump between neighbouring cells."""
    i = ad.tid()
    d = u[i + 1] - u[i]
    ad.atomic_add(loss, 0, weight * d * d)


def evolve(u0, steps):
    """The temperature after ``steps`` time steps from ``u0``."""
    u = u0
    for _ in range(steps):
        u_new = ad.zeros(CELLS)
        ad.launch(diffuse, dim=CELLS, inputs=[u, RATE], outputs=[u_new])
        u = u_new
    return u


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=150, help="optimisation steps")
    p.add_argument("--steps", type=int, default=40, help="time steps of the simulation")
    p.add_argument("--out", default="heat.png", help="where to save the plot")
    args = p.parse_args(argv)

    s = np.linspace(0.0, 1.0, CELLS)
    true_u0 = np.exp(-((s - 0.3) / 0.06) ** 2) + 0.6 * (np.abs(s - 0.7) < 0.08)
    observed = evolve(ad.array(true_u0), args.steps)

    guess = np.zeros(CELLS)
    lr = 0.4                           # the loss's curvature is at most 2 + 8 * SMOOTHNESS
    losses = []
    for it in range(args.iters):
        u0 = ad.array(guess, requires_grad=True)
        loss = ad.zeros(1, requires_grad=True)
        with ad.Tape() as tape:
            u = evolve(u0, args.steps)
            ad.launch(misfit, dim=CELLS, inputs=[u, observed], outputs=[loss])
            ad.launch(roughness, dim=CELLS - 1, inputs=[u0, SMOOTHNESS], outputs=[loss])
        tape.backward(loss=loss)
        losses.append(float(loss.numpy()[0]))
        guess -= lr * u0.grad.numpy()           # plain gradient descent
        if it % 25 == 0 or it == args.iters - 1:
            print(f"iter {it:3d}  loss {losses[-1]:.3e}")
    err = np.abs(guess - true_u0).max()
    print(f"loss: {losses[0]:.3e} -> {losses[-1]:.3e}; max |u0 - true u0| = {err:.3f}")

    def draw(plt):
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        a.semilogy(losses)
        a.set(title="loss", xlabel="iteration")
        b.plot(s, true_u0, "k-", label="true initial state")
        b.plot(s, observed.numpy(), "C1:", label=f"observed after {args.steps} steps")
        b.plot(s, guess, "C0--", label="recovered initial state")
        b.set(title="temperature along the rod", xlabel="position")
        b.legend(fontsize="small")
        return fig
    save_figure(args.out, draw)
    return losses


if __name__ == "__main__":
    main()
