"""Workload 2: 1M springs scattering into 200k particles.

Each spring s gathers the positions of its two particles a[s], b[s] and adds
its energy k*(|p_a - p_b| - rest[s])^2 to one scalar with ``ad.atomic_add``;
gradient of the energy with respect to the positions (a scatter in which many
springs hit the same particle) and the rest lengths.
"""
import math

import numba
import numpy as np

import adjoint as ad

from ..harness import Problem, Spent, fresh_tape, tangent_arrays, unchecked
from . import optional

NAME = "springs"
TITLE = "energy of 1M springs gathered from 200k particles (atomic_add), d/dpos, d/drest"
SIZES = {"full": {"n_springs": 1_000_000, "n_particles": 200_000},
         "quick": {"n_springs": 200_000, "n_particles": 40_000},
         "tiny": {"n_springs": 3000, "n_particles": 600},
         "micro": {"n_springs": 400, "n_particles": 80}}
K = 0.5


# -- adjoint: the kernel as a user writes it ------------------------------------
@ad.kernel
def spring_energy(a: ad.array(dtype=ad.int32), b: ad.array(dtype=ad.int32),
                  rest: ad.array(dtype=ad.float32), k: ad.float32,
                  pos: ad.array(dtype=ad.float32, ndim=2),
                  energy: ad.array(dtype=ad.float32)):
    s = ad.tid()
    i = a[s]
    j = b[s]
    dx = pos[i, 0] - pos[j, 0]
    dy = pos[i, 1] - pos[j, 1]
    dz = pos[i, 2] - pos[j, 2]
    d = ad.sqrt(dx * dx + dy * dy + dz * dz) - rest[s]
    ad.atomic_add(energy, 0, k * d * d)


# the same kernel with vec3 positions (ad.vec3f: float32, as the scalar one): scalarized,
# it should cost what the scalar kernel costs
@ad.kernel
def spring_energy_vec3(a: ad.array(dtype=ad.int32), b: ad.array(dtype=ad.int32),
                       rest: ad.array(dtype=ad.float32), k: ad.float32,
                       pos: ad.array(dtype=ad.vec3f), energy: ad.array(dtype=ad.float32)):
    s = ad.tid()
    i = a[s]
    j = b[s]
    d = ad.length(pos[i] - pos[j]) - rest[s]
    ad.atomic_add(energy, 0, k * d * d)


# -- problem and float64 reference ----------------------------------------------
def make(rng, n_springs, n_particles):
    pos = rng.uniform(0.0, 10.0, (n_particles, 3)).astype(np.float32)
    a = rng.integers(0, n_particles, n_springs).astype(np.int32)
    # partners nearby in index order, never the particle itself
    b = ((a + rng.integers(1, 64, n_springs)) % n_particles).astype(np.int32)
    rest = rng.uniform(0.5, 1.5, n_springs).astype(np.float32)
    # the energy is a large sum: seed with a scale that keeps float32 gradients O(1)
    return Problem(inputs={"a": a, "b": b, "rest": rest, "pos": pos}, diff=("pos", "rest"),
                   outputs=("energy",), seed={"energy": np.ones(1, np.float32)},
                   check_seed={"energy": np.full(1, 0.75, np.float32)},
                   meta={"size": f"{n_springs:,} springs, {n_particles:,} particles"})


def ref_forward(inp):
    pos = np.asarray(inp["pos"], np.float64)
    d = pos[inp["a"]] - pos[inp["b"]]
    ext = np.sqrt(np.sum(d * d, axis=1)) - np.asarray(inp["rest"], np.float64)
    return {"energy": np.array([np.sum(K * ext * ext)])}


def reference(p, seed):
    inp = p.inputs
    pos = inp["pos"].astype(np.float64)
    d = pos[inp["a"]] - pos[inp["b"]]
    length = np.sqrt(np.sum(d * d, axis=1))
    ext = length - inp["rest"].astype(np.float64)
    g = float(seed["energy"][0])
    coef = g * 2.0 * K * ext / length          # dE/dd = coef * d
    n = pos.shape[0]
    gpos = np.zeros_like(pos)
    for c in range(3):
        gpos[:, c] = (np.bincount(inp["a"], coef * d[:, c], n)
                      - np.bincount(inp["b"], coef * d[:, c], n))
    return ({"energy": np.array([np.sum(K * ext * ext)])},
            {"pos": gpos, "rest": -g * 2.0 * K * ext})


# -- systems -----------------------------------------------------------------------
class Adjoint:
    kernel = spring_energy

    def __init__(self, p):
        inp = p.inputs
        self.a, self.b = ad.array(inp["a"]), ad.array(inp["b"])
        self.rest = ad.array(inp["rest"], requires_grad=True)
        self.pos = ad.array(inp["pos"], requires_grad=True)
        self.energy = ad.zeros(1, dtype=ad.float32, requires_grad=True)
        self.n = inp["a"].size
        self.tape = None
        self.dots = tangent_arrays(p, {"energy": self.energy})

    def _launch(self, tangents=None):
        self.energy.zero_()
        ad.launch(self.kernel, dim=self.n,
                  inputs=[self.a, self.b, self.rest, K, self.pos], outputs=[self.energy],
                  tangents=tangents)

    def jvp(self):
        self.dots["energy"].zero_()       # the tangent of the energy's initial zero
        self._launch(self.dots)

    def jvp_result(self):
        return {"energy": self.energy.numpy()}, {"energy": self.dots["energy"].numpy()}

    def forward(self):
        self._launch()

    def fwd_bwd(self, seed):
        self.tape = fresh_tape(self.tape)
        with self.tape:
            self._launch()
        self.tape.backward(grads={self.energy: seed["energy"]})
        self.tape = Spent(self.tape)      # dropped: see harness.Spent

    def result(self):
        return ({"energy": self.energy.numpy()},
                {"pos": self.pos.grad.numpy(), "rest": self.rest.grad.numpy()})


class AdjointVec3(Adjoint):
    """The kernel written with vec3 positions (the same (n, 3) float32 array)."""
    kernel = spring_energy_vec3


class AdjointUnchecked(Adjoint):
    """The same kernel with @ad.kernel(bounds_check=False): what the bounds checks cost."""
    kernel = unchecked(spring_energy)


@numba.njit(cache=True)
def _fwd_ser(a, b, rest, k, pos, energy):
    e = 0.0
    for s in range(a.size):
        i, j = a[s], b[s]
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        dz = pos[i, 2] - pos[j, 2]
        d = math.sqrt(dx * dx + dy * dy + dz * dz) - rest[s]
        e += k * d * d
    energy[0] = e


@numba.njit(cache=True)
def _bwd_ser(a, b, rest, k, pos, adj_energy, adj_rest, adj_pos):
    g = adj_energy[0]
    for s in range(a.size):
        i, j = a[s], b[s]
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        dz = pos[i, 2] - pos[j, 2]
        length = math.sqrt(dx * dx + dy * dy + dz * dz)
        d = length - rest[s]
        gd = g * (k + k) * d
        adj_rest[s] = -gd
        c = gd / length
        adj_pos[i, 0] += c * dx
        adj_pos[i, 1] += c * dy
        adj_pos[i, 2] += c * dz
        adj_pos[j, 0] -= c * dx
        adj_pos[j, 1] -= c * dy
        adj_pos[j, 2] -= c * dz


@numba.njit(cache=True, parallel=True)
def _fwd_par(a, b, rest, k, pos, energy):
    e = 0.0
    for s in numba.prange(a.size):          # prange reduction on e: race-free
        i, j = a[s], b[s]
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        dz = pos[i, 2] - pos[j, 2]
        d = math.sqrt(dx * dx + dy * dy + dz * dz) - rest[s]
        e += k * d * d
    energy[0] = e


@numba.njit(cache=True, parallel=True)
def _bwd_par(a, b, rest, k, pos, adj_energy, adj_rest, adj_pos, nt):
    """Race-free scatter: each thread accumulates into its own copy of adj_pos,
    the copies are then summed in parallel over particles."""
    g = adj_energy[0]
    n = a.size
    priv = np.zeros((nt, pos.shape[0], 3), np.float32)
    for t in numba.prange(nt):
        mine = priv[t]
        for s in range(t * n // nt, (t + 1) * n // nt):
            i, j = a[s], b[s]
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            dz = pos[i, 2] - pos[j, 2]
            length = math.sqrt(dx * dx + dy * dy + dz * dz)
            d = length - rest[s]
            gd = g * (k + k) * d
            adj_rest[s] = -gd
            c = gd / length
            mine[i, 0] += c * dx
            mine[i, 1] += c * dy
            mine[i, 2] += c * dz
            mine[j, 0] -= c * dx
            mine[j, 1] -= c * dy
            mine[j, 2] -= c * dz
    for p in numba.prange(pos.shape[0]):
        for c in range(3):
            acc = adj_pos[p, c]
            for t in range(nt):
                acc += priv[t, p, c]
            adj_pos[p, c] = acc


class NumbaSerial:
    fwd, bwd = staticmethod(_fwd_ser), staticmethod(_bwd_ser)

    def __init__(self, p):
        inp = p.inputs
        self.a, self.b, self.rest, self.pos = (inp["a"].copy(), inp["b"].copy(),
                                               inp["rest"].copy(), inp["pos"].copy())
        self.k = np.float32(K)
        self.energy = np.zeros(1, np.float32)
        self.adj_rest = np.zeros_like(self.rest)
        self.adj_pos = np.zeros_like(self.pos)
        self.tangent = p.tangent

    def forward(self):
        self.fwd(self.a, self.b, self.rest, self.k, self.pos, self.energy)

    def fwd_bwd(self, seed):
        self.adj_pos[...] = 0
        self.fwd(self.a, self.b, self.rest, self.k, self.pos, self.energy)
        self.bwd(self.a, self.b, self.rest, self.k, self.pos, seed["energy"],
                 self.adj_rest, self.adj_pos)

    def result(self):
        return {"energy": self.energy}, {"pos": self.adj_pos, "rest": self.adj_rest}


@numba.njit(cache=True, parallel=True)
def _jvp_par(a, b, rest, k, pos, dot_rest, dot_pos, energy, dot_energy):
    """The forward and its directional derivative along (dot_pos, dot_rest) in one pass:
    the JVP a user would write by hand (prange reductions on both sums)."""
    e = 0.0
    de = 0.0
    for s in numba.prange(a.size):
        i, j = a[s], b[s]
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        dz = pos[i, 2] - pos[j, 2]
        ddx = dot_pos[i, 0] - dot_pos[j, 0]
        ddy = dot_pos[i, 1] - dot_pos[j, 1]
        ddz = dot_pos[i, 2] - dot_pos[j, 2]
        length = math.sqrt(dx * dx + dy * dy + dz * dz)
        d = length - rest[s]
        dd = (dx * ddx + dy * ddy + dz * ddz) / length - dot_rest[s]
        e += k * d * d
        de += (k + k) * d * dd
    energy[0] = e
    dot_energy[0] = de


class NumbaParallel(NumbaSerial):
    fwd = staticmethod(_fwd_par)

    def __init__(self, p):
        super().__init__(p)
        self.dot_energy = np.zeros(1, np.float32)

    @staticmethod
    def bwd(*args):
        _bwd_par(*args, numba.get_num_threads())

    def jvp(self):
        _jvp_par(self.a, self.b, self.rest, self.k, self.pos, self.tangent["rest"],
                 self.tangent["pos"], self.energy, self.dot_energy)

    def jvp_result(self):
        return {"energy": self.energy}, {"energy": self.dot_energy}


class Warp(optional.WarpTapeSystem):
    seed_key = "energy"

    def __init__(self, p):
        wp, wk = optional.warp(), optional.warp_kernels()
        self.wp, self.kern = wp, wk.spring_energy
        inp = p.inputs
        cpu = self.device
        self.a = wp.array(inp["a"], dtype=wp.int32, device=cpu)
        self.b = wp.array(inp["b"], dtype=wp.int32, device=cpu)
        self.rest = wp.array(inp["rest"], dtype=wp.float32, device=cpu, requires_grad=True)
        self.pos = wp.array(inp["pos"], dtype=wp.vec3, device=cpu, requires_grad=True)
        self.energy = wp.zeros(1, dtype=wp.float32, device=cpu, requires_grad=True)
        self.n = inp["a"].size
        self._init_tape()

    def _launch(self):
        self.energy.zero_()
        self.wp.launch(self.kern, dim=self.n, inputs=[self.a, self.b, self.rest, K, self.pos],
                       outputs=[self.energy], device=self.device)

    def _seeded(self):
        return self.energy

    def result(self):
        return ({"energy": self.energy.numpy()},
                {"pos": self.pos.grad.numpy(), "rest": self.rest.grad.numpy()})


class Jax:
    requires = "jax"

    def __init__(self, p):
        jax = optional.jax()
        jnp = jax.numpy
        inp = p.inputs
        a, b = jax.device_put(inp["a"]), jax.device_put(inp["b"])

        def f(pos, rest):
            d = pos[a] - pos[b]
            ext = jnp.sqrt(jnp.sum(d * d, axis=1)) - rest
            return jnp.sum(K * ext * ext).reshape(1)

        def fb(pos, rest, ct):
            out, vjp = jax.vjp(f, pos, rest)
            return out, vjp(ct)
        self.jax, self.f, self.fb = jax, jax.jit(f), jax.jit(fb)
        self.pos, self.rest = jax.device_put(inp["pos"]), jax.device_put(inp["rest"])
        self.res = None

    def forward(self):
        self.f(self.pos, self.rest).block_until_ready()

    def fwd_bwd(self, seed):
        self.res = self.jax.block_until_ready(self.fb(self.pos, self.rest, seed["energy"]))

    def result(self):
        out, (gp, gr) = self.res
        return {"energy": np.asarray(out)}, {"pos": np.asarray(gp), "rest": np.asarray(gr)}


SYSTEMS = {"adjoint": Adjoint, "adjoint-vec3": AdjointVec3, "adjoint-unchecked": AdjointUnchecked,
           "numba-ser": NumbaSerial, "numba-par": NumbaParallel, "warp": Warp, "jax": Jax}
