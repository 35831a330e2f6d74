"""The differential fuzzer (benchmarks/fuzz): a fast seeded subset, and checks that it can fail.

``test_seeded_subset`` draws random valid programs (funcs with early and multiple
returns and hand-written rules, kernels with aliasing, data-dependent branches,
``for``/``while`` loops with ``break``/``continue``, gathers, stencils, scatters,
atomics, several launches on one tape with overwrites in between; in about one
program in three, vec3 locals, arrays of vec3, mat33 and quaternions) and checks
each backend's forward values and gradients against a float64 plain-Python
reference and its central differences. The long run is
``python -m benchmarks.fuzz --count 10000`` (docs/fuzz.md).

The other tests show the fuzzer is not blind: a wrong hand-written rule is a
mismatch, a refused kernel is a refusal naming file:line, a finite difference
across a branch switch is skipped, and generated programs are deterministic,
valid Python that covers every construct the fuzzer promises.
"""
import collections
import dataclasses

import numpy as np

from benchmarks.fuzz.check import Reference64, _difference, compare, finite_differences, \
    load_module, run_backend
from benchmarks.fuzz.driver import run_seed
from benchmarks.fuzz.gen_kernel import KernelDef, Param
from benchmarks.fuzz.program import Profile, Program, ArrayDecl, Step, gen_program
from benchmarks.fuzz.reference import Reference
from benchmarks.fuzz.vecref import cross, matmul, quat, quat_mul, quat_rotate, quat_rotate_inv, \
    transpose, value

# numba compiles every kernel (seconds each) and the simulator runs each GPU thread
# as a Python thread: they see fewer programs, all on small grids. Seeds 8, 10, 15, 17,
# 20, 21, 23 and 24 are vector programs (10 and 15 small ones, for numba and CUDA).
SEEDS = {"python": range(0, 25), "numba": [0, 1, 10], "cuda": [0, 1, 2, 15]}
SMALL = Profile(big=0.0)


def test_seeded_subset(backend):
    """(In the test suite the python backend runs with the race checker on: conftest.)"""
    failures = []
    seeds = SEEDS[backend]
    for seed in seeds:
        rec = run_seed(seed, [backend], SMALL, cuda_max_threads=10 ** 6)
        for name, r in rec["results"].items():
            if r["status"] == "refusal" and name == "cuda" and "has no CUDA backward" in r["detail"]:
                continue        # a documented refusal: a plain store through perm[i] may collide
            if r["status"] != "ok":
                failures.append(f"seed {seed} [{name}] {r['status']}: {r['detail'][:2000]}")
    assert not failures, "\n\n".join(failures)


# --------------------------------------------------------------------------- the fuzzer can fail

def _program(kernel_src, params, funcs=(), n=6):
    """A hand-written one-launch program over leaf ``a0`` (``p0``: vec3) and buffers ``b*``."""
    arrays = {"a0": ArrayDecl("a0", (n,), "leaf"),
              "p0": ArrayDecl("p0", (n, 3), "leaf", dtype="vec3")}
    args = []
    for p in params:
        vector = p.kind in ("vin", "vout")
        if p.is_output:
            name = f"b{len(arrays) - 2}"
            arrays[name] = ArrayDecl(name, (n, 3) if vector else (n,), "buffer",
                                     dtype="vec3" if vector else "")
            args.append(name)
        else:
            args.append("p0" if vector else "a0")
    if "p0" not in args:
        del arrays["p0"]
    kdef = KernelDef("k0", 1, list(params), kernel_src)
    return Program(7, (n,), 3, arrays, list(funcs), [kdef], [Step("launch", "k0", args)])


def _run(prog, tmp_path, backend="python"):
    return run_backend(prog, load_module(prog, str(tmp_path)), finite_differences(prog), backend)


WRONG_RULE = '''@ad.func
def f0(a: float) -> float:
    return math.sin(a)


@ad.func_grad(f0)
def f0_grad(a: float, adj_ret: float):
    return adj_ret * 2.0 * math.cos(a)
'''


def test_a_wrong_gradient_is_a_mismatch(tmp_path):
    src = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
           "    i = ad.tid()\n    out0[i] = f0(x0[i])\n")
    prog = _program(src, [Param("x0", "in"), Param("out0", "out", mode="store")], [WRONG_RULE])
    out = _run(prog, tmp_path)
    assert out.status == "mismatch" and "gradient of a0" in out.detail, out.detail


def test_a_refused_kernel_is_a_located_refusal(tmp_path):
    src = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
           "    i = ad.tid()\n    out0[i] = out0[i] * x0[i]\n")
    prog = _program(src, [Param("x0", "in"), Param("out0", "out", mode="store")])
    out = _run(prog, tmp_path)
    assert out.status == "refusal" and out.located, out.detail


def test_a_wrong_forward_value_is_a_mismatch():
    ref = Reference64({"a0": np.zeros(2)}, {"b0": np.ones(2)}, {"b0": np.array([1.0, 2.0])}, 3.0, [])
    out = compare(ref, {"b0": np.array([1.0, 2.5])}, {"b0": np.array([1.0, 2.5])}, {})
    assert out.status == "mismatch" and "forward value of b0[1]" in out.detail
    out = compare(ref, {"b0": np.array([1.0, 2.0])}, {"b0": np.array([1.0, 0.0])}, {})
    assert out.status == "mismatch" and "backward changed b0" in out.detail


def test_a_difference_across_a_branch_switch_is_skipped():
    src = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
           "    i = ad.tid()\n    out0[i] = x0[i] if x0[i] > 0.0 else 3.0 * x0[i]\n")
    prog = _program(src, [Param("x0", "in"), Param("out0", "out", mode="store")], n=2)
    ref = Reference(prog)
    weights = {"b0": np.ones(2)}
    at_kink = {"a0": np.array([0.0, 0.5]), "b0": np.zeros(2)}
    e0, e1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    assert not _difference(ref, at_kink, weights, "a0", e0, "entry 0", (0,)).reliable
    smooth = _difference(ref, at_kink, weights, "a0", e1, "entry 1", (1,))
    assert smooth.reliable and abs(smooth.fd - 1.0) < 1e-8


# --------------------------------------------------------------------------- vector types

def test_the_vector_reference_agrees_with_numpy():
    rng = np.random.default_rng(3)
    a, b, m, r = (value(rng.standard_normal(s)) for s in ((3,), (3,), (3, 3), (3, 3)))
    assert np.allclose(cross(a, b), np.cross(a, b))
    assert np.allclose(matmul(m, a), np.asarray(m) @ np.asarray(a))
    assert np.allclose(matmul(m, r), np.asarray(m) @ np.asarray(r))
    assert np.allclose(transpose(m), np.asarray(m).T)
    q = rng.standard_normal(4)
    q = quat(*(q / np.linalg.norm(q)))
    conj = quat(-q[0], -q[1], -q[2], q[3])
    assert np.allclose(quat_rotate(q, a), quat_mul(quat_mul(q, quat(*a, 0.0)), conj)[:3])
    assert np.allclose(quat_rotate_inv(q, quat_rotate(q, a)), a)


VALUES = ("@ad.kernel\ndef k0(p0: ad.array(dtype=ad.vec3), out0: ad.array(dtype=ad.vec3)):\n"
          "    i = ad.tid()\n    u = p0[i]\n    b = u\n    u.x = 2.0 * u.y\n    w = u\n"
          "    u += b\n    w[2] = ad.dot(u, b)\n    out0[i] = ad.cross(b, w) + u\n")


def test_the_reference_treats_vectors_as_values(tmp_path):
    prog = _program(VALUES, [Param("p0", "vin"), Param("out0", "vout", mode="vstore")], n=4)
    ref = finite_differences(prog)
    p = ref.data["p0"]
    for k in range(4):
        b = p[k]
        u = np.array([2.0 * b[1], b[1], b[2]])
        w = u.copy()
        u = u + b
        w[2] = u @ b
        assert np.allclose(ref.finals["b0"][k], np.cross(b, w) + u)
    out = _run(prog, tmp_path)
    assert out.status == "ok" and out.checked, out.detail


# --------------------------------------------------------------------------- the generator

def test_programs_are_deterministic_and_valid():
    for seed in range(40):
        a, b = gen_program(seed), gen_program(seed)
        assert a.source() == b.source() and a.schedule() == b.schedule()
        compile(a.source(), f"seed {seed}", "exec")
        Reference(a)          # defines every func and kernel as plain Python


def test_programs_cover_every_construct():
    counts = collections.Counter()
    for seed in range(200):
        counts.update(gen_program(seed).features)
    wanted = ["while", "for", "break", "continue", "func", "func_grad", "early-return",
              "ternary", "min/max", "clamp", "abs", "swap", "store", "add", "cond", "load",
              "perm", "const", "scatter", "atomic", "atomic_sub", "total", "guard-return",
              "stencil-branch", "stencil-mod", "stencil-clamp", "all-pairs", "big-grid",
              "multi-launch",
              "one-array-several-params", "overwrite-after-read", "clone", "copy", "assign",
              "vec3", "vec3-array", "vec3-func", "mat33", "quat", "dot", "cross", "length",
              "normalize", "matmul", "transpose", "quat_rotate", "component-set", "vstore",
              "vadd", "vscatter", "vatomic"]
    assert not [w for w in wanted if counts[w] < 5], counts


def test_big_grids_are_above_the_parallel_threshold():
    big = [gen_program(s, Profile(big=1.0)) for s in range(10)]
    assert all(p.threads > 2048 for p in big)
    assert {len(p.grid) for p in big} == {1, 2}
    small = dataclasses.replace(Profile(), big=0.0)
    assert all(gen_program(s, small).threads <= 63 for s in range(30))
