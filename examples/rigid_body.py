"""Spin rigid bodies so that a marker on each lands on its target: vec3 and quat.

Each body has a position, a velocity, an orientation quaternion and an angular
velocity (``ad.array(dtype=ad.vec3)``, ``ad.array(dtype=ad.quat)``). A kernel
integrates them one step (gravity, damping, the quaternion update
``q += 0.5 dt (w, 0) q``, renormalised); the loss is the squared distance of a
marker fixed on each body (``ad.transform_point``) to its target when time is up.
Every step is a launch on an ``ad.Tape``; ``tape.backward`` gives the gradient
with respect to the initial velocities and angular velocities, which is first
checked against central finite differences, then used by Adam.

Run:  python examples/rigid_body.py [--iters 60] [--out rigid_body.png]
"""
import argparse
import os
import sys

import numpy as np

import adjoint as ad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import adam, save_figure  # noqa: E402

DT, DAMPING = 0.02, 0.1
GRAVITY = ad.vec3(0.0, -9.81, 0.0)
MARKER = ad.vec3(0.5, 0.0, 0.0)         # in each body's own frame


@ad.kernel
def step(x: ad.array(dtype=ad.vec3), v: ad.array(dtype=ad.vec3), q: ad.array(dtype=ad.quat),
         w: ad.array(dtype=ad.vec3), gravity: ad.vec3, damping: float, dt: float,
         x_new: ad.array(dtype=ad.vec3), v_new: ad.array(dtype=ad.vec3),
         q_new: ad.array(dtype=ad.quat), w_new: ad.array(dtype=ad.vec3)):
    """One semi-implicit Euler step of a free rigid body (spin in world coordinates)."""
    i = ad.tid()
    v1 = v[i] * (1.0 - damping * dt) + gravity * dt
    w1 = w[i] * (1.0 - damping * dt)
    q0 = q[i]
    q1 = ad.normalize(q0 + ad.quat(w1, 0.0) * q0 * (0.5 * dt))
    x_new[i] = x[i] + v1 * dt
    v_new[i] = v1
    q_new[i] = q1
    w_new[i] = w1


@ad.kernel
def miss(x: ad.array(dtype=ad.vec3), q: ad.array(dtype=ad.quat), marker: ad.vec3,
         target: ad.array(dtype=ad.vec3), loss: ad.array(dtype=float)):
    """loss[0] += squared distance of each body's marker to its target."""
    i = ad.tid()
    p = ad.transform_point(ad.transform(x[i], q[i]), marker)
    d = p - target[i]
    ad.atomic_add(loss, 0, ad.dot(d, d))


def simulate(v0, w0, steps, target=None, loss=None, keep_path=False):
    """Bodies start at the origin, unrotated, with velocities ``v0`` and spins ``w0``
    (``ad.Array``s of vec3); return the marker positions along the way if asked."""
    n = v0.shape[0]
    x, v = ad.zeros(n, dtype=ad.vec3), v0
    q = ad.array(np.tile(ad.quat_identity(), (n, 1)), dtype=ad.quat)
    w = w0
    path = []
    for _ in range(steps):
        new = [ad.zeros(n, dtype=ad.vec3), ad.zeros(n, dtype=ad.vec3),
               ad.zeros(n, dtype=ad.quat), ad.zeros(n, dtype=ad.vec3)]
        ad.launch(step, dim=n, inputs=[x, v, q, w, GRAVITY, DAMPING, DT], outputs=new)
        x, v, q, w = new
        if keep_path:
            path.append([ad.transform_point(np.concatenate([xi, qi]), MARKER)
                         for xi, qi in zip(x.numpy(), q.numpy())])
    if target is not None:
        ad.launch(miss, dim=n, inputs=[x, q, MARKER, target], outputs=[loss])
    return np.array(path)


def loss_and_grad(v0, w0, steps, target):
    v = ad.array(v0, dtype=ad.vec3, requires_grad=True)
    w = ad.array(w0, dtype=ad.vec3, requires_grad=True)
    loss = ad.zeros(1, requires_grad=True)
    with ad.Tape() as tape:
        simulate(v, w, steps, target, loss)
    tape.backward(loss=loss)
    return float(loss.numpy()[0]), v.grad.numpy().copy(), w.grad.numpy().copy()


def check_gradient(v0, w0, steps, target, eps=1e-6):
    """Largest relative difference between the tape's gradient and central differences."""
    _, gv, gw = loss_and_grad(v0, w0, steps, target)
    worst = 0.0
    for arr, grad in ((v0, gv), (w0, gw)):
        for k in np.ndindex(arr.shape):
            old = arr[k]
            arr[k] = old + eps
            up = loss_and_grad(v0, w0, steps, target)[0]
            arr[k] = old - eps
            down = loss_and_grad(v0, w0, steps, target)[0]
            arr[k] = old
            fd = (up - down) / (2 * eps)
            worst = max(worst, abs(grad[k] - fd) / max(1.0, abs(fd)))
    return worst


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=60, help="optimisation steps")
    p.add_argument("--steps", type=int, default=50, help="time steps of each flight")
    p.add_argument("--out", default="rigid_body.png", help="where to save the plot")
    args = p.parse_args(argv)

    target = ad.array([[1.0, 0.2, 0.0], [2.0, 0.5, 0.5], [0.5, 0.8, -1.0]], dtype=ad.vec3)
    v0 = np.array([[1.0, 4.0, 0.0]] * 3)
    w0 = np.array([[0.0, 0.0, 1.0]] * 3)
    error = check_gradient(v0, w0, min(args.steps, 20), target)
    print(f"gradient vs central differences: largest relative difference {error:.2e}")
    assert error < 1e-5, error

    update_v, update_w = adam(lr=0.1), adam(lr=0.2)
    losses = []
    for it in range(args.iters):
        loss, gv, gw = loss_and_grad(v0, w0, args.steps, target)
        losses.append(loss)
        update_v(v0, gv)
        update_w(w0, gw)
        if it % 10 == 0 or it == args.iters - 1:
            print(f"iter {it:3d}  miss {loss:.6f}")
    print(f"squared miss distance: {losses[0]:.6f} -> {losses[-1]:.6f}")

    def draw(plt):
        path = simulate(ad.array(v0, dtype=ad.vec3), ad.array(w0, dtype=ad.vec3), args.steps,
                        keep_path=True)
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
        a.semilogy(losses)
        a.set(title="squared miss distance", xlabel="iteration")
        t = target.numpy()
        for k in range(path.shape[1]):
            b.plot(path[:, k, 0], path[:, k, 1], label=f"marker {k}")
        b.plot(t[:, 0], t[:, 1], "k*", markersize=12, label="targets")
        b.set(title="markers' paths (x, y)", xlabel="x", ylabel="y")
        b.legend(fontsize="small")
        return fig
    save_figure(args.out, draw)
    return losses


if __name__ == "__main__":
    main()
