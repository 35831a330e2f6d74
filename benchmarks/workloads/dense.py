"""Workload 5: a 2048x2048 tanh layer, y[i] = tanh(sum_k W[i,k] x[k] + b[i]).

One thread per row with an inner ``for k in range(n)`` loop; gradient of
sum(seed * y) with respect to W, x and b (in the backward every row adds into
every entry of x's adjoint).
"""
import math

import numba
import numpy as np

import adjoint as ad

from ..harness import Problem, Spent, fresh_tape, tangent_arrays, unchecked
from . import optional

NAME = "dense"
TITLE = "tanh layer y = tanh(W x + b), one thread per row, d/dW, d/dx, d/db"
SIZES = {"full": {"n": 2048}, "quick": {"n": 1024}, "tiny": {"n": 48},
         "micro": {"n": 24}}


# -- adjoint: the kernel as a user writes it ------------------------------------
@ad.kernel
def dense_tanh(n: int, W: ad.array(dtype=ad.float32, ndim=2), x: ad.array(dtype=ad.float32),
               b: ad.array(dtype=ad.float32), y: ad.array(dtype=ad.float32)):
    i = ad.tid()
    s = b[i]
    for k in range(n):
        s += W[i, k] * x[k]
    y[i] = ad.tanh(s)


# -- problem and float64 reference ----------------------------------------------
def make(rng, n):
    W = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    b = (0.1 * rng.standard_normal(n)).astype(np.float32)
    return Problem(inputs={"W": W, "x": x, "b": b}, diff=("W", "x", "b"), outputs=("y",),
                   seed={"y": np.ones(n, np.float32)},
                   check_seed={"y": rng.standard_normal(n).astype(np.float32)},
                   meta={"size": f"{n}x{n}"})


def ref_forward(inp):
    W, x, b = (np.asarray(inp[k], np.float64) for k in ("W", "x", "b"))
    return {"y": np.tanh(W @ x + b)}


def reference(p, seed):
    W, x, b = (p.inputs[k].astype(np.float64) for k in ("W", "x", "b"))
    y = np.tanh(W @ x + b)
    g = seed["y"].astype(np.float64) * (1.0 - y * y)
    return {"y": y}, {"W": np.outer(g, x), "x": W.T @ g, "b": g}


# -- systems -----------------------------------------------------------------------
class Adjoint:
    kernel = dense_tanh

    def __init__(self, p):
        self.n = p.inputs["x"].size
        self.W = ad.array(p.inputs["W"], requires_grad=True)
        self.x = ad.array(p.inputs["x"], requires_grad=True)
        self.b = ad.array(p.inputs["b"], requires_grad=True)
        self.y = ad.zeros(self.n, dtype=ad.float32, requires_grad=True)
        self.tape = None
        self.dots = tangent_arrays(p, {"y": self.y})

    def _launch(self, tangents=None):
        ad.launch(self.kernel, dim=self.n, inputs=[self.n, self.W, self.x, self.b],
                  outputs=[self.y], tangents=tangents)

    def jvp(self):
        self._launch(self.dots)

    def jvp_result(self):
        return {"y": self.y.numpy()}, {"y": self.dots["y"].numpy()}

    def forward(self):
        self._launch()

    def fwd_bwd(self, seed):
        self.tape = fresh_tape(self.tape)
        with self.tape:
            self._launch()
        self.tape.backward(grads={self.y: seed["y"]})
        self.tape = Spent(self.tape)      # dropped: see harness.Spent

    def result(self):
        return {"y": self.y.numpy()}, {"W": self.W.grad.numpy(), "x": self.x.grad.numpy(),
                                       "b": self.b.grad.numpy()}


class AdjointUnchecked(Adjoint):
    """The same kernel with @ad.kernel(bounds_check=False): what the bounds checks cost."""
    kernel = unchecked(dense_tanh)


@numba.njit(cache=True)
def _fwd_ser(W, x, b, y):
    n = x.size
    for i in range(W.shape[0]):
        s = b[i]
        for k in range(n):
            s += W[i, k] * x[k]
        y[i] = math.tanh(s)


@numba.njit(cache=True)
def _bwd_ser(W, x, y, adj_y, adj_W, adj_x, adj_b):
    """Writes adj_W and adj_b (row i is thread i's), accumulates adj_x (zeroed by the caller)."""
    n = x.size
    for i in range(W.shape[0]):
        g = adj_y[i] * (1 - y[i] * y[i])
        adj_b[i] = g
        for k in range(n):
            adj_W[i, k] = g * x[k]
            adj_x[k] += g * W[i, k]


@numba.njit(cache=True, parallel=True)
def _fwd_par(W, x, b, y):
    n = x.size
    for i in numba.prange(W.shape[0]):
        s = b[i]
        for k in range(n):
            s += W[i, k] * x[k]
        y[i] = math.tanh(s)


@numba.njit(cache=True, parallel=True)
def _bwd_par(W, x, y, adj_y, adj_W, adj_x, adj_b, nt):
    """Rows split into one chunk per thread; each chunk sums its adj_x contributions
    in a private vector, the vectors are added afterwards (race-free)."""
    n, m = x.size, W.shape[0]
    priv = np.zeros((nt, n), np.float32)
    for t in numba.prange(nt):
        mine = priv[t]
        for i in range(t * m // nt, (t + 1) * m // nt):
            g = adj_y[i] * (1 - y[i] * y[i])
            adj_b[i] = g
            for k in range(n):
                adj_W[i, k] = g * x[k]
                mine[k] += g * W[i, k]
    for k in numba.prange(n):
        acc = adj_x[k]
        for t in range(nt):
            acc += priv[t, k]
        adj_x[k] = acc


class NumbaSerial:
    fwd, bwd = staticmethod(_fwd_ser), staticmethod(_bwd_ser)

    def __init__(self, p):
        self.W, self.x, self.b = (p.inputs[k].copy() for k in ("W", "x", "b"))
        self.y = np.zeros_like(self.x)
        self.adj_W, self.adj_x, self.adj_b = (np.zeros_like(a) for a in (self.W, self.x, self.b))

    def forward(self):
        self.fwd(self.W, self.x, self.b, self.y)

    def fwd_bwd(self, seed):
        self.adj_x[...] = 0
        self.fwd(self.W, self.x, self.b, self.y)
        self.bwd(self.W, self.x, self.y, seed["y"], self.adj_W, self.adj_x, self.adj_b)

    def result(self):
        return {"y": self.y}, {"W": self.adj_W, "x": self.adj_x, "b": self.adj_b}


class NumbaParallel(NumbaSerial):
    fwd = staticmethod(_fwd_par)

    @staticmethod
    def bwd(*args):
        _bwd_par(*args, numba.get_num_threads())


class Warp(optional.WarpTapeSystem):
    seed_key = "y"
    note = ("two launches (affine, then tanh): Warp's gradient of the one-kernel form "
            "(adjoint's kernel) is wrong (loop-carried value after a dynamic loop)")

    def __init__(self, p):
        wp, wk = optional.warp(), optional.warp_kernels()
        self.wp, self.affine, self.tanh = wp, wk.dense_affine, wk.tanh_
        self.n = p.inputs["x"].size
        self.z = wp.zeros(self.n, dtype=wp.float32, device=self.device, requires_grad=True)
        self.W = wp.array(p.inputs["W"], dtype=wp.float32, device=self.device, requires_grad=True)
        self.x = wp.array(p.inputs["x"], dtype=wp.float32, device=self.device, requires_grad=True)
        self.b = wp.array(p.inputs["b"], dtype=wp.float32, device=self.device, requires_grad=True)
        self.y = wp.zeros(self.n, dtype=wp.float32, device=self.device, requires_grad=True)
        self._init_tape()

    def _launch(self):
        self.wp.launch(self.affine, dim=self.n, inputs=[self.n, self.W, self.x, self.b],
                       outputs=[self.z], device=self.device)
        self.wp.launch(self.tanh, dim=self.n, inputs=[self.z], outputs=[self.y], device=self.device)

    def _seeded(self):
        return self.y

    def result(self):
        return {"y": self.y.numpy()}, {"W": self.W.grad.numpy(), "x": self.x.grad.numpy(),
                                       "b": self.b.grad.numpy()}


class Jax:
    requires = "jax"

    def __init__(self, p):
        jax = optional.jax()
        jnp = jax.numpy

        def f(W, x, b):
            return jnp.tanh(W @ x + b)

        def fb(W, x, b, ct):
            out, vjp = jax.vjp(f, W, x, b)
            return out, vjp(ct)
        self.jax, self.f, self.fb = jax, jax.jit(f), jax.jit(fb)
        self.W, self.x, self.b = (jax.device_put(p.inputs[k]) for k in ("W", "x", "b"))
        self.seeds, self.res = {}, None

    def forward(self):
        self.f(self.W, self.x, self.b).block_until_ready()

    def fwd_bwd(self, seed):
        key = id(seed["y"])
        if key not in self.seeds:
            self.seeds[key] = self.jax.device_put(seed["y"])
        self.res = self.jax.block_until_ready(self.fb(self.W, self.x, self.b, self.seeds[key]))

    def result(self):
        out, (gW, gx, gb) = self.res
        return {"y": np.asarray(out)}, {"W": np.asarray(gW), "x": np.asarray(gx),
                                        "b": np.asarray(gb)}


SYSTEMS = {"adjoint": Adjoint, "adjoint-unchecked": AdjointUnchecked,
           "numba-ser": NumbaSerial, "numba-par": NumbaParallel, "warp": Warp, "jax": Jax}
