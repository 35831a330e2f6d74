"""The workloads as a user writes them (issue 14): the loss reduced inside the kernel.

Each ``<name>-user`` workload computes what ``<name>`` computes, written the way a
first-time user writes it: every thread adds its share of the loss into a
one-element array with ``ad.atomic_add(loss, 0, v)``, every launch is recorded
on an ``ad.Tape`` and ``tape.backward`` is seeded at that one element; the heat
stencil has periodic boundaries (``ip = i + 1; if ip == n0: ip = 0``) and its
loss is a 51st launch summing the final field. Springs is already written that
way, so ``springs-user`` runs the same kernel. Their scalars are annotated ``float``
(``eps2: float``, ``alpha: float``), as Warp's examples and their ports write them: a
weak scalar, float32 beside the float32 arrays (issue 39; before it, such a kernel
computed in float64).

The baseline is the same hand-written parallel numba pair as the tuned workload's
(for the stencil: the same pair with periodic neighbours, ``periodic.py``), given
the cotangent ``seed * ones`` of the per-element outputs: the loss's gradient.
The pair does not reduce the loss (its forward writes the per-element outputs;
``result`` sums them, untimed), so the ratio also counts the in-kernel reduction
against the pair. Warp's CPU kernels of the tuned workload (``warp``; for the
stencil, Warp's periodic kernel, ``periodic.Warp``) are fed the same cotangent,
so that each round times Warp back to back with adjoint's user form.

A user-form workload is a ``UserForm`` object with the attributes a workload module
has (``NAME``, ``SIZES``, ``make``, ``reference``, ``ref_forward``, ``SYSTEMS``).
Its adjoint systems also have ``record()`` and ``backward(seed)`` (the two halves
of ``fwd_bwd``), so the harness times the backward on its own.
"""
import numpy as np

import adjoint as ad

from ..harness import Problem, Spent, fresh_tape
from . import dense, elementwise, nbody, periodic, springs


# -- the kernels as a user writes them --------------------------------------------
@ad.kernel
def wave_loss(x: ad.array(dtype=ad.float32), loss: ad.array(dtype=ad.float32)):
    i = ad.tid()
    v = x[i]
    ad.atomic_add(loss, 0, ad.sin(v) * ad.exp(-v * v) + v)


@ad.kernel
def nbody_loss(n: int, eps2: float, mass: ad.array(dtype=ad.float32),
               pos: ad.array(dtype=ad.float32, ndim=2), loss: ad.array(dtype=ad.float32)):
    i = ad.tid()
    xi = pos[i, 0]
    yi = pos[i, 1]
    zi = pos[i, 2]
    e = 0.0
    for j in range(n):
        dx = pos[j, 0] - xi
        dy = pos[j, 1] - yi
        dz = pos[j, 2] - zi
        e += mass[j] / ad.sqrt(dx * dx + dy * dy + dz * dz + eps2)
    ad.atomic_add(loss, 0, -mass[i] * e)


@ad.kernel
def dense_loss(n: int, W: ad.array(dtype=ad.float32, ndim=2), x: ad.array(dtype=ad.float32),
               b: ad.array(dtype=ad.float32), loss: ad.array(dtype=ad.float32)):
    i = ad.tid()
    s = b[i]
    for k in range(n):
        s += W[i, k] * x[k]
    ad.atomic_add(loss, 0, ad.tanh(s))


# -- systems ------------------------------------------------------------------------
class _UserSystem:
    """An adjoint system: ``_run()`` launches the kernels (the loss is zeroed first),
    ``record`` does that on a new tape (after zeroing the previous tape's gradients),
    ``backward`` seeds the loss and drops the tape (``harness.Spent``)."""
    tape = None

    def forward(self):
        self.loss.zero_()
        self._run()

    def record(self):
        self.tape = fresh_tape(self.tape)
        self.loss.zero_()
        with self.tape:
            self._run()

    def backward(self, seed):
        self.tape.backward(grads={self.loss: seed["loss"]})
        self.tape = Spent(self.tape)      # dropped: see harness.Spent

    def fwd_bwd(self, seed):
        self.record()
        self.backward(seed)

    def result(self):
        return {"loss": self.loss.numpy()}, {n: a.grad.numpy() for n, a in self.diff.items()}


class WaveUser(_UserSystem):
    def __init__(self, p):
        self.x = ad.array(p.inputs["x"], requires_grad=True)
        self.loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
        self.diff = {"x": self.x}

    def _run(self):
        ad.launch(wave_loss, dim=self.x.shape[0], inputs=[self.x], outputs=[self.loss])


class SpringsUser(_UserSystem):
    def __init__(self, p):
        inp = p.inputs
        self.a, self.b = ad.array(inp["a"]), ad.array(inp["b"])
        self.rest = ad.array(inp["rest"], requires_grad=True)
        self.pos = ad.array(inp["pos"], requires_grad=True)
        self.loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
        self.diff = {"pos": self.pos, "rest": self.rest}

    def _run(self):
        ad.launch(springs.spring_energy, dim=self.a.shape[0],
                  inputs=[self.a, self.b, self.rest, springs.K, self.pos], outputs=[self.loss])


class NbodyUser(_UserSystem):
    def __init__(self, p):
        self.pos = ad.array(p.inputs["pos"], requires_grad=True)
        self.mass = ad.array(p.inputs["mass"], requires_grad=True)
        self.loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
        self.diff = {"pos": self.pos, "mass": self.mass}

    def _run(self):
        n = self.mass.shape[0]
        ad.launch(nbody_loss, dim=n, inputs=[n, nbody.EPS2, self.mass, self.pos],
                  outputs=[self.loss])


class DenseUser(_UserSystem):
    def __init__(self, p):
        self.W, self.x, self.b = (ad.array(p.inputs[k], requires_grad=True) for k in "Wxb")
        self.loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
        self.diff = {"W": self.W, "x": self.x, "b": self.b}

    def _run(self):
        n = self.x.shape[0]
        ad.launch(dense_loss, dim=n, inputs=[n, self.W, self.x, self.b], outputs=[self.loss])


class StencilUser(_UserSystem):
    def __init__(self, p):
        n, self.steps = p.inputs["u0"].shape[0], p.inputs["steps"]
        self.dim = (n, n)
        self.u = [ad.array(p.inputs["u0"], requires_grad=True)]
        self.u += [ad.zeros((n, n), dtype=ad.float32, requires_grad=True)
                   for _ in range(self.steps)]
        self.loss = ad.zeros(1, dtype=ad.float32, requires_grad=True)
        self.diff = {"u0": self.u[0]}

    def _run(self):
        for k in range(self.steps):
            ad.launch(periodic.heat_periodic, dim=self.dim, inputs=[periodic.ALPHA, self.u[k]],
                      outputs=[self.u[k + 1]])
        ad.launch(periodic.field_sum, dim=self.dim, inputs=[self.u[-1]], outputs=[self.loss])


class Captured:
    """``adjoint-captured``: the user system's launches recorded once and captured
    (``tape.capture()``, issue 39): every round replays the captured forward and
    backward, one compiled call each (the loss and the gradients zeroed first)."""

    def __init__(self, user, p):
        self.user = user(p)
        self.user.record()
        self.capture = self.user.tape.capture()
        self.user.tape.release()
        self.user.tape = None
        self.loss = self.user.loss
        self.note = "tape.capture()"

    def forward(self):
        self.loss.zero_()
        self.capture.forward()

    def fwd_bwd(self, seed):
        self.capture.zero()
        self.forward()
        self.capture.backward(grads={self.loss: seed["loss"]})

    def result(self):
        return self.user.result()


class Baseline:
    """A tuned workload's system (``pair``: its class; the hand-written numba pair, or
    Warp's kernels) fed the loss's gradient, ``seed * ones``, as the cotangent of its
    per-element output ``out``."""

    def __init__(self, pair, out, p):
        self.pair, self.out = pair(p.meta["base"]), out
        self.note = getattr(self.pair, "note", "")
        self.shape = np.shape(p.meta["base"].seed[out])
        self.seeds = {}

    def forward(self):
        self.pair.forward()

    def fwd_bwd(self, seed):
        key = float(seed["loss"][0])
        if key not in self.seeds:
            self.seeds[key] = {self.out: np.full(self.shape, key, np.float32)}
        self.pair.fwd_bwd(self.seeds[key])

    def result(self):
        outs, grads = self.pair.result()
        return {"loss": np.array([np.sum(outs[self.out], dtype=np.float64)])}, grads


class UserForm:
    """The user form of workload module ``base`` (see the module docstring)."""

    def __init__(self, name, base, out, adjoint_system):
        self.base, self.out = base, out
        self.NAME = f"{name}-user"
        self.TITLE = f"{name} as a user writes it: {getattr(base, 'USER_TITLE', base.TITLE)}"
        self.SIZES = base.SIZES

        def baseline(cls):
            return lambda p: Baseline(cls, out, p)
        self.SYSTEMS = {"adjoint": adjoint_system,
                        "adjoint-captured": lambda p: Captured(adjoint_system, p),
                        "numba-ser": baseline(base.NumbaSerial),
                        "numba-par": baseline(base.NumbaParallel), "warp": baseline(base.Warp)}

    def make(self, rng, **size):
        bp = self.base.make(rng, **size)
        seed = np.ones(1, np.float32)
        return Problem(inputs=bp.inputs, diff=bp.diff, outputs=("loss",), seed={"loss": seed},
                       check_seed={"loss": np.full(1, 0.75, np.float32)},
                       meta=dict(bp.meta, base=bp))

    def ref_forward(self, inp):
        return {"loss": np.array([np.sum(self.base.ref_forward(inp)[self.out])])}

    def reference(self, p, seed):
        bp = p.meta["base"]
        full = {self.out: np.full(np.shape(bp.seed[self.out]), float(seed["loss"][0]))}
        outs, grads = self.base.reference(bp, full)
        return {"loss": np.array([np.sum(outs[self.out])])}, grads


FORMS = {   # tuned workload name -> its user form
    "elementwise": lambda: UserForm("elementwise", elementwise, "out", WaveUser),
    "springs": lambda: UserForm("springs", springs, "energy", SpringsUser),
    "nbody": lambda: UserForm("nbody", nbody, "out", NbodyUser),
    "stencil": lambda: UserForm("stencil", periodic, "u", StencilUser),
    "dense": lambda: UserForm("dense", dense, "y", DenseUser),
}
