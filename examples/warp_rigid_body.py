"""A Warp program on adjoint: a tumbling rigid body, its state a transform and a spatial
velocity, and the initial spin that brings a marker on it to a target.

Written as a program for NVIDIA Warp is (``wp.transform`` and ``wp.spatial_vector``
arrays, ``wp.spatial_top``/``spatial_bottom``, quaternion integration with
``wp.quat``/``wp.normalize``, ``wp.transform_point``, a body-frame inertia ``wp.mat33``,
``wp.Tape``, ``wp.optim.SGD`` with momentum), with the one import changed to ``import
adjoint.warp as wp``. Before optimizing, the tape's gradient is checked against central
differences of the loss.

Run:  python examples/warp_rigid_body.py [--iters 30] [--steps 50] [--device cpu]
"""
import argparse

import numpy as np

import adjoint.warp as wp


@wp.kernel
def integrate_body(body_q: wp.array(dtype=wp.transform),
                   body_qd: wp.array(dtype=wp.spatial_vector), inertia: wp.mat33,
                   inv_inertia: wp.mat33, gravity: wp.vec3, damping: float, dt: float,
                   body_q_new: wp.array(dtype=wp.transform),
                   body_qd_new: wp.array(dtype=wp.spatial_vector)):
    """Semi-implicit Euler of a free rigid body: the angular velocity (the top of the
    spatial velocity, in world frame) under the gyroscopic torque, the linear one (its
    bottom) under gravity; the orientation advanced by the quaternion derivative."""
    i = wp.tid()
    q = body_q[i]
    x = wp.transform_get_translation(q)
    r = wp.transform_get_rotation(q)
    w = wp.spatial_top(body_qd[i])
    v = wp.spatial_bottom(body_qd[i])
    wb = wp.quat_rotate_inv(r, w)                       # body frame
    tb = -wp.cross(wb, inertia * wb)                    # gyroscopic torque
    wb = wb + inv_inertia * tb * dt
    w1 = wp.quat_rotate(r, wb) * (1.0 - damping * dt)
    v1 = v + gravity * dt
    x1 = x + v1 * dt
    r1 = wp.normalize(r + wp.quat(w1[0], w1[1], w1[2], 0.0) * r * (0.5 * dt))
    body_q_new[i] = wp.transform(x1, r1)
    body_qd_new[i] = wp.spatial_vector(w1, v1)


@wp.kernel
def marker_miss(body_q: wp.array(dtype=wp.transform), marker: wp.vec3, target: wp.vec3,
                loss: wp.array(dtype=float)):
    """loss[0] = the squared distance of the marker (a point fixed on the body) from the
    target, in world frame."""
    d = wp.transform_point(body_q[0], marker) - target
    wp.atomic_add(loss, 0, wp.dot(d, d))


class Example:
    def __init__(self, steps=50, dt=0.01, device=None):
        self.steps, self.dt, self.device = steps, dt, device
        inertia = np.diag([0.4, 0.8, 1.1])
        self.inertia = wp.mat33(*inertia.ravel())
        self.inv_inertia = wp.mat33(*np.linalg.inv(inertia).ravel())
        self.gravity = wp.vec3(0.0, -9.8, 0.0)
        self.marker = wp.vec3(0.5, 0.2, 0.0)
        self.target = wp.vec3(0.6, 0.4, 0.3)
        self.q0 = wp.array([wp.transform(wp.vec3(0.0, 0.0, 0.0),
                                         wp.quat(0.0, 0.0, 0.0, 1.0))],
                           dtype=wp.transform, device=device)
        self.qd0 = wp.array(np.array([[0.5, 1.0, -0.3, 0.0, 2.0, 0.0]]),
                            dtype=wp.spatial_vector, requires_grad=True, device=device)
        self.loss = wp.zeros(1, dtype=float, requires_grad=True, device=device)

    def forward(self, qd0=None):
        q, qd = self.q0, self.qd0 if qd0 is None else qd0
        for _ in range(self.steps):
            q_new = wp.zeros(1, dtype=wp.transform, requires_grad=True, device=self.device)
            qd_new = wp.zeros(1, dtype=wp.spatial_vector, requires_grad=True,
                              device=self.device)
            wp.launch(integrate_body, dim=1,
                      inputs=[q, qd, self.inertia, self.inv_inertia, self.gravity, 0.05,
                              self.dt],
                      outputs=[q_new, qd_new], device=self.device)
            q, qd = q_new, qd_new
        self.loss.zero_()
        wp.launch(marker_miss, dim=1, inputs=[q, self.marker, self.target],
                  outputs=[self.loss], device=self.device)
        return float(self.loss.numpy()[0])

    def gradient(self):
        tape = wp.Tape()
        with tape:
            loss = self.forward()
        tape.backward(loss=self.loss)
        grad = self.qd0.grad.numpy().copy()
        tape.zero()
        return loss, grad

    def check_gradient(self, eps=1e-3):
        """The largest relative difference between the tape's gradient and central
        differences of the float32 loss, over the six components of the initial spatial
        velocity."""
        _, grad = self.gradient()
        base = self.qd0.numpy().copy()
        worst = 0.0
        for k in range(6):
            sides = []
            for sign in (1.0, -1.0):
                qd = base.copy()
                qd[0, k] += sign * eps
                sides.append(self.forward(wp.array(qd, dtype=wp.spatial_vector,
                                                   device=self.device)))
            fd = (sides[0] - sides[1]) / (2.0 * eps)
            worst = max(worst, abs(fd - grad[0, k]) / max(abs(fd), 1e-2))
        return worst

    def step(self, opt):
        tape = wp.Tape()
        with tape:
            loss = self.forward()
        tape.backward(loss=self.loss)
        opt.step([self.qd0.grad])
        tape.zero()
        return loss


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=30, help="optimization steps")
    p.add_argument("--steps", type=int, default=50, help="time steps of each flight")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the current one)")
    args = p.parse_args(argv)
    wp.init()
    ex = Example(steps=args.steps, device=args.device)
    print(f"gradient check: worst relative difference {ex.check_gradient():.2e}")
    opt = wp.optim.SGD([ex.qd0], lr=0.05, momentum=0.5)
    first = None
    with wp.ScopedTimer("optimize", print=False) as timer:
        for _ in range(args.iters):
            loss = ex.step(opt)
            first = loss if first is None else first
    print(f"loss: {first:.5f} -> {ex.forward():.5f}; {args.iters} steps in "
          f"{timer.elapsed:.0f} ms")


if __name__ == "__main__":
    main()
