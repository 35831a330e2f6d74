"""A Warp program on adjoint: smoke carried by a swirling wind over a 2-D grid, and the
initial smoke that arrives as a target pattern, its gradient taken with checkpoints.

Written as a program for NVIDIA Warp is (``wp.array2d`` fields, ``wp.vec2`` velocities, a
``@wp.func`` bilinear lookup that reads an array and clamps at the walls, semi-Lagrangian
advection, a diffusion stencil, 2-D launches), with the one import changed to ``import
adjoint.warp as wp``. Its gradient is checkpointed as Warp's checkpointed fluid example
does it by hand: the forward runs without a tape and keeps every ``--every``-th state;
the backward runs each segment again from its state on a fresh ``wp.Tape`` and hands the
segment's input gradient to the segment before it (``tape.backward(grads=...)``). Memory:
the checkpoints and one segment's intermediates, not every step's. Before optimizing, the
checkpointed gradient is compared with a plain tape's and with central differences.

Run:  python examples/warp_fluid.py [--iters 20] [--steps 40] [--every 10] [--device cpu]
"""
import argparse

import numpy as np

import adjoint.warp as wp


@wp.func
def lookup(f: wp.array2d(dtype=float), i: int, j: int) -> float:
    """f[i, j], with indices past the walls clamped to them."""
    x = wp.clamp(i, 0, f.shape[0] - 1)
    y = wp.clamp(j, 0, f.shape[1] - 1)
    return f[x, y]


@wp.func
def sample(f: wp.array2d(dtype=float), x: float, y: float) -> float:
    """f at the point (x, y) in grid units: bilinear between the four nearest cells."""
    i = int(wp.floor(x))
    j = int(wp.floor(y))
    tx = x - float(i)
    ty = y - float(j)
    low = wp.lerp(lookup(f, i, j), lookup(f, i + 1, j), tx)
    high = wp.lerp(lookup(f, i, j + 1), lookup(f, i + 1, j + 1), tx)
    return wp.lerp(low, high, ty)


@wp.kernel
def advect(rho: wp.array2d(dtype=float), vel: wp.array2d(dtype=wp.vec2), dt: float,
           rho_new: wp.array2d(dtype=float)):
    """Semi-Lagrangian: each cell takes the smoke found where the wind came from."""
    i, j = wp.tid()
    v = vel[i, j]
    rho_new[i, j] = sample(rho, float(i) - v[0] * dt, float(j) - v[1] * dt)


@wp.kernel
def diffuse(rho: wp.array2d(dtype=float), k: float, rho_new: wp.array2d(dtype=float)):
    """One explicit step of diffusion (walls: no flux)."""
    i, j = wp.tid()
    c = rho[i, j]
    lap = lookup(rho, i + 1, j) + lookup(rho, i - 1, j) + lookup(rho, i, j + 1) + \
        lookup(rho, i, j - 1) - 4.0 * c
    rho_new[i, j] = c + k * lap


@wp.kernel
def mismatch(rho: wp.array2d(dtype=float), target: wp.array2d(dtype=float),
             loss: wp.array(dtype=float)):
    i, j = wp.tid()
    d = rho[i, j] - target[i, j]
    wp.atomic_add(loss, 0, d * d)


class Example:
    def __init__(self, n=24, steps=40, every=10, dt=1.0, k=0.1, device=None):
        self.n, self.steps, self.every, self.dt, self.k = n, steps, every, dt, k
        self.device = device
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        c = (n - 1) / 2.0
        swirl = np.stack([-(j - c), i - c], axis=-1) * (1.5 / n)   # a vortex at the centre
        self.vel = wp.array(swirl, dtype=wp.vec2, device=device)
        target = np.exp(-((i - 0.3 * n) ** 2 + (j - 0.6 * n) ** 2) / (0.02 * n * n))
        self.target = wp.array(target, dtype=float, device=device)
        start = np.exp(-((i - 0.5 * n) ** 2 + (j - 0.5 * n) ** 2) / (0.03 * n * n))
        self.rho0 = wp.array(start, dtype=float, requires_grad=True, device=device)
        self.loss = wp.zeros(1, dtype=float, requires_grad=True, device=device)

    def step(self, rho):
        """One time step: advection, then diffusion; new arrays, so a tape keeps both."""
        shape = (self.n, self.n)
        mid = wp.zeros(shape, dtype=float, requires_grad=True, device=self.device)
        wp.launch(advect, dim=shape, inputs=[rho, self.vel, self.dt], outputs=[mid],
                  device=self.device)
        out = wp.zeros(shape, dtype=float, requires_grad=True, device=self.device)
        wp.launch(diffuse, dim=shape, inputs=[mid, self.k], outputs=[out], device=self.device)
        return out

    def finish(self, rho):
        self.loss.zero_()
        wp.launch(mismatch, dim=(self.n, self.n), inputs=[rho, self.target],
                  outputs=[self.loss], device=self.device)
        return float(self.loss.numpy()[0])

    def forward(self, rho0=None):
        rho = self.rho0 if rho0 is None else rho0
        for _ in range(self.steps):
            rho = self.step(rho)
        return self.finish(rho)

    def plain_gradient(self):
        """Every step on one tape (memory for every step's arrays)."""
        tape = wp.Tape()
        with tape:
            loss = self.forward()
        tape.backward(loss=self.loss)
        grad = self.rho0.grad.numpy().copy()
        tape.zero()
        return loss, grad

    def checkpointed_gradient(self):
        """The same gradient, keeping only every ``every``-th state (see the module)."""
        states = [self.rho0]
        rho = self.rho0
        for t in range(self.steps):             # forward, no tape: keep the checkpoints
            rho = self.step(rho)
            if (t + 1) % self.every == 0 and t + 1 < self.steps:
                states.append(rho)
        tape = wp.Tape()                        # the loss, on its own tape
        with tape:
            loss = self.finish(rho)
        tape.backward(loss=self.loss)
        adj = wp.clone(rho.grad)                # (tape.zero() zeroes rho.grad itself)
        tape.zero()
        for s in reversed(range(len(states))):  # each segment again, on a tape
            start = states[s]
            first = start if s == 0 else wp.clone(start, requires_grad=True)
            tape = wp.Tape()
            with tape:
                end = first
                for _ in range(min(self.every, self.steps - s * self.every)):
                    end = self.step(end)
            tape.backward(grads={end: adj})
            adj = wp.clone(first.grad)
            if s > 0:
                tape.zero()
        grad = self.rho0.grad.numpy().copy()
        self.rho0.grad.zero_()
        return loss, grad

    def check_gradient(self, eps=1e-2, cells=((12, 12), (8, 15), (5, 5))):
        """``(checkpointed against plain, worst against central differences)``: relative
        differences, the second over a few cells (float32 losses)."""
        _, plain = self.plain_gradient()
        _, grad = self.checkpointed_gradient()
        same = np.max(np.abs(grad - plain)) / np.max(np.abs(plain))
        base = self.rho0.numpy().copy()
        worst = 0.0
        for i, j in cells:
            sides = []
            for sign in (1.0, -1.0):
                r = base.copy()
                r[i, j] += sign * eps
                sides.append(self.forward(wp.array(r, dtype=float, device=self.device)))
            fd = (sides[0] - sides[1]) / (2.0 * eps)
            worst = max(worst, abs(fd - grad[i, j]) / max(abs(fd), 1e-2))
        return same, worst


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=20, help="optimization steps")
    p.add_argument("--steps", type=int, default=40, help="time steps of each simulation")
    p.add_argument("--every", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the current one)")
    args = p.parse_args(argv)
    wp.init()
    ex = Example(steps=args.steps, every=args.every, device=args.device)
    same, worst = ex.check_gradient()
    print(f"gradient check: checkpointed vs plain tape {same:.2e}, "
          f"vs central differences {worst:.2e}")
    first = None
    with wp.ScopedTimer("optimize", print=False) as timer:
        for _ in range(args.iters):
            loss, grad = ex.checkpointed_gradient()
            first = loss if first is None else first
            ex.rho0.assign(ex.rho0.numpy() - 0.5 * grad)
    print(f"loss: {first:.5f} -> {ex.forward():.5f}; {args.iters} steps in "
          f"{timer.elapsed:.0f} ms")


if __name__ == "__main__":
    main()
