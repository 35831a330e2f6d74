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

import pytest

from conftest import run_ptx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ["elementwise", "springs", "nbody", "stencil", "dense"]
SYSTEMS = ["adjoint", "adjoint-unchecked", "numba-ser", "numba-par"]


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
    for wl in WORKLOADS:
        assert f"{wl:<12} OK" in out, f"float64 reference of {wl} not checked:\n{out}"
    # one "gradient check OK" line per (workload, system)
    assert out.count("gradient check OK") == len(WORKLOADS) * len(SYSTEMS), out
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
    for s in SYSTEMS:
        assert f"| dense | {s} |" in report["table"]
    # what the bounds checks cost: adjoint over adjoint-unchecked, one row per workload
    assert "bounds checks: forward, checked / unchecked" in report["table"]
    for wl in WORKLOADS:
        assert re.search(rf"\| {wl} \| \d+\.\d+x \| \d+\.\d+x \|", report["table"]), wl


def test_startup_measurements(tmp_path):
    out = _run(["--tiny", "--only", "elementwise", "--systems", "adjoint,numba-par",
                "--repeat", "1"], tmp_path)
    assert "recorded on a tape" in out
    assert "elementwise  cold" in out and "warm" in out


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
    assert "10 of 10 CUDA grid kernels compiled" in ptx.stdout, ptx.stdout


def test_cuda_without_a_gpu_measures_nothing(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", ADJOINT_CACHE_DIR=str(tmp_path / "c"))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"),
                           "--device", "cuda", "--micro"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "no NVIDIA GPU" in proc.stdout


def test_unknown_system_for_the_device_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"),
                           "--device", "cuda", "--systems", "numba-par"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "numba-par on --device cuda" in proc.stderr
