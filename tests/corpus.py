"""One corpus of kernels that the test tiers run over (Tangent's ``tests/functions.py``).

Each kernel here is ordinary module-level code (the transformer reads this file, as it
reads a user's), and ``CASES`` says how to run it: the launch dimension, one or more
sets of inputs (ints, and arrays: float ones are differentiated), the shape of the one
output array (the kernel's last parameter, zeros at the launch) and, where it is cheap,
a plain-Python reference of the forward. The tiers:

- tests/derive/test_control_flow.py: every case's forward against its reference and its
  gradient against central differences (float64), on every backend;
- tests/derive/test_jvp.py: every case's JVP against central differences along random
  tangents, and forward against reverse mode (the dot-product test), on every backend;
- tests/runtime/test_target_skeleton.py: every case on a fourth, skeleton target;
- tests/levels.py: each of those tests again with every optimization pass off (the plain
  rule-by-rule code), compared with the optimized run.

The rule tier (tests/rules/) samples each rule of the rule table on a kernel it
generates; kernels that must be refused, or that a test rewrites, stay with their test.
A new kernel shape goes here, with its case, and every tier runs it.
"""
import dataclasses
import math

import numpy as np

import adjoint as ad

SCALE = 2.5
STEPS = 3


# --------------------------------------------------------------------------- branches

@ad.kernel
def branches(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    if v < -1.0:
        y = v * v
    elif v < 0.0:
        if v < -0.5:
            y = math.sin(v)
        else:
            y = 3.0 * v
    elif v < 1.0:
        y = math.exp(v)
    else:
        y = v * v * v
    out[i] = y * v


def _branches_ref(x):
    out = []
    for v in x:
        if v < -1.0:
            y = v * v
        elif v < 0.0:
            y = math.sin(v) if v < -0.5 else 3.0 * v
        elif v < 1.0:
            y = math.exp(v)
        else:
            y = v ** 3
        out.append(y * v)
    return np.array(out)


@ad.kernel
def partial(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    flag = 0
    t = 0.0
    if v > 0.0:
        t = v * v
        flag = 1
    if flag == 1:
        y = t * 2.0
    else:
        y = -v
    out[i] = y + v


@ad.kernel
def aliasing(a: ad.array(dtype=float), b: ad.array(dtype=float)):
    i = ad.tid()
    x = a[i]
    y = x
    if y > 0.0:
        y = x * x
    else:
        y = x * x * x
    b[i] = y


# --------------------------------------------------------------------------- loops

@ad.kernel
def ranged(a: int, b: int, s: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y = 0.5
    for k in range(a, b, s):
        y = math.sin(y * v) + 0.1 * float(k)
    out[i] = y


def _ranged_ref(a, b, s, x):
    out = []
    for v in x:
        y = 0.5
        for k in range(a, b, s):
            y = math.sin(y * v) + 0.1 * k
        out.append(y)
    return np.array(out)


@ad.kernel
def dynamic_loop_mult(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    prod = 1.0
    for k in range(n):
        prod = prod * x[i]
    out[i] = prod


@ad.kernel
def loop_branch(n: int, xs: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    x = xs[i]
    y = 0.0
    for k in range(n):
        if x > 1.0:
            y = y + x * x
        else:
            y = y + 2.0 * x
        x = x * 0.9
    out[i] = y


@ad.kernel
def whiles(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y = 1.0
    k = 0
    while k < n:
        y = y * v + math.cos(y)
        k += 1
    z = 0.1
    while z < 5.0:
        z = z * (1.5 + v * v)
    out[i] = y + z


def _whiles_ref(n, x):
    res = []
    for v in x:
        y = 1.0
        for _ in range(n):
            y = y * v + math.cos(y)
        z = 0.1
        while z < 5.0:
            z = z * (1.5 + v * v)
        res.append(y + z)
    return np.array(res)


@ad.kernel
def brk(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y = 1.0
    for k in range(n):
        if k % 3 == 1:
            continue
        y = y * v + 0.25
        if y > 4.0:
            break
    s = 0.0
    k = 0
    while True:
        k += 1
        if k > n:
            break
        if k % 2 == 0:
            continue
        s = s + math.sin(v * float(k))
    out[i] = y + s


def _brk_ref(n, x):
    res = []
    for v in x:
        y = 1.0
        for k in range(n):
            if k % 3 == 1:
                continue
            y = y * v + 0.25
            if y > 4.0:
                break
        s = sum(math.sin(v * k) for k in range(1, n + 1, 2))
        res.append(y + s)
    return np.array(res)


@ad.kernel
def nested(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y = 0.3
    for k in range(n):
        for j in range(k, 0, -1):
            y = y * v + 0.1 * float(j)
        y = math.tanh(y) + v
    out[i] = y


def _nested_ref(n, x):
    res = []
    for v in x:
        y = 0.3
        for k in range(n):
            for j in range(k, 0, -1):
                y = y * v + 0.1 * j
            y = math.tanh(y) + v
        res.append(y)
    return np.array(res)


@ad.kernel
def carried(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    a = v
    b = 1.0
    c = 0.0
    for k in range(n):
        a, b = b, a
        c = c + a * b
        a = a * v
        b = b + c * 0.1
    out[i] = a + 2.0 * b + 3.0 * c


def _carried_ref(n, x):
    res = []
    for v in x:
        a, b, c = v, 1.0, 0.0
        for _ in range(n):
            a, b = b, a
            c = c + a * b
            a = a * v
            b = b + c * 0.1
        res.append(a + 2 * b + 3 * c)
    return np.array(res)


@ad.kernel
def fib(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    a = 1.0
    b = x[i]
    for k in range(n):
        a, b = b, a + b
    out[i] = b


@ad.kernel
def consts(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    y = x[i]
    for k in range(STEPS):
        y = y * SCALE + math.pi
    out[i] = y


def _consts_ref(x):
    y = x.copy()
    for _ in range(3):
        y = y * 2.5 + math.pi
    return y


# --------------------------------------------------------------------------- expressions

@ad.kernel
def exprs(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y = v * v if v > 0.5 else 2.0 * v
    if 0.0 < v < 1.0:
        y = y + math.sin(v)
    s = v
    s += y
    s *= v
    s -= 0.5 * v
    s /= 1.0 + v * v
    s **= 2.0
    out[i] = s


def _exprs_ref(x):
    res = []
    for v in x:
        y = v * v if v > 0.5 else 2.0 * v
        if 0.0 < v < 1.0:
            y = y + math.sin(v)
        s = v
        s += y
        s *= v
        s -= 0.5 * v
        s /= 1.0 + v * v
        s **= 2.0
        res.append(s)
    return np.array(res)


@ad.kernel
def pick(c: ad.array(dtype=ad.int32), x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    j = x.shape[0] - 1 - i
    y = x[i] if c[i] > 0 else x[j]
    out[i] = y * y


@ad.kernel
def guarded(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    y = 0.0
    if i < n and x[i] > 0.0:
        y = x[i] * x[i]
    if i >= n or x[i] < -1.0:
        y = y + 1.0
    if not (i < n):
        y = y + 2.0
    out[i] = y


# --------------------------------------------------------------------------- funcs

@ad.func
def sq(x: float) -> float:
    return x * x


@ad.func
def poly(x: float, y: float) -> float:
    return sq(x) * y + sq(y)


@ad.func
def polar(x: float, y: float):
    r = math.sqrt(x * x + y * y)
    t = math.atan2(y, x)
    return r, t


@ad.func
def first_above(x: float, n: int, lim: float) -> float:
    y = x
    for k in range(n):
        y = y * 1.5 + x
        if y > lim:
            return y * 2.0
    return y


@ad.func
def sign_sqrt(x: float) -> float:
    if x < 0.0:
        return -math.sqrt(-x)
    return math.sqrt(x)


@ad.kernel
def use_funcs(n: int, x: ad.array(dtype=float), y: ad.array(dtype=float),
              out: ad.array(dtype=float)):
    i = ad.tid()
    a = x[i]
    b = y[i]
    r, t = polar(a, b)
    s = 0.0
    for k in range(n):
        s = s + poly(a, b * float(k)) + sign_sqrt(a - float(k))
    out[i] = r * t + s + first_above(a, n, 3.0)


def _funcs_ref(n, x, y):
    def above(x, n, lim):
        v = x
        for _ in range(n):
            v = v * 1.5 + x
            if v > lim:
                return v * 2.0
        return v

    def signed_root(v):
        return -math.sqrt(-v) if v < 0 else math.sqrt(v)
    res = []
    for a, b in zip(x, y):
        r, t = math.hypot(a, b), math.atan2(b, a)
        s = 0.0
        for k in range(n):
            s += a * a * b * k + (b * k) ** 2 + signed_root(a - k)
        res.append(r * t + s + above(a, n, 3.0))
    return np.array(res)


@ad.func
def alias_branch(x: float) -> float:
    y = x
    if y > 0.0:
        y = x * x
    else:
        y = x * x * x
    return y


@ad.kernel
def alias_in_func(a: ad.array(dtype=float), b: ad.array(dtype=float)):
    i = ad.tid()
    b[i] = alias_branch(a[i])


# --------------------------------------------------------------------------- grids, atomics

@ad.kernel
def grid2(x: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    jn = (j + 1) % x.shape[1]
    out[i, j] = x[i, j] * x[i, jn] + math.sin(x[i, j]) * float(x.shape[0])


@ad.kernel
def grid3(x: ad.array(dtype=float, ndim=3), w: ad.array(dtype=float),
          out: ad.array(dtype=float, ndim=3)):
    i, j, k = ad.tid()
    out[i, j, k] = x[i, j, k] * x[i, j, k] * w[k] + float(i + 2 * j)


def _grid3_ref(x, w):
    i, j = np.meshgrid(np.arange(2), np.arange(3), indexing="ij")
    return x * x * w + (i + 2 * j)[:, :, None]


@ad.kernel
def f32(x: ad.array(dtype=ad.float32), out: ad.array(dtype=ad.float32)):
    i = ad.tid()
    v = x[i]
    out[i] = math.sin(v) * v + v * v


@ad.kernel
def scatter(idx: ad.array(dtype=ad.int32), x: ad.array(dtype=float),
            out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    out[idx[i]] += v * v
    ad.atomic_add(out, idx[i], math.sin(v))
    ad.atomic_sub(out, idx[i], 0.5 * v)


def _scatter_ref(idx, x):
    out = np.zeros(3)
    np.add.at(out, idx, x * x + np.sin(x) - 0.5 * x)
    return out


@ad.kernel
def gather(idx: ad.array(dtype=ad.int64), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[idx[i]] * x[idx[i]] + x[i]


@ad.kernel
def acc(x: ad.array(dtype=float), s: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(s, 0, x[i] * x[i])
    ad.atomic_sub(s, 0, math.exp(x[i]))


# --------------------------------------------------------------------------- the cases

@dataclasses.dataclass
class Case:
    """How to run one kernel of the corpus: ``runs`` are sets of its inputs (the output,
    its last parameter, is zeros of ``out_shape`` and ``out_dtype``); ``ref(*inputs)`` is
    its forward in plain Python, or None."""
    kernel: object
    dim: object
    runs: list
    out_shape: object
    ref: object = None
    out_dtype: object = np.float64

    @property
    def name(self):
        return self.kernel.name


def _x(*values):
    return np.array(values)


_IDX = np.array([2, 0, 2, 1, 2, 0])
_SIX = _x(0.3, -0.8, 1.1, 0.5, -1.4, 2.0)
_RNG = np.random.default_rng(2)
_X3 = _RNG.uniform(-1, 1, (2, 3, 2))
_W3 = _RNG.uniform(-1, 1, 2)

CASES = [
    Case(branches, 8, [[_x(-2.0, -1.3, -0.7, -0.2, 0.3, 0.8, 1.5, 2.5)]], 8, _branches_ref),
    Case(partial, 4, [[_x(-1.5, -0.3, 0.4, 1.7)]], 4,
         lambda x: np.where(x > 0, 2 * x * x, -x) + x),
    Case(aliasing, 3, [[_x(-1.0, 2.0, 3.0)]], 3, lambda a: np.where(a > 0, a * a, a ** 3)),
    # negative steps and zero-trip loops: one compiled kernel, many (start, stop, step)
    Case(ranged, 4, [[a, b, s, _x(0.3, 0.9, 1.4, -0.6)] for a, b, s in
                     [(0, 4, 1), (1, 8, 3), (5, -2, -2), (3, 0, -1), (2, 2, 1), (4, 1, 1),
                      (0, 3, -1)]], 4, _ranged_ref),
    Case(dynamic_loop_mult, 3, [[5, _x(0.7, -1.2, 1.1)]], 3, lambda n, x: x ** n),
    Case(loop_branch, 3, [[7, _x(1.5, 0.4, 1.9)]], 3),
    Case(whiles, 4, [[3, _x(0.3, 0.8, -0.45, 1.3)], [0, _x(0.2, 0.7, 1.1, -0.3)]], 4,
         _whiles_ref),
    Case(brk, 4, [[9, _x(0.5, 1.1, 1.6, 2.3)]], 4, _brk_ref),
    Case(nested, 3, [[5, _x(0.4, -0.7, 0.95)]], 3, _nested_ref),
    Case(carried, 3, [[6, _x(0.6, -0.9, 1.2)]], 3, _carried_ref),
    Case(fib, 2, [[7, _x(0.5, 2.0)]], 2),
    Case(consts, 3, [[_x(0.1, -1.0, 2.0)]], 3, _consts_ref),
    Case(exprs, 6, [[_x(-0.8, 0.2, 0.45, 0.7, 1.3, 2.1)]], 6, _exprs_ref),
    Case(pick, 5, [[np.array([1, 0, 1, 0, 0], dtype=np.int32), _x(0.5, -1.0, 2.0, 1.5, 3.0)]],
         5, lambda c, x: np.where(c > 0, x, x[::-1]) ** 2),
    # the grid is larger than x: threads 4..6 must never read it
    Case(guarded, 7, [[4, _x(0.5, -2.0, 1.5, -0.3)]], 7,
         lambda n, x: _x(0.25, 1.0, 2.25, 0.0, 3.0, 3.0, 3.0)),
    Case(use_funcs, 4, [[4, _x(0.45, 1.1, -0.7, 2.2), _x(0.8, -0.3, 1.1, 0.6)]], 4,
         _funcs_ref),
    Case(alias_in_func, 3, [[_x(-1.0, 2.0, 3.0)]], 3,
         lambda a: np.where(a > 0, a * a, a ** 3)),
    Case(grid2, (3, 4), [[np.random.default_rng(1).uniform(-1, 1, (3, 4))]], (3, 4),
         lambda x: x * np.roll(x, -1, axis=1) + np.sin(x) * 3.0),
    Case(grid3, (2, 3, 2), [[_X3, _W3]], (2, 3, 2), _grid3_ref),
    # scatter through an int32 index array, gather through an int64 one; indices collide
    Case(scatter, 6, [[_IDX.astype(np.int32), _SIX]], 3, _scatter_ref),
    Case(gather, 6, [[_IDX.astype(np.int64), _SIX]], 6, lambda idx, x: x[idx] ** 2 + x),
    Case(acc, 4, [[_x(0.2, -0.5, 1.0, 0.7)]], 1,
         lambda x: np.array([np.sum(x * x - np.exp(x))])),
]

BY_NAME = {c.name: c for c in CASES}
