"""A Warp program on adjoint: optimize launch velocities so that particles, flying through
air drag and bouncing off the ground, reach their targets when time is up.

Written as a program for NVIDIA Warp is (``import warp as wp``: ``wp.vec3`` arrays,
``float`` annotations, a ``@wp.func``, ``wp.launch``, ``wp.Tape``, ``wp.optim.Adam``,
``wp.ScopedTimer``), with the one import changed to ``import adjoint.warp as wp``: ``float``
and ``wp.vec3`` are float32 as in Warp, and the kernels run on adjoint's backends. Before
optimizing, the tape's gradient is checked against central differences of the loss.

Run:  python examples/warp_trajectory.py [--iters 40] [--steps 60] [--device cpu]
"""
import argparse

import numpy as np

import adjoint.warp as wp


@wp.func
def drag(v: wp.vec3, c: float) -> wp.vec3:
    """Quadratic air drag: against the velocity, growing with the speed squared."""
    return -c * wp.length(v) * v


@wp.kernel
def integrate(q: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), gravity: wp.vec3,
              c: float, restitution: float, dt: float,
              q_new: wp.array(dtype=wp.vec3), v_new: wp.array(dtype=wp.vec3)):
    """One semi-implicit Euler step, with a bounce off the ground y = 0."""
    i = wp.tid()
    a = gravity + drag(v[i], c)
    vn = v[i] + a * dt
    qn = q[i] + vn * dt
    if qn[1] < 0.0:
        qn = wp.vec3(qn[0], -qn[1], qn[2])
        vn = wp.vec3(vn[0], -restitution * vn[1], vn[2])
    q_new[i] = qn
    v_new[i] = vn


@wp.kernel
def miss(q: wp.array(dtype=wp.vec3), target: wp.array(dtype=wp.vec3),
         loss: wp.array(dtype=float)):
    """loss[0] += the squared distance of each particle to its target."""
    i = wp.tid()
    d = q[i] - target[i]
    wp.atomic_add(loss, 0, wp.dot(d, d))


class Example:
    def __init__(self, n=8, steps=60, dt=0.02, seed=1):
        self.n, self.steps, self.dt = n, steps, dt
        self.gravity = wp.vec3(0.0, -9.81, 0.0)
        self.c, self.restitution = 0.05, 0.7
        rng = np.random.default_rng(seed)
        targets = np.stack([rng.uniform(2.0, 5.0, n), rng.uniform(0.2, 1.0, n),
                            rng.uniform(-1.0, 1.0, n)], axis=1)
        self.target = wp.array(targets, dtype=wp.vec3)
        self.v0 = wp.array(np.tile([2.0, 4.0, 0.0], (n, 1)), dtype=wp.vec3, requires_grad=True)
        self.loss = wp.zeros(1, dtype=float, requires_grad=True)

    def forward(self, v0=None):
        """Fly every particle from the origin for ``steps`` steps; the loss is their miss."""
        q = wp.zeros(self.n, dtype=wp.vec3, requires_grad=True)
        v = self.v0 if v0 is None else v0
        for _ in range(self.steps):
            q_new = wp.zeros(self.n, dtype=wp.vec3, requires_grad=True)
            v_new = wp.zeros(self.n, dtype=wp.vec3, requires_grad=True)
            wp.launch(integrate, dim=self.n,
                      inputs=[q, v, self.gravity, self.c, self.restitution, self.dt],
                      outputs=[q_new, v_new])
            q, v = q_new, v_new
        self.loss.zero_()
        wp.launch(miss, dim=self.n, inputs=[q, self.target], outputs=[self.loss])
        return self.loss.numpy()[0]

    def gradient(self):
        tape = wp.Tape()
        with tape:
            loss = self.forward()
        tape.backward(loss=self.loss)
        grad = self.v0.grad.numpy().copy()
        tape.zero()
        return loss, grad

    def check_gradient(self, eps=1e-2, components=((0, 0), (0, 1), (3, 2), (5, 1))):
        """The tape's gradient against central differences of the float32 loss: the largest
        relative difference over a few components (differences of float32 losses carry
        about 1e-7 * loss / eps of rounding)."""
        _, grad = self.gradient()
        worst = 0.0
        base = self.v0.numpy().copy()
        for i, k in components:
            sides = []
            for sign in (1.0, -1.0):
                v = base.copy()
                v[i, k] += sign * eps
                sides.append(self.forward(wp.array(v, dtype=wp.vec3)))
            fd = (sides[0] - sides[1]) / (2.0 * eps)
            worst = max(worst, abs(fd - grad[i, k]) / max(abs(fd), 1e-3))
        return worst

    def step(self, opt):
        tape = wp.Tape()
        with tape:
            loss = self.forward()
        tape.backward(loss=self.loss)
        opt.step([self.v0.grad])
        tape.zero()
        return loss


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=40, help="optimization steps")
    p.add_argument("--steps", type=int, default=60, help="time steps of each flight")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the current one)")
    p.add_argument("--out", default=None, help="(ignored: this example draws nothing)")
    args = p.parse_args(argv)

    wp.init()
    with wp.ScopedDevice(args.device):
        example = Example(steps=args.steps)
        error = example.check_gradient()
        print(f"gradient check: largest relative difference from central differences "
              f"{error:.2e}")
        if error > 2e-2:
            raise SystemExit("the tape's gradient does not match central differences")
        opt = wp.optim.Adam([example.v0], lr=0.1)
        losses = []
        with wp.ScopedTimer("optimize", print=False) as timer:
            for _ in range(args.iters):
                losses.append(example.step(opt))
        losses.append(example.forward())
        print(f"loss over {args.iters} Adam steps: {losses[0]:.4f} -> {losses[-1]:.4f}; "
              f"{timer.elapsed / max(args.iters, 1):.1f} ms a step on {wp.get_device()}")


if __name__ == "__main__":
    main()
