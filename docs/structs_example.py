"""A struct built in Python, launched on a tape, its gradients read (run by docs/tape.md)."""
import math

import numpy as np

import adjoint as ad


@ad.struct
class Particles:
    x: ad.array(dtype=float)        # positions
    v: ad.array(dtype=float)        # velocities
    drag: float


@ad.kernel
def drift(p: Particles, dt: float, x_new: ad.array(dtype=float)):
    i = ad.tid()
    x_new[i] = p.x[i] + dt * p.v[i] * math.exp(-p.drag * dt)


# fields as keywords (or positionally, in declaration order), or assigned one by one
p = Particles(x=ad.array([0.0, 1.0, 2.0], requires_grad=True), drag=0.5)
p.v = ad.array([1.0, -1.0, 0.5], requires_grad=True)
print("drag   =", p.drag)

x_new = ad.zeros(3, requires_grad=True)
with ad.Tape() as tape:
    ad.launch(drift, dim=3, inputs=[p, 0.1], outputs=[x_new])
tape.backward(grads={x_new: np.ones(3)})
print("x_new  =", x_new.numpy())
print("p.x.grad =", p.x.grad.numpy())         # the gradients land on the struct's arrays
print("p.v.grad =", p.v.grad.numpy())
print("by hand: dt * exp(-drag * dt) =", 0.1 * math.exp(-0.5 * 0.1))

# a field left out is None (an array) or zero (a scalar) until it is assigned
q = Particles(drag=0.5)
try:
    ad.launch(drift, dim=3, inputs=[q, 0.1], outputs=[x_new])
except ad.LaunchError as err:
    print("LaunchError:", err)
