"""The ``rt.<name>`` names generated code uses are those adjoint/runtime/names.py lists.

- every backend (python, numba, the CUDA simulator) provides each name its target's
  modules may use (``names.required``);
- every ``rt.<name>`` and ``adjoint.runtime.<name>`` in generated modules -- of
  examples/springs_kernels.py and of the kernels below, which between them take every
  path of emit (loop stacks of each kind, float32, bounds checks of each kind, parallel
  chunks and blocks, a colliding store, funcs with and without a JVP), for the cpu and
  the cuda targets -- is listed; and every helper listed is used by one of them, so
  the list is not stale.
"""
import importlib
import os
import re

import pytest

import adjoint as ad
import adjoint.runtime
from adjoint.runtime import names
from adjoint.runtime.jit import BACKENDS

HERE = os.path.dirname(os.path.abspath(__file__))
SPRINGS = os.path.join(HERE, "..", "..", "examples", "springs_kernels.py")
RT_NAME = re.compile(r"\brt\.(\w+)")
MODULE_NAME = re.compile(r"\badjoint\.runtime\.(\w+)")

KERNELS = '''\
import math

import adjoint as ad


@ad.func
def soft(x: float) -> float:
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@ad.kernel
def loops(x: ad.array(dtype=float), n: ad.array(dtype=ad.int64), y: ad.array(dtype=float)):
    # a for loop with a break, a while loop, a func, math, clamp, int(), ** and /
    i = ad.tid()
    s = x[i]
    k = 0
    flag = False
    for j in range(n[i]):
        s = math.sin(s) * x[i] + float(k) + soft(s)
        k = k + j % 3
        flag = s > 0.5
        if flag and s > 2.0:
            break
    while s > 1.0:
        s = s * 0.5
    t = 0.0
    if flag:
        t = 1.0
    y[i] = (ad.clamp(s, -1.0, 1.0) + float(math.floor(s)) + s ** 2.0 + s / x[i] +
            float(int(s)) + float(k) + t)


@ad.kernel
def loops32(x: ad.array(dtype=ad.float32), n: ad.array(dtype=ad.int64),
            y: ad.array(dtype=ad.float32)):
    i = ad.tid()
    s = x[i]
    for j in range(n[i]):
        s = s * 0.5 + math.cos(s)
    y[i] = s // x[i] + s % x[i]


@ad.kernel
def window(x: ad.array(dtype=float), lo: ad.array(dtype=ad.int64), y: ad.array(dtype=float)):
    # a loop over a run-time range reading x[j]: its range is checked before it runs
    i = ad.tid()
    s = 0.0
    m = lo[i] + 1
    for j in range(lo[i], lo[i] + 3):
        s = s + x[j] * x[m]
    for j in range(lo[i]):
        if x[j] > 0.5:
            break
        s = s * x[j]
    y[i] = s


@ad.func
def smooth(x: float) -> float:
    return x * x


@ad.func_grad(smooth)
def smooth_grad(x, adj_ret):
    return 2.0 * x * adj_ret


@ad.kernel
def custom(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    # a func with a hand-written adjoint: no JVP (rt.unavailable)
    i = ad.tid()
    y[i] = smooth(x[i])


@ad.kernel
def gather(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int64), y: ad.array(dtype=float)):
    # reads through an index array: the backward accumulates in private copies
    i = ad.tid()
    y[i] = x[idx[i]] * x[idx[i]]


@ad.kernel
def stencil(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    if i > 0 and i < x.shape[0] - 1:
        y[i] = x[i - 1] - 2.0 * x[i] + x[i + 1]


@ad.kernel
def scatter(x: ad.array(dtype=float), idx: ad.array(dtype=ad.int64), y: ad.array(dtype=float),
            total: ad.array(dtype=float)):
    # a store that may collide (no CUDA backward) and an atomic
    i = ad.tid()
    y[idx[i]] = x[i]
    ad.atomic_add(total, 0, x[i] * x[i])


@ad.kernel
def moments(x: ad.array(dtype=float), m: ad.array(dtype=float, ndim=2)):
    # every thread adds into the same two elements (on CUDA one atomic a warp: warp_sums)
    i = ad.tid()
    m[0, 0] += x[i]
    m[0, 1] += x[i] * x[i]


@ad.kernel(enable_backward=False)
def forward_only(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i] * 2.0


@ad.kernel
def grid2(x: ad.array(dtype=float, ndim=2), y: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    y[i, j] = math.atan2(x[i, j], 1.5) + math.sqrt(abs(x[i, j])) + min(x[i, j], 0.2)


@ad.kernel
def carried(x: ad.array(dtype=float), n: ad.array(dtype=ad.int64), y: ad.array(dtype=float)):
    # an int (an index) and a bool (a branch) carried by a loop and needed by its backward
    i = ad.tid()
    s = x[i]
    k = i
    up = False
    for j in range(n[i]):
        if up:
            s = s * x[k]
        else:
            s = math.sin(s) + x[k]
        k = (k * 7 + 3) % x.shape[0]
        up = s > 0.3
    y[i] = s
'''


def unlisted(text, target):
    """The ``rt.<name>``/``adjoint.runtime.<name>`` names in ``text`` that names.py does
    not list for ``target``."""
    rt = set(RT_NAME.findall(text)) - set(names.required(target))
    module = set(MODULE_NAME.findall(text)) - set(names.MODULE)
    return sorted(rt) + sorted(f"adjoint.runtime.{n}" for n in module)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """{target: [module source, ...]} for springs_kernels.py and KERNELS."""
    path = tmp_path_factory.mktemp("names") / "names_kernels.py"
    path.write_text(KERNELS)
    return {t: [ad.generate(p, target=t) for p in (SPRINGS, str(path))]
            for t in (names.CPU, names.CUDA)}


def test_every_backend_is_assigned_a_target():
    assert set(names.BACKEND_TARGET) == set(BACKENDS)


@pytest.mark.parametrize("backend_name", sorted(BACKENDS))
def test_every_backend_provides_the_names_of_its_target(backend_name):
    be = importlib.import_module(BACKENDS[backend_name])
    missing = [n for n in names.required(names.BACKEND_TARGET[backend_name])
               if not hasattr(be, n)]
    assert not missing, f"backend {backend_name} lacks rt." + ", rt.".join(missing)


def test_the_module_names_exist():
    assert [n for n in names.MODULE if not hasattr(adjoint.runtime, n)] == []


@pytest.mark.parametrize("target", [names.CPU, names.CUDA])
def test_generated_modules_use_only_listed_names(generated, target):
    for text in generated[target]:
        assert unlisted(text, target) == [], \
            "generated code uses names adjoint/runtime/names.py does not list"


def test_every_listed_helper_is_used_by_generated_code(generated):
    for target in (names.CPU, names.CUDA):
        used = {n for text in generated[target] for n in RT_NAME.findall(text)}
        helpers = {n for n, need in names.HELPERS.items() if target in need.targets}
        assert sorted(helpers - used) == [], f"{target}: listed but never emitted"
    used = {n for texts in generated.values() for text in texts
            for n in MODULE_NAME.findall(text)}
    assert used == set(names.MODULE)


def test_the_check_finds_an_unlisted_name():
    text = "x = rt.sin(a) + rt.stack_push(s, 0, x)\nk = rt.launcher(f, 1)\n" \
           "spec = adjoint.runtime.Spec()\n"
    assert unlisted(text, names.CPU) == ["launcher", "adjoint.runtime.Spec"]
    assert unlisted(text, names.CUDA) == ["stack_push", "adjoint.runtime.Spec"]
