"""The differential fuzzer (benchmarks/fuzz): a fast seeded subset, and checks that it can fail.

``test_seeded_subset`` draws random valid programs (funcs with early and multiple
returns and hand-written rules, kernels with aliasing, data-dependent branches,
``for``/``while`` loops with ``break``/``continue``, gathers, stencils, scatters,
atomics, several launches on one tape with overwrites in between; in about one
program in three, vec3 locals, arrays of vec3, mat33 and quaternions) and checks
each backend's forward values and gradients against a float64 plain-Python
reference and its central differences. The same programs run as float32 programs
(``..._in_float32``), their funcs through ``ad.grad``/``ad.jvp``/``ad.hessian`` from
Python (``..._of_funcs_from_python``), and their launches through
``ad.autograd.hvp`` (``..._of_hessian_vector_products``), and with a run of their
launches under ``ad.checkpoint`` (``..._with_a_checkpointed_segment``). The long run is
``python -m benchmarks.fuzz --count 10000`` (docs/fuzz.md).

The other tests show the fuzzer is not blind: a wrong hand-written rule is a
mismatch (in float64 and float32, from Python, and through a kernel's second
derivative), a refused kernel is a refusal naming file:line, a finite difference
across a branch switch is skipped, a float32 run whose rounding took another branch
is told from a wrong one, and generated programs are deterministic, valid Python that
covers every construct the fuzzer promises. Programs drawn with ``--extras`` (math.asinh
... math.fmod, math.isnan/isinf/isfinite, funcs with defaults called with keywords) leave
the others as they were, hold their extras, regenerate from their reproducer's command,
and a few pass on python.

Every run is also run with no optimization pass and compared (benchmarks/fuzz/levels.py:
bit for bit unless a pass that rounds otherwise applied), so these tests are not rerun
by tests/levels.py. Programs drawn with ``--stores`` store one element several times
(issue 37: pass scale doubled such gradients before 09b4cd3); a hand-written program of
those shapes passes on every backend, and with the old scale pass put back it is a
mismatch and a level mismatch that names pass scale.
"""
import collections
import dataclasses

import numpy as np
import pytest

import adjoint as ad
from adjoint.checkpoint import CheckpointStep
from benchmarks.fuzz.check import TOL32, Reference64, _difference, as_float32, compare, \
    finite_differences, load_module, record, run_backend
from benchmarks.fuzz.ckpt import check_ckpt, segment
from benchmarks.fuzz import levels
from benchmarks.fuzz.driver import Modules, judge, run_seed
from benchmarks.fuzz import funcs as fuzz_funcs
from benchmarks.fuzz.funcs import check_funcs
from benchmarks.fuzz.hvp import check_hvp
from benchmarks.fuzz.minimize import minimize
from benchmarks.fuzz.gen_kernel import KernelDef, Param
from benchmarks.fuzz.program import Profile, Program, ArrayDecl, Step, _extras, _loss_only, \
    _read_seeds, _stores, gen_program
from benchmarks.fuzz.__main__ import parse, profile_of
from benchmarks.fuzz.driver import write_reproducer
from benchmarks.fuzz.reference import Reference
from benchmarks.fuzz.vecref import cross, matmul, quat, quat_mul, quat_rotate, quat_rotate_inv, \
    transpose, value

# numba compiles every kernel (seconds each) and the simulator runs each GPU thread
# as a Python thread: they see fewer programs, all on small grids. Seeds 8, 10, 15, 17,
# 20, 21, 23 and 24 are vector programs (15 a small one, for numba and CUDA; since the
# generator draws component loops, 10 is a big one: 6 launches of 2 kernels, about 240 s
# of numba compiles where 15 takes 45).
SEEDS = {"python": range(0, 25), "numba": [0, 1, 15], "cuda": [0, 1, 2, 15]}
SEEDS32 = {"python": range(30, 40), "numba": range(3, 4), "cuda": range(4, 5)}   # float32
SMALL = Profile(big=0.0, stores=0.0)      # (the programs these seeds were chosen for)
STORES = Profile(big=0.0, stores=1.0)
SEEDS_STORES = {"python": (0, 7, 22, 23, 45), "numba": (7,), "cuda": (22,)}  # old scale: wrong

# the fuzzer compares each run with its unoptimized run itself (levels.py)
pytestmark = pytest.mark.levels_skip("the fuzzer compares optimization levels itself")


def _seeded(seeds, backend, profile=SMALL):
    """``(failures, results)`` of the programs of ``seeds`` on ``backend``, each also run
    with no optimization pass and compared (levels.py). The one refusal accepted is the
    documented one: a plain store through ``perm[i]`` has no CUDA backward."""
    failures, results = [], []
    for seed in seeds:
        rec = run_seed(seed, [backend], profile, cuda_max_threads=10 ** 6)
        for name, r in rec["results"].items():
            results.append(r)
            if r["status"] == "refusal" and name.startswith("cuda") and \
                    "has no CUDA backward" in r["detail"]:
                continue
            if r["status"] != "ok":
                failures.append(f"seed {seed} [{name}] {r['status']}: {r['detail'][:2000]}")
    return failures, results


def test_seeded_subset(backend):
    """(In the test suite the python backend runs with the race checker on: conftest.)
    Each program's optimized and unoptimized runs agree (levels.py)."""
    failures, results = _seeded(SEEDS[backend], backend)
    assert not failures, "\n\n".join(failures)
    compared = [r["levels"] for r in results if r.get("levels", {}).get("status") == "ok"]
    assert len(compared) >= len(results) - 1, results
    assert any(lv["exact"] for lv in compared) or backend == "cuda", compared  # (atomics)


def test_seeded_subset_with_stores(backend):
    """Programs whose kernels store one element several times (the same value and others,
    with reads, stores and a read-back between; one element stored by one thread), whose
    leaves are seeded in the backward too (``--stores``): finite differences and the
    optimization levels agree (the shapes of issue 37; pass scale as it was before
    09b4cd3 got every one of these programs wrong, docs/fuzz.md)."""
    failures, results = _seeded(SEEDS_STORES[backend], backend, STORES)
    assert not failures, "\n\n".join(failures)
    assert all(r.get("levels", {}).get("status") == "ok" for r in results), results
    features = collections.Counter(f for s in SEEDS_STORES[backend]
                                   for f in gen_program(s, STORES).features)
    assert features["store-twice"] == len(SEEDS_STORES[backend]) and features["read-seed"]
    if backend == "python":
        for f in ("store-const-index", "store-first-add", "store-first-atomic",
                  "store-between-read", "store-between-other-store", "store-between-read-back",
                  "store-other-value", "vtwice"):
            assert features[f], (f, features)


def test_seeded_subset_in_float32(backend):
    """The same programs as float32 programs (check.as_float32) on float32 data, against
    the float64 reference with float32 tolerances; a run whose forward rounding took
    another branch is reported ``diverged``, and most must not."""
    failures, results = _seeded(SEEDS32[backend], backend + "32")
    assert not failures, "\n\n".join(failures)
    diverged = sum(bool(r.get("diverged")) for r in results)
    assert diverged <= len(results) // 5, f"{diverged} of {len(results)} float32 runs diverged"


def test_seeded_subset_of_funcs_from_python(backend):
    """The programs' funcs through ad.value_and_grad, ad.jvp, ad.hessian (both modes) and
    ad.grad(ad.grad(f)), called from Python (benchmarks/fuzz/funcs.py)."""
    if backend == "cuda":
        pytest.skip("funcs called from Python run on the CPU backends")
    failures, results = _seeded({"python": range(0, 12), "numba": range(1, 2)}[backend],
                                backend + "-funcs")
    assert not failures, "\n\n".join(failures)
    assert sum(r.get("checked", 0) for r in results) >= 5


def test_seeded_subset_of_hessian_vector_products(backend):
    """Each program's first launches through ad.autograd.hvp, both modes, against a
    difference of the launch's gradient (benchmarks/fuzz/hvp.py)."""
    if backend == "cuda":
        pytest.skip("the CUDA simulator runs hvp's three launches per check too slowly")
    failures, results = _seeded({"python": (1, 2, 6, 9), "numba": (6,)}[backend],
                                backend + "-hvp")
    assert not failures, "\n\n".join(failures)
    assert sum(r.get("checked", 0) for r in results) >= 1


def test_seeded_subset_with_a_checkpointed_segment(backend):
    """Each program's schedule with a run of its steps under ad.checkpoint (from a launch
    to a launch, drawn from the seed): gradients against the finite differences, and
    bit for bit against the same backend's plain tape (benchmarks/fuzz/ckpt.py). The
    seeds' segments include runs of two and three launches and clones made inside."""
    seeds = {"python": (1, 10, 20, 21, 22, 24), "numba": (10, 20),
             "cuda": (1, 30)}[backend]
    failures, results = _seeded(seeds, backend + "-ckpt")
    assert not failures, "\n\n".join(failures)
    assert len(results) == len(seeds) and sum(r["checked"] for r in results) >= 10 * len(seeds)
    progs = [gen_program(seed, SMALL) for seed in seeds]
    launches = [sum(s.op == "launch" for s in p.steps[slice(*segment(p))]) for p in progs]
    assert min(launches) >= 1 and (backend == "numba" or max(launches) >= 2), launches
    if backend == "python":
        assert any(s.op == "clone" for p in progs for s in p.steps[slice(*segment(p))])


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
        elif p.kind == "c":
            args.append(0.5)
        else:
            args.append("p0" if vector else "a0")
    if "p0" not in args:
        del arrays["p0"]
    kdef = KernelDef("k0", 1, list(params), kernel_src)
    return Program(7, (n,), 3, arrays, list(funcs), [kdef], [Step("launch", "k0", args)])


def _run(prog, tmp_path, backend="python"):
    return run_backend(prog, load_module(prog, str(tmp_path)), finite_differences(prog), backend)


def test_a_capture_replay_that_differs_is_a_mismatch(tmp_path, monkeypatch):
    """Every CPU run also replays its tape's capture and compares it bit for bit
    (benchmarks/fuzz/captured.py): a capture whose backward adds nothing is found."""
    from adjoint.runtime.capture import Capture
    prog = gen_program(1, SMALL)
    mod = load_module(prog, str(tmp_path))
    ref = finite_differences(prog)
    with ad.backend_scope("python"):
        assert run_backend(prog, mod, ref, "python").status == "ok"
        monkeypatch.setattr(Capture, "backward", lambda self, loss=None, grads=None: None)
        out = run_backend(prog, mod, ref, "python")
    assert out.status == "mismatch" and out.detail.startswith("capture: "), out.detail


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


def test_a_wrong_gradient_is_a_mismatch_in_float32(tmp_path):
    src = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
           "    i = ad.tid()\n    out0[i] = f0(x0[i])\n")
    prog = _program(src, [Param("x0", "in"), Param("out0", "out", mode="store")], [WRONG_RULE])
    ref = finite_differences(prog)
    out = run_backend(prog, load_module(prog, str(tmp_path), float32=True), ref, "python32")
    assert out.status == "mismatch" and "gradient of a0" in out.detail, out.detail
    right = _program(src, [Param("x0", "in"), Param("out0", "out", mode="store")],
                     [WRONG_RULE.replace("2.0 * ", "")])
    out = run_backend(right, load_module(right, str(tmp_path), float32=True),
                      finite_differences(right), "python32")
    assert out.status == "ok" and out.checked and not out.diverged, out.detail


RIGHT_RULES = WRONG_RULE.replace("2.0 * ", "") + \
    "\n\n@ad.func_jvp(f0)\ndef f0_jvp(a: float, dot_a: float):\n" \
    "    return math.sin(a), dot_a * math.cos(a)\n"


def test_a_wrong_derivative_of_a_func_from_python_is_a_mismatch(tmp_path):
    src = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
           "    i = ad.tid()\n    out0[i] = f0(x0[i])\n")
    params = [Param("x0", "in"), Param("out0", "out", mode="store")]
    cases = [(WRONG_RULE, "mismatch", "ad.grad along argument 0"),
             (RIGHT_RULES.replace("dot_a * math.cos(a)", "dot_a * math.sin(a)"), "mismatch",
              "ad.jvp's tangent 0"),
             (RIGHT_RULES, "ok", "")]
    for k, (rules, status, what) in enumerate(cases):
        prog = _program(src, params, [rules])
        (tmp_path / str(k)).mkdir()
        out = check_funcs(prog, load_module(prog, str(tmp_path / str(k))), "python")
        assert out.status == status and what in out.detail, (rules, out.detail)
    assert out.checked >= 3


def test_a_wrong_second_derivative_of_a_kernel_is_a_mismatch(tmp_path):
    """A func whose hand-written JVP is wrong (its gradient right): the kernel's gradient
    is right, and its Hessian-vector product (reverse over forward: through the JVP) not."""
    src = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
           "    i = ad.tid()\n    out0[i] = f0(x0[i]) * x0[i]\n")
    params = [Param("x0", "in"), Param("out0", "out", mode="store")]
    for k, (rules, status) in enumerate([(RIGHT_RULES, "ok"), (RIGHT_RULES.replace(
            "dot_a * math.cos(a)", "dot_a * math.sin(a)"), "mismatch")]):
        prog = _program(src, params, [rules])
        (tmp_path / str(k)).mkdir()
        out = check_hvp(prog, load_module(prog, str(tmp_path / str(k))), "python")
        assert out.status == status and out.checked == 1, out.detail
    assert "hvp (rev-fwd) of parameter x0" in out.detail and "fwd-rev" not in out.detail


K_SIN = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
         "    i = ad.tid()\n    out0[i] = math.sin(x0[i])\n")
K_SQUARE = ("@ad.kernel\ndef k1(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
            "    i = ad.tid()\n    out0[i] = x0[i] * x0[i]\n")


def _segment_program():
    """``b0 = sin(a0)``; the segment ``b1 = b0 * b0`` (step 1); then ``ad.copy(b0, a1)``
    overwrites what the segment read: its backward must recompute from a kept copy."""
    io = [Param("x0", "in"), Param("out0", "out", mode="store")]
    arrays = {n: ArrayDecl(n, (6,), k) for n, k in
              (("a0", "leaf"), ("a1", "leaf"), ("b0", "buffer"), ("b1", "buffer"))}
    kernels = [KernelDef("k0", 1, list(io), K_SIN), KernelDef("k1", 1, list(io), K_SQUARE)]
    steps = [Step("launch", "k0", ["a0", "b0"]), Step("launch", "k1", ["b0", "b1"]),
             Step("copy", dest="b0", src="a1")]
    return Program(7, (6,), 3, arrays, [], kernels, steps)


def test_a_wrong_recomputation_of_a_checkpointed_segment_is_a_mismatch(tmp_path, monkeypatch):
    prog = _segment_program()
    mod, ref = load_module(prog, str(tmp_path)), finite_differences(prog)
    with ad.backend_scope("python"):
        _, tape = record(prog, mod, ref.data, "cpu", (1, 2))
    assert [type(s).__name__ for s in tape.steps].count("CheckpointStep") == 1
    out = check_ckpt(prog, mod, ref, "python", steps=(1, 2))
    assert out.status == "ok" and out.checked >= 4, out.detail
    backward = CheckpointStep.backward

    def forgets_the_copy(step):      # recomputes from what the inputs hold now (a1's values)
        step.values = [buf for _, buf in step.inputs]
        backward(step)

    def one_ulp_off(step):           # recomputes from inputs one ulp off what they held
        step.values = [np.nextafter(v, np.inf) for v in step.values]
        backward(step)

    monkeypatch.setattr(CheckpointStep, "backward", forgets_the_copy)
    out = check_ckpt(prog, mod, ref, "python", steps=(1, 2))
    assert out.status == "mismatch", out.detail
    assert "gradient of a0" in out.detail and "finite difference" in out.detail
    assert "checkpointed gradient of a0" in out.detail and "steps 2-2 of the schedule's 3 (launches 2-2 of 2)" in out.detail
    monkeypatch.setattr(CheckpointStep, "backward", one_ulp_off)
    out = check_ckpt(prog, mod, ref, "python", steps=(1, 2))
    assert out.status == "mismatch", out.detail
    assert out.detail.startswith("checkpointed gradient of a0") and "bit for bit" in out.detail
    assert "finite difference" not in out.detail        # within the FD tolerance: bits only


def test_a_checkpointed_failure_shrinks_with_its_segment(monkeypatch):
    """The minimizer pins the segment (Program.segment) and moves it with the steps it
    drops: here the copy after the segment goes, and the segment is still launch k1."""
    backward = CheckpointStep.backward

    def one_ulp_off(step):
        step.values = [np.nextafter(v, np.inf) for v in step.values]
        backward(step)

    monkeypatch.setattr(CheckpointStep, "backward", one_ulp_off)
    prog = dataclasses.replace(_segment_program(), segment=(1, 2))
    small, out = minimize(prog, "python-ckpt", log=lambda _: None)
    assert out.status == "mismatch" and out.detail.startswith("checkpointed gradient of a0")
    assert [s.op for s in small.steps] == ["launch", "launch"]
    assert small.steps[slice(*small.segment)] == [prog.steps[1]]


STORED = """@ad.kernel
def k0(x0: ad.array(dtype=float), x1: ad.array(dtype=float), out0: ad.array(dtype=float),
       out1: ad.array(dtype=float), out2: ad.array(dtype=float), out3: ad.array(dtype=float)):
    i = ad.tid()
    sv = 0.5 * math.sin(x0[i]) + x0[i] * x0[i]
    out0[i] += sv
    sr = x1[i]
    out0[i] = sv
    ad.atomic_add(out1, i, sv)
    out2[i] = sr * sv
    out1[i] = sv
    out1[i] = sv
    if i == 1:
        out3[0] = sv
        out3[0] = sv


@ad.kernel
def k1(x0: ad.array(dtype=float), out0: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    v = math.sqrt(x0[i] * x0[i] + 1.0)
    u = ad.vec3(v, 2.0 * v, v * x0[i])
    out0[i] = u
    t = x0[i]
    out0[i] = u
"""


def _stored_program(one_thread=True):
    """Issue 37's shapes, each of which pass scale doubled before 09b4cd3 (dO/dA twice
    what it is): a value added, then stored into the same element (``out0``); added
    atomically, then stored twice, with a read and another store between (``out1``); one
    element stored twice by one thread (``out3[0]``, ``if i == 1``; not ``one_thread``:
    left out, as CUDA refuses a store at an index other threads may store to); a vec3
    of a square root stored twice with a read between. The leaf ``a0`` is seeded in the
    backward."""
    n = 6
    arrays = {"a0": ArrayDecl("a0", (n,), "leaf"), "a1": ArrayDecl("a1", (n,), "leaf")}
    for k in range(4):
        arrays[f"b{k}"] = ArrayDecl(f"b{k}", (n,), "buffer")
    arrays["b4"] = ArrayDecl("b4", (n, 3), "buffer", dtype="vec3")
    k0 = KernelDef("k0", 1, [Param("x0", "in"), Param("x1", "in")] +
                   [Param(f"out{k}", "out", mode="twice") for k in range(4)], "")
    k1 = KernelDef("k1", 1, [Param("x0", "in"), Param("out0", "vout", mode="vtwice")], "")
    k0.source, k1.source = STORED.split("\n\n\n")
    if not one_thread:
        k0.source = k0.source.split("    if i == 1:")[0]
    steps = [Step("launch", "k0", ["a0", "a1", "b0", "b1", "b2", "b3"]),
             Step("launch", "k1", ["a0", "b4"])]
    return Program(37, (n,), 3, arrays, [], [k0, k1], steps, read_seeds=("a0",))


def _judged(prog, folder, backend, each_pass=False):
    folder.mkdir(exist_ok=True)
    return judge(prog, finite_differences(prog), backend, Modules(prog, str(folder)),
                 each_pass=each_pass)


def test_stores_of_one_element_pass_at_both_optimization_levels(backend, tmp_path):
    """The shapes pass scale got wrong (issue 37), against central differences and with
    the optimizations on and off."""
    prog = _stored_program(one_thread=backend != "cuda")
    assert ("out3[0]" in prog.source()) == (backend != "cuda")
    out, lv = _judged(prog, tmp_path, backend)
    assert out.status == "ok" and out.checked >= 6, out.detail
    assert lv["status"] == "ok" and "scale" in lv["applied"], lv
    assert _stored_program().seeded()[-1] == "a0"


def test_the_old_scale_pass_is_a_mismatch_and_a_level_mismatch(tmp_path, monkeypatch):
    """With pass scale as it was before 09b4cd3 (only an assigned name ended a doubling,
    not a store into an adjoint array), the program above is off the finite differences,
    its optimized and unoptimized runs disagree, and turning the passes off one at a
    time names scale."""
    from adjoint.optimize import scale
    monkeypatch.setenv("ADJOINT_CACHE_DIR", str(tmp_path / "cache"))   # (transformed anew)
    monkeypatch.setattr(scale, "changed_names", lambda s: scale.assigned_names([s]))
    out, lv = _judged(_stored_program(), tmp_path / "old", "python")
    assert out.status == "mismatch" and lv["status"] == "disagree", out.detail
    lines = out.detail.splitlines()
    assert lines[0].startswith("gradient of a0 ") and "finite difference" in lines[0], lines
    at = next(k for k, line in enumerate(lines) if line.startswith("optimized and unoptimized"))
    assert lines[at].startswith("optimized and unoptimized disagree: gradient a0"), lines[at]
    assert lines[at + 1].startswith("the unoptimized code agrees with the finite differences")
    assert lines[at + 2] == "turned off alone, -scale changes the results", lines[at + 2]
    assert [n for n, r in lv["each"].items() if r != "agrees"] == ["scale"], lv["each"]


def test_levels_compare_bit_for_bit_unless_a_pass_rounds_otherwise():
    x = np.array([1.0, 2.0, 3.0])
    y = x + np.array([0.0, 0.0, 2e-9])
    assert levels.difference({"g": x}, {"g": x.copy()}, set(), "unoptimized") is None
    off = levels.difference({"g": x}, {"g": np.nextafter(x, 4.0)}, set(), "unoptimized")
    assert off.startswith("g[0]: ") and "3 of 3 differ, bit for bit" in off, off
    assert levels.difference({"g": x}, {"g": y}, {"reciprocal"}, "unoptimized") is None
    assert "tolerance 1e-09" in levels.difference({"g": x}, {"g": x + 4e-9}, {"order"}, "-")
    assert levels.difference({"g": x.astype(np.float32)}, {"g": (x + 1e-4).astype(np.float32)},
                             {"jam"}, "-") is None
    assert levels.difference({"v": 1.0, "w": np.nan}, {"v": 1.0, "w": np.nan}, set(), "-") is None
    assert "computed optimized only" in levels.difference({"v": 1.0}, {}, set(), "-")


def test_each_pass_alone_off_on_a_sample():
    """``--each-pass 1.0``: every applied optimization pass turned off alone agrees with
    the optimized run (the race checker on: conftest)."""
    rec = run_seed(1, ["python"], SMALL, each_pass=1.0)
    lv = rec["results"]["python"]["levels"]
    assert rec["results"]["python"]["status"] == "ok" and lv["status"] == "ok", rec
    assert sorted(lv["each"]) == lv["applied"] and set(lv["each"].values()) == {"agrees"}
    assert "each" not in run_seed(1, ["python"], SMALL)["results"]["python"]["levels"]


def test_as_float32_makes_a_float32_program(tmp_path):
    src = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), c: float, "
           "out0: ad.array(dtype=float)):\n    i = ad.tid()\n    out0[i] = f0(x0[i]) * c\n")
    prog = _program(src, [Param("x0", "in"), Param("c", "c"), Param("out0", "out", mode="store")],
                    [WRONG_RULE])
    text = as_float32(prog.source())
    assert "dtype=float" not in text and ": float" not in text and "-> float" not in text
    assert "x0: ad.array(dtype=ad.float32)" in text and "c: ad.float32" in text
    assert "def f0(a: ad.float32) -> ad.float32:" in text
    assert as_float32("v: ad.vec3, q: ad.quat = ad.quat_rotate(q, ad.vec3(a, b, c))") == \
        "v: ad.vec3f, q: ad.quatf = ad.quat_rotate(q, ad.vec3(a, b, c))"
    mod = load_module(prog, str(tmp_path), float32=True)
    assert mod.k0.spec.params[0].np_dtype == np.float32
    assert "float64" not in ad.source(mod.k0, stage="backward")


def test_a_float32_branch_switch_is_diverged_not_a_mismatch():
    """A float32 forward value off the float64 reference is a branch that rounding took
    (diverged, not compared further) only where the reference's own float32 run took it."""
    ref = Reference64({"a0": np.zeros(2)}, {"b0": np.ones(2)}, {"b0": np.array([1.0, 2.0])},
                      3.0, [], rounded=lambda: {"b0": np.array([1.0, 1.0], np.float32)})
    out = compare(ref, {"b0": np.array([1.0, 1.0])}, {"b0": np.array([1.0, 1.0])}, {}, None, TOL32)
    assert out.status == "ok" and out.diverged and "forward value of b0[1]" in out.detail
    out = compare(ref, {"b0": np.array([1.0, 1.5])}, {"b0": np.array([1.0, 1.5])}, {}, None, TOL32)
    assert out.status == "mismatch" and "in float32 does not agree" in out.detail, out.detail
    out = compare(ref, {"b0": np.array([1.0, 2.0 + 1e-6])}, {"b0": np.array([1.0, 2.0 + 1e-6])},
                  {}, None, TOL32)
    assert out.status == "ok" and not out.diverged
    out = compare(ref, {"b0": np.array([1.0, 1.0])}, {"b0": np.array([1.0, 0.0])}, {}, None, TOL32)
    assert out.status == "mismatch" and "backward changed b0" in out.detail


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
              "vadd", "vscatter", "vatomic",
              "store-twice", "store-first-store", "store-first-add", "store-first-atomic",
              "store-between-read", "store-between-local", "store-between-other-store",
              "store-between-read-back", "store-between-other-value", "store-other-value",
              "store-const-index", "read-seed"]
    assert not [w for w in wanted if counts[w] < 5], counts
    assert counts["vtwice"] >= 2, counts


def test_big_grids_are_above_the_parallel_threshold():
    big = [gen_program(s, Profile(big=1.0)) for s in range(10)]
    assert all(p.threads > 2048 for p in big)
    assert {len(p.grid) for p in big} == {1, 2}
    small = dataclasses.replace(Profile(), big=0.0)
    assert all(gen_program(s, small).threads <= 63 for s in range(30))


# --------------------------------------------------------------------------- extras

LOSSES = Profile(big=0.0, losses=1.0, stores=0.0)


def test_losses_off_draws_the_programs_drawn_before():
    """``--losses`` is decided per kernel from a random source of its own: a program none
    of whose kernels was drawn as a loss is the one drawn without the option."""
    half = Profile(losses=0.5)
    changed = 0
    for seed in range(40):
        a, b = gen_program(seed), gen_program(seed, half)
        if not any(_loss_only(seed, k, half) for k in range(len(b.kernels))):
            assert a.source() == b.source() and a.schedule() == b.schedule(), seed
        else:
            changed += a.source() != b.source()
    assert changed >= 10


def test_loss_programs_run_their_vjp_at_once_on_numba(monkeypatch):
    """Programs whose kernels each write one one-element total: on numba a kernel with
    no loop to reverse runs its forward and VJP at once (adjoint/runtime/eager.py), and
    the gradients (seeded with the loss's random weights) match the reference."""
    from adjoint.runtime import eager
    ran, real = [], eager.backward
    monkeypatch.setattr(eager, "backward",
                        lambda step, seeds: ran.append(step.label) or real(step, seeds))
    for seed in range(40):
        assert all(len([p for p in k.params if p.is_output]) == 1
                   for k in gen_program(seed, LOSSES).kernels)
    failures = []
    for seed in (9, 22):        # (no loop in their kernels; 9 launches two of them)
        rec = run_seed(seed, ["numba"], LOSSES)
        for name, r in rec["results"].items():
            if r["status"] != "ok":
                failures.append(f"seed {seed} [{name}] {r['status']}: {r['detail'][:2000]}")
    assert not failures, "\n\n".join(failures)
    assert ran


def test_stores_off_draws_the_programs_drawn_before():
    """``--stores`` is decided per kernel (and, for the seeds on leaves, per program) from
    a random source of its own: a program none of whose kernels was drawn with stores and
    that seeds no leaf is the one drawn with ``--stores 0``."""
    none, half = Profile(stores=0.0), Profile(stores=0.5)
    changed = 0
    for seed in range(40):
        a, b = gen_program(seed, none), gen_program(seed, half)
        if not any(_stores(seed, k, half) for k in range(len(b.kernels))) and \
                not _read_seeds(seed, ["a0"], half):
            assert a.source() == b.source() and a.schedule() == b.schedule(), seed
            assert a.seeded() == b.seeded(), seed
        else:
            changed += a.source() != b.source() or a.seeded() != b.seeded()
        assert not a.read_seeds and "store-twice" not in a.features
    assert changed >= 10


EXTRAS = Profile(big=0.0, extras=1.0, stores=0.0)
EXTRA_FEATURES = ["asinh", "acosh", "atanh", "hypot", "fmod", "isnan", "isinf", "isfinite",
                  "default-param", "keyword-arg", "keyword-reordered", "default-omitted"]


def test_extras_off_draws_the_programs_drawn_before():
    """``--extras`` is decided from a random source of its own: with extras at 0.5, every
    program not drawn with extras is the one drawn without the option; none of the
    default profile's programs holds an extra."""
    half = Profile(extras=0.5)
    drawn = [s for s in range(60) if _extras(s, half)]
    assert 15 <= len(drawn) <= 45
    for seed in range(60):
        a, b = gen_program(seed), gen_program(seed, half)
        if seed not in drawn:
            assert a.source() == b.source() and a.schedule() == b.schedule(), seed
        assert not set(EXTRA_FEATURES) & set(a.features), (seed, a.features)
    assert any(gen_program(s, half).source() != gen_program(s).source() for s in drawn)


def test_extras_programs_are_deterministic_valid_and_hold_the_extras():
    counts = collections.Counter()
    for seed in range(60):
        a, b = gen_program(seed, EXTRAS), gen_program(seed, EXTRAS)
        assert a.source() == b.source() and a.schedule() == b.schedule()
        Reference(a)
        counts.update(a.features)
    rare = {"keyword-reordered": 1}        # (only where no keyword argument calls a function)
    assert not [f for f in EXTRA_FEATURES if counts[f] < rare.get(f, 3)], counts
    text = "\n".join(gen_program(s, EXTRAS).source() for s in range(60))
    for needle in ("ad.asinh(", "ad.hypot(", "ad.fmod(", "ad.isnan(", ": int = ", "float(math.is"):
        assert needle in text, needle


def test_extras_programs_pass_on_python():
    """A few programs with the extras, their launches and their funcs from Python (with
    defaulted arguments left out: seed 1), on the python backend (race checker on)."""
    failures, results = [], []
    for backend in ("python", "python-funcs"):
        for seed in (1, 4, 9):
            rec = run_seed(seed, [backend], EXTRAS)
            for name, r in rec["results"].items():
                results.append(r)
                if r["status"] != "ok":
                    failures.append(f"seed {seed} [{name}] {r['status']}: {r['detail'][:2000]}")
    assert not failures, "\n\n".join(failures)
    assert sum(r["checked"] for r in results) >= 30


FMOD = ("@ad.kernel\ndef k0(x0: ad.array(dtype=float), out0: ad.array(dtype=float)):\n"
        "    i = ad.tid()\n    t = math.fmod(x0[i], 0.5)\n"
        "    if math.isfinite(t):\n        out0[i] = t * t\n    else:\n        out0[i] = 0.0\n")


def test_a_difference_across_a_jump_of_fmod_is_skipped(tmp_path):
    """The reference records fmod's quotient (and math.isfinite's value) in its trace:
    a central difference across a jump of fmod is skipped, as one across a branch."""
    prog = _program(FMOD, [Param("x0", "in"), Param("out0", "out", mode="store")], n=2)
    ref = Reference(prog)
    weights = {"b0": np.ones(2)}
    at_jump = {"a0": np.array([0.5, 0.3]), "b0": np.zeros(2)}
    e0, e1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    assert not _difference(ref, at_jump, weights, "a0", e0, "entry 0", (0,)).reliable
    smooth = _difference(ref, at_jump, weights, "a0", e1, "entry 1", (1,))
    assert smooth.reliable and abs(smooth.fd - 0.6) < 1e-8
    assert ref.loss(at_jump, weights)[1] == [("fmod", 1), True, ("fmod", 0), True]
    out = _run(prog, tmp_path)
    assert out.status == "ok" and out.checked, out.detail


def test_the_reproducer_of_an_extras_program_regenerates_it(tmp_path):
    """The command a reproducer names (``--extras`` and all) draws the same program."""
    rec = {"seed": 5, "features": [], "threads": 0,
           "results": {"python": {"status": "mismatch", "detail": "(made up)"}}}
    path = write_reproducer(str(tmp_path), rec, EXTRAS, ["python"])
    text = open(path).read()
    command = next(line for line in text.splitlines() if line.startswith("re-run: "))
    args = parse(command.split()[4:])
    assert args.extras == 1.0
    again = gen_program(args.seed, profile_of(args))
    assert again.source() == gen_program(5, EXTRAS).source() and "fmod(" in text


def test_an_extras_failure_of_funcs_from_python_shrinks(monkeypatch):
    """``--minimize`` on an extras program and ``python-funcs``: each candidate is checked
    under the program's seed, so the points (and the defaulted arguments left out) of
    the failure are drawn again. The failure is made up: ``_forward`` refuses a call
    without the defaulted arguments (seed 1 calls ``f2`` from Python without ``b``)."""
    forward = fuzz_funcs._forward

    def fails_without_defaults(f, pt, values, rng):
        if len(pt.args) < len(f.transformed.pf.params):
            raise TypeError(f"{f.name} called without its defaults")
        forward(f, pt, values, rng)

    monkeypatch.setattr(fuzz_funcs, "_forward", fails_without_defaults)
    prog = gen_program(1, EXTRAS)
    small, out = minimize(prog, "python-funcs", log=lambda _: None, max_tries=6)
    assert out.status == "internal" and "f2 called without its defaults" in out.detail, out.detail
    assert len(small.source()) < len(prog.source())
