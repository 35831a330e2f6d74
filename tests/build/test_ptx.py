"""Generated CUDA modules compile to PTX with numba.cuda (no GPU needed, only NVVM).

numba's simulator runs CUDA kernels as Python, so code numba.cuda cannot type or
lower passes there. ``adjoint.ptx`` compiles each grid kernel for a real GPU
(compute capability 9.0) in a process without the simulator. conftest.py runs it
over every CUDA module a test run generates; these tests check the checker and
the constructs that once passed the simulator but not numba.cuda.
"""
import functools
import os
import subprocess
import sys

import pytest

import adjoint as ad
from tests.conftest import run_ptx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MINMAX_LOOP = '''
@ad.kernel(loop_capacity=8)
def k(n: int, x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    p = ad.max(x[i], 0.25)
    for j in range(n):
        p = min(p * x[i], 3.0) + max(x[i], p)
    out[i] = p
'''


def _ptx(*args):
    return run_ptx(*args, cwd=ROOT)


@functools.lru_cache(maxsize=None)
def _unavailable():
    code = ("import adjoint.ptx as p; ok, why = p.available(); print(why); "
            "raise SystemExit(0 if ok else 3)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, NUMBA_ENABLE_CUDASIM="0"))
    return None if proc.returncode == 0 else (proc.stdout + proc.stderr).strip()


@pytest.fixture
def need_nvvm():
    why = _unavailable()
    if why:
        pytest.skip(f"no PTX compiler here: {why}")


def _cuda_module(tmp_path, source, name="kernels"):
    src = tmp_path / f"{name}.py"
    src.write_text("import adjoint as ad\n" + source)
    out = tmp_path / f"{name}_cuda.py"
    out.write_text(ad.generate(str(src), str(out), target="cuda"))
    return out


def test_loop_stacks_and_min_max_compile(tmp_path, need_nvvm):
    """Loop stacks index with a clamp and min/max are builtins: both once compiled
    only in the simulator (numba's built-in CUDA target mistypes min(a, b))."""
    path = _cuda_module(tmp_path, MINMAX_LOOP)
    proc = _ptx(str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 of 3 CUDA grid kernels compiled" in proc.stdout    # forward, backward, jvp


def test_example_kernels_compile(tmp_path, need_nvvm):
    path = tmp_path / "springs_cuda.py"
    path.write_text(ad.generate(os.path.join(ROOT, "examples", "springs_kernels.py"), str(path),
                                target="cuda"))
    proc = _ptx(str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " of " in proc.stdout and "FAILED" not in proc.stdout


def test_a_kernel_numba_rejects_is_reported(tmp_path, need_nvvm):
    path = _cuda_module(tmp_path, MINMAX_LOOP)
    text = path.read_text()
    # a dict: fine in Python (and so in the simulator), not in a CUDA kernel
    text = text.replace("    i = tid0\n", "    i = tid0\n    bad = {'a': 1.0}\n", 1)
    assert "bad = {" in text
    path.write_text(text)
    proc = _ptx(str(path))
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout and "k_forward" in proc.stdout
    assert "2 of 3 CUDA grid kernels compiled" in proc.stdout


def test_refuses_to_run_in_the_simulator(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-m", "adjoint.ptx", str(tmp_path)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "simulator is on" in proc.stderr


def test_bad_arguments_are_clear_errors(tmp_path):
    proc = _ptx(tmp_path / "missing.py")
    if proc.returncode == 2 and "cannot compile PTX here" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 2 and "missing.py: no such file or folder" in proc.stderr
    proc = _ptx("--cc", "nine", tmp_path)
    assert proc.returncode == 2 and "compute capability like 9.0" in proc.stderr


def test_modules_differing_only_in_their_source_names_are_compiled_once(tmp_path):
    """The suite's PTX check compiles each code once: modules generated from one kernel's
    source in files of other names (comments, docstring, ``origin=``, the bounds table's
    ``file=``) are one; a module whose code differs in one constant, or in the source lines
    its loop-overflow status names, is not."""
    from adjoint.ptx import distinct
    one = _cuda_module(tmp_path, MINMAX_LOOP, "first")
    two = _cuda_module(tmp_path, MINMAX_LOOP, "second")
    moved = _cuda_module(tmp_path, "\n\n" + MINMAX_LOOP, "moved")   # (its lines are in its code)
    other = _cuda_module(tmp_path, MINMAX_LOOP.replace("0.25", "0.5"), "third")
    assert "first.py" in one.read_text() and "second.py" in two.read_text()
    assert one.read_text() != two.read_text()
    assert distinct([str(one), str(two), str(other), str(moved)]) == \
        ([str(one), str(other), str(moved)], 1)
    assert distinct([str(two), str(one)]) == ([str(two)], 1)
