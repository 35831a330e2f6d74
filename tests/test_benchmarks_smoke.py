"""Smoke test of ``benchmarks/run.py``: tiny sizes, adjoint and hand-written numba only.

Checks that the benchmark runs to the end, that every system's gradient passes
the float64 check on every workload, and that the JSON report holds a timing
for each. It times nothing itself (timings are the benchmark's business).
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ["elementwise", "springs", "nbody", "stencil", "dense"]
SYSTEMS = ["adjoint", "numba-ser", "numba-par"]


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


def test_startup_measurements(tmp_path):
    out = _run(["--tiny", "--only", "elementwise", "--systems", "adjoint,numba-par",
                "--repeat", "1"], tmp_path)
    assert "recorded on a tape" in out
    assert "elementwise  cold" in out and "warm" in out
