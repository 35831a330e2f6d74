"""Workload 4: 50 steps of a 512x512 heat stencil, one launch per step on a tape.

A 2-D kernel (``i, j = ad.tid()``) reads field k and writes field k+1 (borders
copied); loss = sum of the final field; backward through all 50 launches to
the initial field.
"""
import numba
import numpy as np

import adjoint as ad

from ..harness import Problem, Spent, fresh_tape, tangent_arrays, unchecked
from . import optional

NAME = "stencil"
TITLE = "50 launches of a 2-D heat stencil on a tape, loss = sum(final field), d/du0"
SIZES = {"full": {"n": 512, "steps": 50}, "quick": {"n": 256, "steps": 50},
         "small": {"n": 128, "steps": 50},      # many small launches (issue 39: --small)
         "tiny": {"n": 24, "steps": 6},
         "micro": {"n": 12, "steps": 3}}
ALPHA = 0.2


# -- adjoint: the kernel as a user writes it ------------------------------------
@ad.kernel
def heat_step(alpha: ad.float32, u: ad.array(dtype=ad.float32, ndim=2),
              out: ad.array(dtype=ad.float32, ndim=2)):
    i, j = ad.tid()
    nx = u.shape[0]
    ny = u.shape[1]
    c = u[i, j]
    if i > 0 and i < nx - 1 and j > 0 and j < ny - 1:
        out[i, j] = c + alpha * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * c)
    else:
        out[i, j] = c


# -- problem and float64 reference ----------------------------------------------
def make(rng, n, steps):
    u0 = rng.uniform(0.0, 1.0, (n, n)).astype(np.float32)
    return Problem(inputs={"u0": u0, "steps": steps}, diff=("u0",), outputs=("u",),
                   seed={"u": np.ones((n, n), np.float32)},
                   check_seed={"u": rng.standard_normal((n, n)).astype(np.float32)},
                   meta={"size": f"{n}x{n}, {steps} launches"})


def _step64(u):
    out = u.copy()
    c = u[1:-1, 1:-1]
    out[1:-1, 1:-1] = c + ALPHA * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c)
    return out


def _step64_adjoint(a):
    """Transpose of ``_step64`` applied to the output adjoint ``a``."""
    g = a.copy()
    ai = a[1:-1, 1:-1]
    g[1:-1, 1:-1] = (1.0 - 4.0 * ALPHA) * ai
    g[:-2, 1:-1] += ALPHA * ai
    g[2:, 1:-1] += ALPHA * ai
    g[1:-1, :-2] += ALPHA * ai
    g[1:-1, 2:] += ALPHA * ai
    return g


def ref_forward(inp):
    u = np.asarray(inp["u0"], np.float64)
    for _ in range(inp["steps"]):
        u = _step64(u)
    return {"u": u}


def reference(p, seed):
    g = seed["u"].astype(np.float64)
    for _ in range(p.inputs["steps"]):
        g = _step64_adjoint(g)
    return ref_forward(p.inputs), {"u0": g}


# -- systems -----------------------------------------------------------------------
class Adjoint:
    kernel = heat_step

    def __init__(self, p):
        n, self.steps = p.inputs["u0"].shape[0], p.inputs["steps"]
        self.dim = (n, n)
        self.u = [ad.array(p.inputs["u0"], requires_grad=True)]
        self.u += [ad.zeros((n, n), dtype=ad.float32, requires_grad=True) for _ in range(self.steps)]
        self.tape = None
        dots = tangent_arrays(p, {f"u{k}": u for k, u in enumerate(self.u) if k})
        self.dots = [dots.get("u0")] + [dots[f"u{k}"] for k in range(1, self.steps + 1)]

    def _run(self):
        for k in range(self.steps):
            ad.launch(self.kernel, dim=self.dim, inputs=[ALPHA, self.u[k]], outputs=[self.u[k + 1]])

    def jvp(self):
        """The 50 launches' JVPs: each step's output tangent is the next one's input."""
        for k in range(self.steps):
            ad.launch(self.kernel, dim=self.dim, inputs=[ALPHA, self.u[k]], outputs=[self.u[k + 1]],
                      tangents={"u": self.dots[k], "out": self.dots[k + 1]})

    def jvp_result(self):
        return {"u": self.u[-1].numpy()}, {"u": self.dots[-1].numpy()}

    def forward(self):
        self._run()

    def fwd_bwd(self, seed):
        self.tape = fresh_tape(self.tape)
        with self.tape:
            self._run()
        self.tape.backward(grads={self.u[-1]: seed["u"]})
        self.tape = Spent(self.tape)      # dropped: see harness.Spent

    def result(self):
        return {"u": self.u[-1].numpy()}, {"u0": self.u[0].grad.numpy()}


class AdjointUnchecked(Adjoint):
    """The same kernel with @ad.kernel(bounds_check=False): what the bounds checks cost."""
    kernel = unchecked(heat_step)


@numba.njit(cache=True)
def _step_ser(alpha, u, out):
    nx, ny = u.shape
    for i in range(nx):
        for j in range(ny):
            c = u[i, j]
            if 0 < i < nx - 1 and 0 < j < ny - 1:
                out[i, j] = c + alpha * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4 * c)
            else:
                out[i, j] = c


@numba.njit(cache=True)
def _step_bwd_ser(alpha, adj_out, adj_u):
    """Scatter form: adj_u = 0 first; each output point adds into its five inputs."""
    nx, ny = adj_out.shape
    adj_u[...] = 0
    for i in range(nx):
        for j in range(ny):
            a = adj_out[i, j]
            if 0 < i < nx - 1 and 0 < j < ny - 1:
                adj_u[i, j] += a - 4 * alpha * a
                adj_u[i - 1, j] += alpha * a
                adj_u[i + 1, j] += alpha * a
                adj_u[i, j - 1] += alpha * a
                adj_u[i, j + 1] += alpha * a
            else:
                adj_u[i, j] += a


@numba.njit(cache=True, parallel=True)
def _step_par(alpha, u, out):
    nx, ny = u.shape
    for i in numba.prange(nx):
        for j in range(ny):
            c = u[i, j]
            if 0 < i < nx - 1 and 0 < j < ny - 1:
                out[i, j] = c + alpha * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4 * c)
            else:
                out[i, j] = c


@numba.njit(cache=True)
def _interior(i, j, nx, ny):
    return 0 < i < nx - 1 and 0 < j < ny - 1


@numba.njit(cache=True, parallel=True)
def _step_bwd_par(alpha, adj_out, adj_u):
    """Gather form (race-free): input point (i, j) collects from the outputs that read it."""
    nx, ny = adj_out.shape
    for i in numba.prange(nx):
        for j in range(ny):
            a = adj_out[i, j]
            g = a - 4 * alpha * a if _interior(i, j, nx, ny) else a
            if i > 0 and _interior(i - 1, j, nx, ny):
                g += alpha * adj_out[i - 1, j]
            if i < nx - 1 and _interior(i + 1, j, nx, ny):
                g += alpha * adj_out[i + 1, j]
            if j > 0 and _interior(i, j - 1, nx, ny):
                g += alpha * adj_out[i, j - 1]
            if j < ny - 1 and _interior(i, j + 1, nx, ny):
                g += alpha * adj_out[i, j + 1]
            adj_u[i, j] = g


class NumbaSerial:
    """A Python loop of 50 launches of a jitted step, all fields kept (as on a tape);
    the adjoint sweeps back with two ping-pong buffers."""
    step, step_bwd = staticmethod(_step_ser), staticmethod(_step_bwd_ser)

    def __init__(self, p):
        u0, self.steps = p.inputs["u0"], p.inputs["steps"]
        self.alpha = np.float32(ALPHA)
        self.u = np.zeros((self.steps + 1,) + u0.shape, np.float32)
        self.u[0] = u0
        self.adj = [np.zeros_like(u0), np.zeros_like(u0)]
        self.grad = None

    def forward(self):
        for k in range(self.steps):
            self.step(self.alpha, self.u[k], self.u[k + 1])

    def fwd_bwd(self, seed):
        self.forward()
        a, b = seed["u"], self.adj[0]
        for k in range(self.steps):
            self.step_bwd(self.alpha, a, b)
            a, b = b, self.adj[(k + 1) % 2]
        self.grad = a

    def result(self):
        return {"u": self.u[-1]}, {"u0": self.grad}


class NumbaParallel(NumbaSerial):
    step, step_bwd = staticmethod(_step_par), staticmethod(_step_bwd_par)


class Warp(optional.WarpTapeSystem):
    seed_key = "u"

    def __init__(self, p):
        wp, wk = optional.warp(), optional.warp_kernels()
        self.wp, self.kern = wp, wk.heat_step
        n, self.steps = p.inputs["u0"].shape[0], p.inputs["steps"]
        self.dim = (n, n)
        self.u = [wp.array(p.inputs["u0"], dtype=wp.float32, device=self.device, requires_grad=True)]
        self.u += [wp.zeros((n, n), dtype=wp.float32, device=self.device, requires_grad=True)
                   for _ in range(self.steps)]
        self._init_tape()

    def _launch(self):
        for k in range(self.steps):
            self.wp.launch(self.kern, dim=self.dim, inputs=[ALPHA, self.u[k]],
                           outputs=[self.u[k + 1]], device=self.device)

    def _seeded(self):
        return self.u[-1]

    def result(self):
        return {"u": self.u[-1].numpy()}, {"u0": self.u[0].grad.numpy()}


class Jax:
    """The 50 steps unrolled inside one jit (slicing with .at[].set)."""
    requires = "jax"

    def __init__(self, p):
        jax = optional.jax()
        steps = p.inputs["steps"]

        def step(u):
            c = u[1:-1, 1:-1]
            inner = c + ALPHA * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c)
            return u.at[1:-1, 1:-1].set(inner)

        def f(u):
            for _ in range(steps):
                u = step(u)
            return u

        def fb(u, ct):
            out, vjp = jax.vjp(f, u)
            return out, vjp(ct)[0]
        self.jax, self.f, self.fb = jax, jax.jit(f), jax.jit(fb)
        self.u0 = jax.device_put(p.inputs["u0"])
        self.seeds, self.res = {}, None

    def forward(self):
        self.f(self.u0).block_until_ready()

    def fwd_bwd(self, seed):
        key = id(seed["u"])
        if key not in self.seeds:
            self.seeds[key] = self.jax.device_put(seed["u"])
        self.res = self.jax.block_until_ready(self.fb(self.u0, self.seeds[key]))

    def result(self):
        return {"u": np.asarray(self.res[0])}, {"u0": np.asarray(self.res[1])}


SYSTEMS = {"adjoint": Adjoint, "adjoint-unchecked": AdjointUnchecked,
           "numba-ser": NumbaSerial, "numba-par": NumbaParallel, "warp": Warp, "jax": Jax}
