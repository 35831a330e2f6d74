"""Smoke test of ``benchmarks/run.py``: tiny sizes, adjoint and hand-written numba only.

Checks that the benchmark runs to the end, that every system's gradient passes
the float64 check on every workload, and that the JSON report holds a timing
for each. It times nothing itself (timings are the benchmark's business).
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import harness
from benchmarks import report as report_md
from benchmarks.workloads import load, optional
from tests.conftest import run_ptx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKLOADS = ["elementwise", "springs", "nbody", "stencil", "dense"]
SYSTEMS = ["adjoint", "adjoint-unchecked", "numba-ser", "numba-par"]
USER = [f"{wl}-user" for wl in WORKLOADS]          # the workloads as a user writes them
USER_SYSTEMS = ["adjoint", "numba-ser", "numba-par"]
HAND_JVP = ["springs", "nbody"]         # whose parallel pair has a JVP written by hand too


def _run(args, tmp_path):
    env = dict(os.environ)
    env.setdefault("ADJOINT_CACHE_DIR", str(tmp_path / "adjoint-cache"))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_quick_tiny_adjoint_and_numba(tmp_path):
    out_json = tmp_path / "bench.json"
    out = _run(["--tiny", "--systems", ",".join(SYSTEMS), "--repeat", "2", "--no-startup",
                "--json", str(out_json)], tmp_path)
    assert "GRADIENT CHECK FAILED" not in out
    for wl in WORKLOADS + USER:
        assert f"{wl:<12} OK" in out, f"float64 reference of {wl} not checked:\n{out}"
    # one "gradient check OK" line per (workload, system), and a JVP check per adjoint system
    # of the tuned workloads and per hand-written JVP (the user forms have none)
    assert out.count("gradient check OK") == \
        len(WORKLOADS) * len(SYSTEMS) + len(USER) * len(USER_SYSTEMS), out
    assert out.count("JVP check OK") == len(WORKLOADS) * 2 + len(HAND_JVP), out
    # the optional systems are reported as skipped, never dropped silently
    assert "SKIPPED warp: not selected" in out and "SKIPPED jax: not selected" in out
    report = json.loads(out_json.read_text())
    assert report["size"] == "tiny"
    for wl in WORKLOADS:
        systems = report["workloads"][wl]["systems"]
        assert sorted(systems) == sorted(SYSTEMS)
        for s in SYSTEMS:
            assert len(systems[s]["fwd_bwd_s"]) == 2
            assert systems[s]["fwd_bwd_ms_median"] > 0
        # the JVP column: adjoint's systems time their JVP launch, and the parallel pair of
        # the workloads with a JVP written by hand its own; the others have none
        jvp_systems = ("adjoint", "adjoint-unchecked") + (("numba-par",) if wl in HAND_JVP else ())
        for s in jvp_systems:
            assert len(systems[s]["jvp_s"]) == len(systems[s]["jvp_fwd_s"]) == 2
            assert systems[s]["jvp_ms_median"] > 0
            assert systems[s]["jvp_check_worst_rel_l2"] <= 1e-3
        for s in set(SYSTEMS) - set(jvp_systems):
            assert "jvp_s" not in systems[s], (wl, s)
        assert not systems["adjoint"]["bwd_measured"]      # fwd+bwd - fwd of the round
    for wl in USER:
        systems = report["workloads"][wl]["systems"]
        assert sorted(systems) == sorted(USER_SYSTEMS)
        assert systems["adjoint"]["bwd_measured"] and len(systems["adjoint"]["bwd_s"]) == 2
        assert all(b < fb for b, fb in zip(systems["adjoint"]["bwd_s"],
                                           systems["adjoint"]["fwd_bwd_s"]))
        assert re.search(rf"\| {wl} \| adjoint \|( \d+\.\d+ \|){{4}} \| +\| \d+\.\d+x \| "
                         r"\d+\.\d+\.\.\d+\.\d+ \|", report["table"]), wl
    # issue 14's targets per workload: two ratios judged, Warp's n/a (not selected)
    assert "issue 14's targets for adjoint" in out and "not these" in out
    for wl in WORKLOADS + USER:
        assert re.search(rf"\| {wl} \| \d+\.\d+ (ok|MISSED) \| \d+\.\d+ (ok|MISSED) \| n/a \|",
                         report["targets"]), (wl, report["targets"])
    assert "| jvp ms | jvp/fwd |" in report["table"]
    assert "| backward ms |" in report["table"] and "| fwd+bwd min..max ms |" in report["table"]
    for s in SYSTEMS:
        assert f"| dense | {s} |" in report["table"]
    # forward, ~backward, fwd+bwd, ratio, jvp, jvp/fwd, ratio to numba-par, min..max
    assert re.search(r"\| dense \| adjoint \| \d+\.\d+ \| ~-?\d+\.\d+ \|( \d+\.\d+ \|){4} "
                     r"\d+\.\d+x \| \d+\.\d+\.\.\d+\.\d+ \|", report["table"])
    assert re.search(r"\| dense \| numba-par \| \d+\.\d+ \| ~-?\d+\.\d+ \|"
                     r"( \d+\.\d+ \|){2} \| +\| \d", report["table"])
    rendered = report_md.render(report)
    assert "| jvp ms | jvp/fwd |" in rendered and "| dense | **adjoint** |" in rendered
    assert report["targets"] in rendered
    # what the bounds checks cost: adjoint over adjoint-unchecked, one row per workload
    assert "bounds checks: forward, checked / unchecked" in report["table"]
    for wl in WORKLOADS:
        assert re.search(rf"\| {wl} \| \d+\.\d+x \| \d+\.\d+x \|", report["table"]), wl


def _result(workload, system, fwd, fb):
    return harness.Result(workload, system, fwd=list(fwd), fb=list(fb), worst_err=0.0)


def test_targets_table_judges_per_round_ratios():
    """Each target is the median of per-round ratios: a slow round slows every system of
    that round, so the ratio holds where the medians of each system would not; a ratio
    past its bound is reported MISSED, and so is the line counting them."""
    slow = [1.0, 1.0, 3.0]      # the third round ran in a slow phase of the machine
    rows = [_result("a", "adjoint", [0.4 * k for k in slow], [1.0 * k for k in slow]),
            _result("a", "numba-par", [0.5 * k for k in slow], [1.1 * k for k in slow]),
            _result("a", "warp", [1.0 * k for k in slow], [3.5 * k for k in slow]),
            _result("b", "adjoint", [1.0, 1.0, 1.0], [3.2, 3.3, 3.4]),
            _result("b", "numba-par", [1.0, 1.0, 1.0], [2.0, 2.0, 2.0])]
    text = harness.format_targets(rows)
    assert "| a | 0.91 ok | 2.50 ok | 3.50 ok |" in text, text
    assert "| b | 1.65 MISSED | 3.30 MISSED | n/a |" in text, text
    assert text.splitlines()[-1] == ("missed: b: fwd+bwd vs numba-par 1.65; "
                                     "b: (fwd+bwd)/fwd 3.30")
    assert harness.format_targets(rows[:3]).splitlines()[-1] == "every target met"


def test_warp_in_the_user_forms(tmp_path):
    """Warp's kernels (the stencil's periodic one too) take the user forms' seed and pass
    the float64 check; the targets table then has Warp's ratio for each user form."""
    if isinstance(optional.warp(), str):
        pytest.skip(optional.warp())
    out_json = tmp_path / "bench.json"
    out = _run(["--tiny", "--only", ",".join(USER), "--systems", "adjoint,warp",
                "--repeat", "2", "--no-startup", "--no-jvp", "--json", str(out_json)], tmp_path)
    assert out.count("gradient check OK") == 2 * len(USER), out
    report = json.loads(out_json.read_text())
    for wl in USER:
        assert sorted(report["workloads"][wl]["systems"]) == ["adjoint", "warp"]
        assert re.search(rf"\| {wl} \| n/a \| \d+\.\d+ (ok|MISSED) \| \d+\.\d+ (ok|MISSED) \|",
                         report["targets"]), (wl, report["targets"])


class _Wave:
    """A JVP system of the elementwise workload: exact outputs, and tangents from the
    derivative written by hand, times ``scale`` (1: right, anything else: wrong)."""

    def __init__(self, problem, scale):
        self.x, self.v, self.scale = (problem.inputs["x"].astype(np.float64),
                                      problem.tangent["x"].astype(np.float64), scale)

    def jvp(self):
        pass

    def jvp_result(self):
        x = self.x
        d = np.cos(x) * np.exp(-x * x) - 2 * x * np.sin(x) * np.exp(-x * x) + 1
        return ({"out": np.sin(x) * np.exp(-x * x) + x}, {"out": self.scale * d * self.v})


@pytest.mark.parametrize("scale", [1.0, 1.01, -1.0])
def test_jvp_check_catches_a_wrong_tangent(scale):
    """The benchmark's JVP check (central differences of the float64 forward) passes a
    right JVP and stops a run on a tangent 1% off."""
    wl = load("elementwise")
    problem = harness.set_tangent(wl.make(np.random.default_rng(0), n=1000),
                                  np.random.default_rng(1))
    system = _Wave(problem, scale)
    if scale == 1.0:
        assert harness.verify_jvp(wl, "hand", system, problem, {}) < 1e-6
    else:
        with pytest.raises(harness.GradientMismatch, match="JVP CHECK FAILED.*dot out"):
            harness.verify_jvp(wl, "hand", system, problem, {})


def test_startup_measurements(tmp_path):
    out = _run(["--tiny", "--only", "elementwise", "--systems", "adjoint,numba-par",
                "--repeat", "1"], tmp_path)
    assert "recorded on a tape" in out
    assert "elementwise  cold" in out and "warm" in out
    # numba's compile time per generated function in the cold run, none in the warm one
    assert re.search(r"numba compiling, cold: \d+\.\d+ s in total: .*wave_forward \d", out), out
    assert "warm: none (everything from the on-disk caches)" in out


def test_cuda_systems_in_the_simulator(tmp_path):
    """``--device cuda``: adjoint's CUDA backend and the hand-written numba.cuda pair,
    each gradient checked against float64 (numba's simulator here: no timings)."""
    out_json = tmp_path / "bench.json"
    env_sim = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"),
                           "--device", "cuda", "--micro", "--systems", "adjoint,numba-cuda",
                           "--repeat", "1", "--warmup", "0", "--json", str(out_json)],
                          cwd=ROOT, env=dict(env_sim, ADJOINT_CACHE_DIR=str(tmp_path / "c")),
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, f"benchmark failed:\n{out}\n{proc.stderr}"
    assert "simulator" in out and "timings mean nothing" in out
    assert out.count("gradient check OK") == len(WORKLOADS) * 2, out
    assert "SKIPPED warp: not selected" in out and "SKIPPED jax: not selected" in out
    report = json.loads(out_json.read_text())
    assert report["device"] == "cuda" and report["baseline"] == "numba-cuda"
    for wl in WORKLOADS:
        assert sorted(report["workloads"][wl]["systems"]) == ["adjoint", "numba-cuda"]
    assert "fwd+bwd vs numba-cuda" in report["table"]
    # the simulator ran adjoint's CUDA modules as Python: numba.cuda must compile them too
    ptx = run_ptx(tmp_path / "c", cwd=ROOT)
    if ptx.returncode == 2:
        pytest.skip(f"gradients checked; no PTX compiler here: {ptx.stderr.strip()}")
    assert ptx.returncode == 0, ptx.stdout + ptx.stderr
    assert "15 of 15 CUDA grid kernels compiled" in ptx.stdout, ptx.stdout  # 5 x fwd, bwd, jvp


def test_cuda_without_a_gpu_measures_nothing(tmp_path):
    from adjoint.runtime import backend_cuda
    if backend_cuda.available() and not backend_cuda.simulated():
        pytest.skip("a CUDA GPU is present: --device cuda measures here")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", ADJOINT_CACHE_DIR=str(tmp_path / "c"))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"),
                           "--device", "cuda", "--micro"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 0 and re.search(r"^gpu: .*compute capability", proc.stdout, re.M):
        pytest.skip("a CUDA GPU is present (this process runs the simulator): it measured")
    assert proc.returncode == 2
    assert "no NVIDIA GPU" in proc.stdout


def test_unknown_system_for_the_device_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"),
                           "--device", "cuda", "--systems", "numba-par"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "numba-par on --device cuda" in proc.stderr


def test_keep_going_times_the_systems_whose_check_passed(tmp_path, monkeypatch, capsys):
    """``--keep-going``: a system whose check fails, or that raises, is named and left
    out of its workload; the others are timed and written; exit status 2. Without it
    the first mismatch still stops the run with nothing written."""
    from benchmarks import run
    real_verify = harness.verify

    def verify(workload, name, system, problem, cache):
        if name == "numba-ser":
            raise harness.GradientMismatch(f"GRADIENT CHECK FAILED: system '{name}'", name)
        if name == "numba-par":
            raise RuntimeError("a launch failed")
        return real_verify(workload, name, system, problem, cache)

    monkeypatch.setattr(harness, "verify", verify)
    out_json = tmp_path / "bench.json"
    args = ["--tiny", "--only", "elementwise", "--systems", "adjoint,numba-ser,numba-par",
            "--repeat", "1", "--warmup", "0", "--no-startup", "--no-jvp",
            "--json", str(out_json)]
    assert run.main(args + ["--keep-going"]) == 2
    out = capsys.readouterr().out
    assert "--keep-going: elementwise runs again without numba-ser" in out
    assert "RuntimeError: a launch failed" in out
    assert "FAILED elementwise/numba-par: system 'numba-par' raised RuntimeError" in out
    report = json.loads(out_json.read_text())
    assert list(report["workloads"]["elementwise"]["systems"]) == ["adjoint"]
    assert [f["system"] for f in report["check_failures"]] == ["numba-ser", "numba-par"]
    out_json.unlink()
    assert run.main(args) == 2
    assert "Aborting: no timings" in capsys.readouterr().out and not out_json.exists()


def test_busy_mode_times_each_system_again_beside_busy_processes(tmp_path):
    """``--busy 1``: each system's fwd+bwd again beside one spinning process, its slowdown
    against its own quiet time, and the targets judged (it times nothing itself)."""
    out_json = tmp_path / "busy.json"
    out = _run(["--tiny", "--only", "elementwise", "--systems", "adjoint,numba-ser",
                "--repeat", "2", "--no-startup", "--no-jvp", "--busy", "1",
                "--json", str(out_json)], tmp_path)
    assert "beside 1 busy process(es)" in out and "| elementwise | adjoint |" in out, out
    assert re.search(r"^(missed: |every busy target met)", out, re.M), out
    rows = json.loads(out_json.read_text())["busy"]["rows"]
    assert sorted(r["system"] for r in rows) == ["adjoint", "numba-ser"]
    for r in rows:
        assert len(r["busy_fwd_bwd_s"]) == 2 and r["busy_fwd_bwd_ms"] > 0
        assert r["slowdown"] == pytest.approx(r["busy_fwd_bwd_ms"] / r["quiet_fwd_bwd_ms"])


def test_busy_targets_judge_the_slowdown_and_the_serial_pair():
    from benchmarks import busy
    ok = busy.format_table([("w", "adjoint", 1.0, 1.4, 1.4), ("w", "numba-ser", 2.0, 2.2, 1.1)],
                           1)
    assert "| w | adjoint | 1.00 | 1.40 | 1.40 ok |" in ok and "every busy target met" in ok
    bad = busy.format_table([("w", "adjoint", 1.0, 1.6, 1.6), ("w", "numba-ser", 1.0, 1.1, 1.1)],
                            1)
    assert "1.60 MISSED, slower than numba-ser" in bad
    assert bad.splitlines()[-1] == ("missed: w: slowdown 1.60 > 1.5; w: 1.60 ms busy, slower "
                                    "than numba-ser's 1.10 ms")


def test_captured_user_form_is_checked_and_judged(tmp_path):
    """``adjoint-captured`` (the user form's tape captured once, replayed each round) passes
    the float64 gradient check, and issue 39's capture target judges it."""
    out = _run(["--tiny", "--only", "stencil-user", "--systems",
                "adjoint,adjoint-captured,numba-par", "--repeat", "2", "--no-startup"], tmp_path)
    assert out.count("gradient check OK") == 3, out
    assert "adjoint-captured built+warm-up" in out and "[tape.capture()]" in out, out
    assert "issue 39's target for a captured tape" in out, out
    assert re.search(r"\| stencil-user \| \d+\.\d+ \| <= 1\.3 \| (ok|MISSED) \|", out), out


def test_capture_target_table():
    rows = [_result("stencil-user", "adjoint-captured", [1.0] * 3, [1.2] * 3),
            _result("stencil-user", "numba-par", [1.0] * 3, [1.0] * 3),
            _result("nbody-user", "adjoint-captured", [1.0] * 3, [1.3] * 3),
            _result("nbody-user", "numba-par", [1.0] * 3, [1.0] * 3),
            _result("dense", "adjoint", [1.0] * 3, [1.0] * 3)]
    text = harness.format_capture_targets(rows)
    assert "| stencil-user | 1.20 | <= 1.3 | ok |" in text, text
    assert "| nbody-user | 1.30 | <= 1.2 | MISSED |" in text, text
    assert text.splitlines()[-1] == "missed: nbody-user: 1.30"
    assert harness.format_capture_targets(rows[4:]) == ""


def test_stencil_parts_times_every_part():
    """benchmarks/stencil_parts.py (the captured periodic stencil part by part) runs to the
    end and times each part it names, on a tiny grid and the plain Python backend."""
    import adjoint as ad
    from benchmarks import stencil_parts
    with ad.backend_scope("python"):
        whole = stencil_parts.rounds(6, 2, repeat=1)
        parts = stencil_parts.calls(6, repeat=1, inner=1)
    assert sorted(whole) == sorted(["captured forward", "captured forward+backward",
                                    "pair forward", "pair forward+backward"])
    assert sorted(parts) == sorted(("forward",) + stencil_parts.BACKWARDS + ("pair step",))
    assert all(t > 0 for t in list(whole.values()) + list(parts.values()))

