"""Fit the rest lengths of a hanging mass-spring chain so it sags into a target shape.

The chain is pinned at both ends and simulated for a few hundred time steps
under gravity, every step recorded on an ``ad.Tape``; the loss is the distance
of the final shape to the target, and its gradient with respect to every
spring's rest length drives an Adam optimiser.

The kernels live in ``springs_kernels.py``; this script uses the committed,
pre-generated gradient module ``springs_grad.py`` (no transformer needed at
run time). Regenerate it after editing the kernels:

    adjoint generate examples/springs_kernels.py -o examples/springs_grad.py

Run:  python examples/springs.py [--iters 40] [--out springs.png]
"""
import argparse
import os
import sys

import numpy as np

import adjoint as ad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import springs_grad as K  # noqa: E402  (the generated module)
from _common import adam, save_figure  # noqa: E402

N = 16                     # particles
STIFFNESS, GRAVITY, DAMPING, DT = 200.0, 9.8, 0.9, 0.02


def make_chain():
    """A straight chain between two pins, springs to the next and next-but-one particle."""
    x0 = np.stack([np.linspace(0.0, N - 1.0, N) * 0.8, np.zeros(N)], axis=1)
    ends = [(i, i + 1) for i in range(N - 1)] + [(i, i + 2) for i in range(N - 2)]
    pinned = np.zeros(N, dtype=np.int64)
    pinned[[0, N - 1]] = 1
    return x0, np.array(ends, dtype=np.int64), pinned


def simulate(rest, x0, ends, pinned, steps, target=None, loss=None):
    """Run ``steps`` time steps from rest at ``x0``; return the final positions.

    With ``target`` and ``loss``, also accumulate the shape loss into ``loss``.
    """
    x = ad.array(x0)
    v = ad.zeros((N, 2))
    for _ in range(steps):
        f = ad.zeros((N, 2))
        ad.launch(K.spring_forces, dim=len(ends), inputs=[x, ends, rest, STIFFNESS], outputs=[f])
        x_new, v_new = ad.zeros((N, 2)), ad.zeros((N, 2))
        ad.launch(K.integrate, dim=N, inputs=[x, v, f, pinned, GRAVITY, DAMPING, DT],
                  outputs=[x_new, v_new])
        x, v = x_new, v_new
    if target is not None:
        ad.launch(K.shape_loss, dim=N, inputs=[x, target], outputs=[loss])
    return x


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=40, help="optimisation steps")
    p.add_argument("--steps", type=int, default=100, help="time steps per simulation")
    p.add_argument("--out", default="springs.png", help="where to save the plot")
    args = p.parse_args(argv)

    x0, ends, pinned = make_chain()
    span = (ends[:, 1] - ends[:, 0]) * 0.8           # the straight chain's lengths
    middle = 0.5 * (ends[:, 0] + ends[:, 1]) / (N - 1)  # where along the chain, 0..1
    true_rest = span * (1.0 + 0.3 * np.sin(2.0 * np.pi * middle))  # stretched, then shrunk
    target = simulate(ad.array(true_rest), x0, ends, pinned, args.steps)

    rest = span.copy()                                # first guess: the straight lengths
    step = adam(lr=0.02)
    losses = []
    for it in range(args.iters):
        rest_arr = ad.array(rest, requires_grad=True)
        loss = ad.zeros(1, requires_grad=True)
        with ad.Tape() as tape:
            final = simulate(rest_arr, x0, ends, pinned, args.steps, target, loss)
        tape.backward(loss=loss)
        losses.append(float(loss.numpy()[0]))
        step(rest, rest_arr.grad.numpy())
        if it % 10 == 0 or it == args.iters - 1:
            print(f"iter {it:3d}  loss {losses[-1]:.6f}")

    print(f"loss: {losses[0]:.6f} -> {losses[-1]:.6f}")

    def draw(plt):
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        a.semilogy(losses)
        a.set(title="shape loss", xlabel="iteration")
        t, f = target.numpy(), final.numpy()
        b.plot(x0[:, 0], x0[:, 1], "k:", label="initial chain")
        b.plot(t[:, 0], t[:, 1], "o-", label="target", alpha=0.6)
        b.plot(f[:, 0], f[:, 1], "x--", label="fitted rest lengths")
        b.set(title="hanging chain", aspect="equal")
        b.legend(loc="lower left", fontsize="small")
        return fig
    save_figure(args.out, draw)
    return losses


if __name__ == "__main__":
    main()
