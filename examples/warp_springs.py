"""A Warp program on adjoint: a hanging chain of particles on springs, some pinned by a flag
bit, and the rest lengths that make its free end settle onto a target.

Written as a program for NVIDIA Warp is (``wp.constant`` flag bits tested with ``&`` in a
kernel, a ``uint32`` flags array, springs read from an index array, forces gathered with
``wp.atomic_add``/``wp.atomic_sub``, an early ``return``, ``wp.Tape``, ``wp.optim.SGD``),
with the one import changed to ``import adjoint.warp as wp``. Before optimizing, the tape's
gradient is checked against central differences of the loss.

Run:  python examples/warp_springs.py [--iters 30] [--steps 40] [--device cpu]
"""
import argparse

import numpy as np

import adjoint.warp as wp

PARTICLE_ACTIVE = wp.constant(wp.uint32(1))      # flag bits, as warp.sim spells them
PARTICLE_PINNED = wp.constant(wp.uint32(2))


@wp.kernel
def spring_forces(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3),
                  springs: wp.array(dtype=int), rest: wp.array(dtype=float), ke: float,
                  kd: float, f: wp.array(dtype=wp.vec3)):
    """Each spring pulls its two particles together (or apart) along the spring,
    with damping along it."""
    s = wp.tid()
    i = springs[2 * s]
    j = springs[2 * s + 1]
    xij = x[i] - x[j]
    vij = v[i] - v[j]
    length = wp.length(xij)
    d = xij / length
    fs = d * (ke * (length - rest[s]) + kd * wp.dot(d, vij))
    wp.atomic_sub(f, i, fs)
    wp.atomic_add(f, j, fs)


@wp.kernel
def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3),
              f: wp.array(dtype=wp.vec3), flags: wp.array(dtype=wp.uint32), gravity: wp.vec3,
              inv_mass: float, dt: float, x_new: wp.array(dtype=wp.vec3),
              v_new: wp.array(dtype=wp.vec3)):
    """Semi-implicit Euler for the active particles; a pinned or inactive one stays."""
    i = wp.tid()
    if (flags[i] & PARTICLE_ACTIVE) == 0 or (flags[i] & PARTICLE_PINNED) != 0:
        x_new[i] = x[i]
        v_new[i] = wp.vec3(0.0, 0.0, 0.0)
        return
    v1 = v[i] + (f[i] * inv_mass + gravity) * dt
    x_new[i] = x[i] + v1 * dt
    v_new[i] = v1


@wp.kernel
def miss(x: wp.array(dtype=wp.vec3), end: int, target: wp.vec3, loss: wp.array(dtype=float)):
    """loss[0] = the squared distance of the chain's end from the target."""
    d = x[end] - target
    wp.atomic_add(loss, 0, wp.dot(d, d))


class Example:
    def __init__(self, n=8, steps=40, dt=0.01, device=None):
        self.n, self.steps, self.dt, self.device = n, steps, dt, device
        self.ke, self.kd, self.inv_mass = 200.0, 1.0, 1.0
        self.gravity = wp.vec3(0.0, -9.8, 0.0)
        self.target = wp.vec3(0.9, -0.6, 0.0)
        pos = np.stack([np.linspace(0.0, 1.0, n), np.zeros(n), np.zeros(n)], axis=1)
        flags = np.full(n, 1, dtype=np.uint32)          # active
        flags[0] |= 2                                   # pinned at the origin
        springs = np.array([[k, k + 1] for k in range(n - 1)], dtype=np.int32).ravel()
        self.x0 = wp.array(pos, dtype=wp.vec3, device=device)
        self.flags = wp.array(flags, dtype=wp.uint32, device=device)
        self.springs = wp.array(springs, dtype=int, device=device)
        self.rest = wp.array(np.full(n - 1, 1.0 / (n - 1)), dtype=float, requires_grad=True,
                             device=device)
        self.loss = wp.zeros(1, dtype=float, requires_grad=True, device=device)

    def forward(self, rest=None):
        rest = self.rest if rest is None else rest
        x = self.x0
        v = wp.zeros(self.n, dtype=wp.vec3, requires_grad=True, device=self.device)
        for _ in range(self.steps):
            f = wp.zeros(self.n, dtype=wp.vec3, requires_grad=True, device=self.device)
            wp.launch(spring_forces, dim=self.n - 1,
                      inputs=[x, v, self.springs, rest, self.ke, self.kd], outputs=[f],
                      device=self.device)
            x_new = wp.zeros_like(x, requires_grad=True)
            v_new = wp.zeros_like(v, requires_grad=True)
            wp.launch(integrate, dim=self.n,
                      inputs=[x, v, f, self.flags, self.gravity, self.inv_mass, self.dt],
                      outputs=[x_new, v_new], device=self.device)
            x, v = x_new, v_new
        self.loss.zero_()
        wp.launch(miss, dim=1, inputs=[x, self.n - 1, self.target], outputs=[self.loss],
                  device=self.device)
        return float(self.loss.numpy()[0])

    def gradient(self):
        tape = wp.Tape()
        with tape:
            loss = self.forward()
        tape.backward(loss=self.loss)
        grad = self.rest.grad.numpy().copy()
        tape.zero()
        return loss, grad

    def check_gradient(self, eps=1e-3):
        """The largest relative difference between the tape's gradient and central
        differences of the float32 loss, over every rest length."""
        _, grad = self.gradient()
        base = self.rest.numpy().copy()
        worst = 0.0
        for k in range(base.size):
            sides = []
            for sign in (1.0, -1.0):
                r = base.copy()
                r[k] += sign * eps
                sides.append(self.forward(wp.array(r, dtype=float, device=self.device)))
            fd = (sides[0] - sides[1]) / (2.0 * eps)
            worst = max(worst, abs(fd - grad[k]) / max(abs(fd), 1e-2))
        return worst

    def step(self, opt):
        tape = wp.Tape()
        with tape:
            loss = self.forward()
        tape.backward(loss=self.loss)
        opt.step([self.rest.grad])
        tape.zero()
        return loss


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=30, help="optimization steps")
    p.add_argument("--steps", type=int, default=40, help="time steps of each simulation")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the current one)")
    args = p.parse_args(argv)
    wp.init()
    ex = Example(steps=args.steps, device=args.device)
    print(f"gradient check: worst relative difference {ex.check_gradient():.2e}")
    opt = wp.optim.SGD([ex.rest], lr=0.02)
    first = last = None
    with wp.ScopedTimer("optimize", print=False) as timer:
        for _ in range(args.iters):
            last = ex.step(opt)
            first = last if first is None else first
    print(f"loss: {first:.5f} -> {ex.forward():.5f}; {args.iters} steps in "
          f"{timer.elapsed:.0f} ms")


if __name__ == "__main__":
    main()
