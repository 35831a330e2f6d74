"""Workload 3: n-body potential energy over 4k bodies, with an inner dynamic loop.

Each thread i runs ``for j in range(n)`` and stores
out[i] = -m_i * sum_j m_j / sqrt(|p_j - p_i|^2 + eps^2); gradient of
sum(seed * out) with respect to the positions and the masses. In the backward
pass every thread adds into every body's adjoint (all pairs collide).
"""
import math

import numba
import numpy as np

import adjoint as ad

from ..harness import Problem, Spent, fresh_tape, tangent_arrays, unchecked
from . import optional

NAME = "nbody"
TITLE = "n-body energy, inner `for j in range(n)` per thread, d/dpos, d/dmass"
SIZES = {"full": {"n": 4096}, "quick": {"n": 1024}, "tiny": {"n": 64},
         "micro": {"n": 32}}
EPS2 = 0.01


# -- adjoint: the kernel as a user writes it ------------------------------------
@ad.kernel
def nbody_energy(n: int, eps2: ad.float32, mass: ad.array(dtype=ad.float32),
                 pos: ad.array(dtype=ad.float32, ndim=2), out: ad.array(dtype=ad.float32)):
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
    out[i] = -mass[i] * e


# -- problem and float64 reference ----------------------------------------------
def make(rng, n):
    pos = rng.standard_normal((n, 3)).astype(np.float32)
    mass = rng.uniform(0.5, 1.5, n).astype(np.float32)
    return Problem(inputs={"pos": pos, "mass": mass}, diff=("pos", "mass"), outputs=("out",),
                   seed={"out": np.ones(n, np.float32)},
                   check_seed={"out": rng.standard_normal(n).astype(np.float32)},
                   meta={"size": f"{n:,} bodies ({n * n / 1e6:.1f}M pairs)"})


def _pairs(pos, lo, hi):
    d = pos[None, :, :] - pos[lo:hi, None, :]            # d[i, j] = p_j - p_i
    r = np.sqrt(np.sum(d * d, axis=2) + EPS2)
    return d, r


def ref_forward(inp):
    pos, m = np.asarray(inp["pos"], np.float64), np.asarray(inp["mass"], np.float64)
    out = np.empty(len(m))
    for lo in range(0, len(m), 256):
        hi = min(lo + 256, len(m))
        _, r = _pairs(pos, lo, hi)
        out[lo:hi] = -m[lo:hi] * np.sum(m[None, :] / r, axis=1)
    return {"out": out}


def reference(p, seed):
    pos, m = p.inputs["pos"].astype(np.float64), p.inputs["mass"].astype(np.float64)
    g = seed["out"].astype(np.float64)
    n = len(m)
    out, gpos, gm = np.empty(n), np.zeros((n, 3)), np.zeros(n)
    for lo in range(0, n, 256):
        hi = min(lo + 256, n)
        d, r = _pairs(pos, lo, hi)
        e = np.sum(m[None, :] / r, axis=1)
        out[lo:hi] = -m[lo:hi] * e
        gi, mi = g[lo:hi, None], m[lo:hi, None]
        gm[lo:hi] += -g[lo:hi] * e
        gm += np.sum(-gi * mi / r, axis=0)                     # d out_i / d m_j
        w = gi * mi * m[None, :] / r ** 3                      # d out_i / d d_ij = w * d_ij
        gpos += np.einsum("ij,ijc->jc", w, d)
        gpos[lo:hi] -= np.einsum("ij,ijc->ic", w, d)
    return {"out": out}, {"pos": gpos, "mass": gm}


# -- systems -----------------------------------------------------------------------
class Adjoint:
    kernel = nbody_energy

    def __init__(self, p):
        self.n = p.inputs["mass"].size
        self.pos = ad.array(p.inputs["pos"], requires_grad=True)
        self.mass = ad.array(p.inputs["mass"], requires_grad=True)
        self.out = ad.zeros(self.n, dtype=ad.float32, requires_grad=True)
        self.tape = None
        self.dots = tangent_arrays(p, {"out": self.out})

    def _launch(self, tangents=None):
        ad.launch(self.kernel, dim=self.n, inputs=[self.n, EPS2, self.mass, self.pos],
                  outputs=[self.out], tangents=tangents)

    def jvp(self):
        self._launch(self.dots)

    def jvp_result(self):
        return {"out": self.out.numpy()}, {"out": self.dots["out"].numpy()}

    def forward(self):
        self._launch()

    def fwd_bwd(self, seed):
        self.tape = fresh_tape(self.tape)
        with self.tape:
            self._launch()
        self.tape.backward(grads={self.out: seed["out"]})
        self.tape = Spent(self.tape)      # dropped: see harness.Spent

    def result(self):
        return {"out": self.out.numpy()}, {"pos": self.pos.grad.numpy(),
                                           "mass": self.mass.grad.numpy()}


class AdjointUnchecked(Adjoint):
    """The same kernel with @ad.kernel(bounds_check=False): what the bounds checks cost."""
    kernel = unchecked(nbody_energy)


@numba.njit(cache=True)
def _fwd_ser(eps2, mass, pos, out, e_out):
    n = mass.size
    for i in range(n):
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        e = 0.0
        for j in range(n):
            dx, dy, dz = pos[j, 0] - xi, pos[j, 1] - yi, pos[j, 2] - zi
            e += mass[j] / math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
        e_out[i] = e
        out[i] = -mass[i] * e


@numba.njit(cache=True)
def _bwd_ser(eps2, mass, pos, e_in, adj_out, adj_mass, adj_pos):
    """Serial scatter form: thread i adds into body j's adjoints."""
    n = mass.size
    for i in range(n):
        g = adj_out[i]
        mi = mass[i]
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        adj_mass[i] -= g * e_in[i]
        for j in range(n):
            dx, dy, dz = pos[j, 0] - xi, pos[j, 1] - yi, pos[j, 2] - zi
            r = math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
            inv = 1.0 / r
            adj_mass[j] -= g * mi * inv
            w = g * mi * mass[j] * inv * inv * inv
            adj_pos[j, 0] += w * dx
            adj_pos[j, 1] += w * dy
            adj_pos[j, 2] += w * dz
            adj_pos[i, 0] -= w * dx
            adj_pos[i, 1] -= w * dy
            adj_pos[i, 2] -= w * dz


@numba.njit(cache=True, parallel=True)
def _fwd_par(eps2, mass, pos, out, e_out):
    n = mass.size
    for i in numba.prange(n):
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        e = 0.0
        for j in range(n):
            dx, dy, dz = pos[j, 0] - xi, pos[j, 1] - yi, pos[j, 2] - zi
            e += mass[j] / math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
        e_out[i] = e
        out[i] = -mass[i] * e


@numba.njit(cache=True, parallel=True)
def _bwd_par(eps2, mass, pos, e_in, adj_out, adj_mass, adj_pos):
    """Race-free gather form (the pair term is symmetric): body i collects
    adj_pos[i] = -sum_j m_i m_j (g_i + g_j) d_ij / r_ij^3,
    adj_mass[i] = -g_i e_i - sum_j g_j m_j / r_ij."""
    n = mass.size
    for i in numba.prange(n):
        gi = adj_out[i]
        mi = mass[i]
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        am = 0.0
        ax = 0.0
        ay = 0.0
        az = 0.0
        for j in range(n):
            dx, dy, dz = pos[j, 0] - xi, pos[j, 1] - yi, pos[j, 2] - zi
            r = math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
            inv = 1.0 / r
            gj = adj_out[j]
            am += gj * mass[j] * inv
            w = mi * mass[j] * (gi + gj) * inv * inv * inv
            ax += w * dx
            ay += w * dy
            az += w * dz
        adj_mass[i] += -gi * e_in[i] - am
        adj_pos[i, 0] -= ax
        adj_pos[i, 1] -= ay
        adj_pos[i, 2] -= az


class NumbaSerial:
    fwd, bwd = staticmethod(_fwd_ser), staticmethod(_bwd_ser)

    def __init__(self, p):
        self.pos, self.mass = p.inputs["pos"].copy(), p.inputs["mass"].copy()
        self.eps2 = np.float32(EPS2)
        self.out = np.zeros_like(self.mass)
        self.e = np.zeros_like(self.mass)      # kept by the forward for the adjoint
        self.adj_mass, self.adj_pos = np.zeros_like(self.mass), np.zeros_like(self.pos)

    def forward(self):
        self.fwd(self.eps2, self.mass, self.pos, self.out, self.e)

    def fwd_bwd(self, seed):
        self.adj_mass[...] = 0
        self.adj_pos[...] = 0
        self.fwd(self.eps2, self.mass, self.pos, self.out, self.e)
        self.bwd(self.eps2, self.mass, self.pos, self.e, seed["out"], self.adj_mass, self.adj_pos)

    def result(self):
        return {"out": self.out}, {"pos": self.adj_pos, "mass": self.adj_mass}


@numba.njit(cache=True, parallel=True)
def _jvp_par(eps2, mass, pos, dot_mass, dot_pos, out, dot_out):
    """The forward and its directional derivative along (dot_pos, dot_mass) in one pass,
    as a user would write it by hand: one root and one division a pair (1/r)."""
    n = mass.size
    for i in numba.prange(n):
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        dxi, dyi, dzi = dot_pos[i, 0], dot_pos[i, 1], dot_pos[i, 2]
        e = 0.0
        de = 0.0
        for j in range(n):
            dx, dy, dz = pos[j, 0] - xi, pos[j, 1] - yi, pos[j, 2] - zi
            ddx, ddy, ddz = dot_pos[j, 0] - dxi, dot_pos[j, 1] - dyi, dot_pos[j, 2] - dzi
            inv = 1.0 / math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
            e += mass[j] * inv
            de += (dot_mass[j] - mass[j] * inv * inv * (dx * ddx + dy * ddy + dz * ddz)) * inv
        out[i] = -mass[i] * e
        dot_out[i] = -dot_mass[i] * e - mass[i] * de


class NumbaParallel(NumbaSerial):
    fwd, bwd = staticmethod(_fwd_par), staticmethod(_bwd_par)

    def __init__(self, p):
        super().__init__(p)
        self.tangent = p.tangent
        self.dot_out = np.zeros_like(self.out)

    def jvp(self):
        _jvp_par(self.eps2, self.mass, self.pos, self.tangent["mass"], self.tangent["pos"],
                 self.out, self.dot_out)

    def jvp_result(self):
        return {"out": self.out}, {"out": self.dot_out}


class Warp(optional.WarpTapeSystem):
    seed_key = "out"
    note = ("kernel rewritten as -sum_j m_i m_j/r: Warp's gradient of the natural form "
            "(adjoint's kernel) w.r.t. mass is wrong (loop-carried value after a dynamic loop)")

    def __init__(self, p):
        wp, wk = optional.warp(), optional.warp_kernels()
        self.wp, self.kern = wp, wk.nbody_energy
        self.n = p.inputs["mass"].size
        self.pos = wp.array(p.inputs["pos"], dtype=wp.vec3, device=self.device, requires_grad=True)
        self.mass = wp.array(p.inputs["mass"], dtype=wp.float32, device=self.device, requires_grad=True)
        self.out = wp.zeros(self.n, dtype=wp.float32, device=self.device, requires_grad=True)
        self._init_tape()

    def _launch(self):
        self.wp.launch(self.kern, dim=self.n, inputs=[self.n, EPS2, self.mass, self.pos],
                       outputs=[self.out], device=self.device)

    def _seeded(self):
        return self.out

    def result(self):
        return {"out": self.out.numpy()}, {"pos": self.pos.grad.numpy(),
                                           "mass": self.mass.grad.numpy()}


class Jax:
    """Vectorised over all pairs (what a JAX user writes; no per-thread loop)."""
    requires = "jax"

    def __init__(self, p):
        jax = optional.jax()
        jnp = jax.numpy

        def f(pos, mass):
            d = pos[None, :, :] - pos[:, None, :]
            r = jnp.sqrt(jnp.sum(d * d, axis=2) + EPS2)
            return -mass * jnp.sum(mass[None, :] / r, axis=1)

        def fb(pos, mass, ct):
            out, vjp = jax.vjp(f, pos, mass)
            return out, vjp(ct)
        self.jax, self.f, self.fb = jax, jax.jit(f), jax.jit(fb)
        self.pos, self.mass = jax.device_put(p.inputs["pos"]), jax.device_put(p.inputs["mass"])
        self.seeds, self.res = {}, None

    def forward(self):
        self.f(self.pos, self.mass).block_until_ready()

    def fwd_bwd(self, seed):
        key = id(seed["out"])
        if key not in self.seeds:
            self.seeds[key] = self.jax.device_put(seed["out"])
        self.res = self.jax.block_until_ready(self.fb(self.pos, self.mass, self.seeds[key]))

    def result(self):
        out, (gp, gm) = self.res
        return {"out": np.asarray(out)}, {"pos": np.asarray(gp), "mass": np.asarray(gm)}


SYSTEMS = {"adjoint": Adjoint, "adjoint-unchecked": AdjointUnchecked,
           "numba-ser": NumbaSerial, "numba-par": NumbaParallel, "warp": Warp, "jax": Jax}
