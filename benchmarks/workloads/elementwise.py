"""Workload 1: an elementwise kernel over 4M float32 elements.

    out[i] = sin(x[i]) * exp(-x[i] * x[i]) + x[i]

gradient of sum(seed * out) with respect to x.
"""
import math

import numba
import numpy as np

import adjoint as ad

from ..harness import Problem, Spent, fresh_tape, tangent_arrays, unchecked
from . import optional

NAME = "elementwise"
TITLE = "out[i] = sin(x)*exp(-x*x) + x over 4M float32, d/dx"
SIZES = {"full": {"n": 4_000_000}, "quick": {"n": 500_000}, "tiny": {"n": 4096},
         "micro": {"n": 512}}


# -- adjoint: the kernel as a user writes it ------------------------------------
@ad.kernel
def wave(x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    v = x[i]
    out[i] = ad.sin(v) * ad.exp(-v * v) + v


# -- problem and float64 reference ----------------------------------------------
def make(rng, n):
    x = rng.uniform(-3.0, 3.0, n).astype(np.float32)
    return Problem(inputs={"x": x}, diff=("x",), outputs=("out",),
                   seed={"out": np.ones(n, np.float32)},
                   check_seed={"out": rng.standard_normal(n).astype(np.float32)},
                   meta={"size": f"{n:,} elements"})


def ref_forward(inp):
    x = np.asarray(inp["x"], np.float64)
    return {"out": np.sin(x) * np.exp(-x * x) + x}


def reference(p, seed):
    x = p.inputs["x"].astype(np.float64)
    e = np.exp(-x * x)
    g = np.cos(x) * e - 2.0 * x * np.sin(x) * e + 1.0
    return ref_forward(p.inputs), {"x": seed["out"].astype(np.float64) * g}


# -- systems -----------------------------------------------------------------------
class Adjoint:
    kernel = wave

    def __init__(self, p):
        self.n = p.inputs["x"].size
        self.x = ad.array(p.inputs["x"], requires_grad=True)
        self.out = ad.zeros(self.n, dtype=ad.float32, requires_grad=True)
        self.tape = None
        self.dots = tangent_arrays(p, {"out": self.out})

    def forward(self):
        ad.launch(self.kernel, dim=self.n, inputs=[self.x], outputs=[self.out])

    def fwd_bwd(self, seed):
        self.tape = fresh_tape(self.tape)
        with self.tape:
            ad.launch(self.kernel, dim=self.n, inputs=[self.x], outputs=[self.out])
        self.tape.backward(grads={self.out: seed["out"]})
        self.tape = Spent(self.tape)      # dropped: see harness.Spent

    def jvp(self):
        ad.launch(self.kernel, dim=self.n, inputs=[self.x], outputs=[self.out],
                  tangents=self.dots)

    def jvp_result(self):
        return {"out": self.out.numpy()}, {"out": self.dots["out"].numpy()}

    def result(self):
        return {"out": self.out.numpy()}, {"x": self.x.grad.numpy()}


class AdjointUnchecked(Adjoint):
    """The same kernel with @ad.kernel(bounds_check=False): what the bounds checks cost."""
    kernel = unchecked(wave)


@numba.njit(cache=True)
def _fwd_ser(x, out):
    for i in range(x.size):
        v = x[i]
        out[i] = math.sin(v) * math.exp(-v * v) + v


@numba.njit(cache=True)
def _bwd_ser(x, adj_out, adj_x):
    one = np.float32(1.0)
    for i in range(x.size):
        v = x[i]
        e = math.exp(-v * v)
        adj_x[i] = adj_out[i] * (math.cos(v) * e - (v + v) * math.sin(v) * e + one)


@numba.njit(cache=True, parallel=True)
def _fwd_par(x, out):
    for i in numba.prange(x.size):
        v = x[i]
        out[i] = math.sin(v) * math.exp(-v * v) + v


@numba.njit(cache=True, parallel=True)
def _bwd_par(x, adj_out, adj_x):
    one = np.float32(1.0)
    for i in numba.prange(x.size):
        v = x[i]
        e = math.exp(-v * v)
        adj_x[i] = adj_out[i] * (math.cos(v) * e - (v + v) * math.sin(v) * e + one)


class NumbaSerial:
    """Hand-written forward/adjoint pair; the adjoint writes (index = thread index)."""
    fwd, bwd = staticmethod(_fwd_ser), staticmethod(_bwd_ser)

    def __init__(self, p):
        self.x = p.inputs["x"].copy()
        self.out = np.zeros_like(self.x)
        self.adj_x = np.zeros_like(self.x)

    def forward(self):
        self.fwd(self.x, self.out)

    def fwd_bwd(self, seed):
        self.fwd(self.x, self.out)
        self.bwd(self.x, seed["out"], self.adj_x)

    def result(self):
        return {"out": self.out}, {"x": self.adj_x}


class NumbaParallel(NumbaSerial):
    fwd, bwd = staticmethod(_fwd_par), staticmethod(_bwd_par)


class Warp(optional.WarpTapeSystem):
    seed_key = "out"

    def __init__(self, p):
        wp, wk = optional.warp(), optional.warp_kernels()
        self.wp, self.k = wp, wk.wave
        n = p.inputs["x"].size
        self.n = n
        self.x = wp.array(p.inputs["x"], dtype=wp.float32, device=self.device, requires_grad=True)
        self.out = wp.zeros(n, dtype=wp.float32, device=self.device, requires_grad=True)
        self._init_tape()

    def _launch(self):
        self.wp.launch(self.k, dim=self.n, inputs=[self.x], outputs=[self.out], device=self.device)

    def _seeded(self):
        return self.out

    def result(self):
        return {"out": self.out.numpy()}, {"x": self.x.grad.numpy()}


class Jax:
    requires = "jax"

    def __init__(self, p):
        jax = optional.jax()
        jnp = jax.numpy

        def f(x):
            return jnp.sin(x) * jnp.exp(-x * x) + x

        def fb(x, ct):
            out, vjp = jax.vjp(f, x)
            return out, vjp(ct)[0]
        self.f, self.fb = jax.jit(f), jax.jit(fb)
        self.x = jax.device_put(p.inputs["x"])
        self.seeds = {}
        self.res = None
        self.jax = jax

    def forward(self):
        self.f(self.x).block_until_ready()

    def fwd_bwd(self, seed):
        key = id(seed["out"])
        if key not in self.seeds:
            self.seeds[key] = self.jax.device_put(seed["out"])
        self.res = self.jax.block_until_ready(self.fb(self.x, self.seeds[key]))

    def result(self):
        return {"out": np.asarray(self.res[0])}, {"x": np.asarray(self.res[1])}


SYSTEMS = {"adjoint": Adjoint, "adjoint-unchecked": AdjointUnchecked,
           "numba-ser": NumbaSerial, "numba-par": NumbaParallel, "warp": Warp, "jax": Jax}
