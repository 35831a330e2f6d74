"""Forward mode of kernels: ``ad.launch(..., tangents=...)`` through control flow.

Each kernel runs its JVP with a random tangent for every float array argument
(an output's tangent is the tangent of its initial contents, read where the
kernel reads the output), and ``jvp_check`` compares

- the outputs with a plain forward launch's (the JVP writes them as it does: bit for
  bit, but on a real GPU to rounding, tests/gpu_tolerance.py);
- the tangent of every float array with the central difference, along the
  same tangents, of that array's contents after a forward launch (float64);
- where asked, forward against reverse mode: ``<w, J t>`` from the JVP equals
  ``<J^T w, t>`` from a recorded launch's backward (the dot-product test).

The JVP tier of the kernel corpus (tests/corpus.py), each case with the dot-product
test; then in/out arrays and atomics, a privatized parallel kernel and colliding
stores, the launch API's refusals, the refusal of a func with ``@ad.func_grad``,
``ad.source``/``adjoint show`` of the JVP, the reserved ``dot_`` names and
byte-identical generated modules.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import LaunchError, TransformError
from tests.gpu_tolerance import assert_same
from tests import corpus
from tests.runtime.test_numba_codegen import _own_ir

EPS = 1e-6
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _is_float_array(a):
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def _launch_forward(kernel, dim, inputs, outputs):
    """Contents of every argument after one forward launch (copies; scalars as given)."""
    args = [ad.array(a) if isinstance(a, np.ndarray) else a for a in inputs + outputs]
    ad.launch(kernel, dim, inputs=args[:len(inputs)], outputs=args[len(inputs):],
              record_tape=False)
    return [a.numpy().copy() if isinstance(a, ad.Array) else a for a in args]


def jvp_check(kernel, dim, inputs, outputs, rtol=1e-6, atol=1e-7, seed=0, reverse=False):
    """Check the JVP of ``kernel`` (see the module docstring); ``outputs`` are the output
    arrays' initial contents. Returns the tangents, one per argument (None: no tangent)."""
    rng = np.random.default_rng(seed)
    given = inputs + outputs
    tangents = [rng.uniform(-1.0, 1.0, a.shape) if _is_float_array(a) else None for a in given]
    args = [ad.array(a) if isinstance(a, np.ndarray) else a for a in given]
    dots = {k: ad.array(t) for k, t in enumerate(tangents) if t is not None}
    got = ad.launch(kernel, dim, inputs=args[:len(inputs)], outputs=args[len(inputs):],
                    tangents={args[k]: d for k, d in dots.items()})
    names = [p.name for p in kernel.spec.params]
    assert set(got) == {names[k] for k in dots}
    for k, d in dots.items():
        assert got[names[k]] is d, f"the tangent of '{names[k]}' given is not the one returned"

    plain = _launch_forward(kernel, dim, inputs, outputs)
    for k, a in enumerate(args):
        if isinstance(a, ad.Array):
            assert_same(a.numpy(), plain[k],
                        err_msg=f"argument {k}: the JVP's values differ from the forward's")

    def shifted(h):
        moved = [a + h * t if t is not None else a for a, t in zip(given, tangents)]
        return _launch_forward(kernel, dim, moved[:len(inputs)], moved[len(inputs):])
    plus, minus = shifted(EPS), shifted(-EPS)
    out = []
    for k, t in enumerate(tangents):
        if t is None:
            out.append(None)
            continue
        fd = (plus[k] - minus[k]) / (2 * EPS)
        dot = dots[k].numpy()
        np.testing.assert_allclose(dot, fd, rtol=rtol, atol=atol,
                                   err_msg=f"tangent of argument {k} against central differences")
        out.append(dot.copy())
    if reverse:
        _dot_product_test(kernel, dim, inputs, outputs, tangents, out, rng)
    return out


def _dot_product_test(kernel, dim, inputs, outputs, tangents, dots, rng):
    """``sum_p <w_p, dot_p>`` over the arrays the kernel writes equals ``sum_q <grad_q, t_q>``
    over every float array, the gradients coming from a recorded launch seeded with ``w``."""
    given = inputs + outputs
    writes = set(kernel.spec.writes)
    names = [p.name for p in kernel.spec.params]
    args = [ad.array(a, requires_grad=True) if _is_float_array(a) else
            ad.array(a) if isinstance(a, np.ndarray) else a for a in given]
    seeds = {args[k]: rng.uniform(0.5, 1.5, a.shape) for k, a in enumerate(given)
             if _is_float_array(a) and names[k] in writes}
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, dim, inputs=args[:len(inputs)], outputs=args[len(inputs):])
    tape.backward(grads=seeds)
    lhs = sum(float(np.sum(w * dots[args.index(a)])) for a, w in seeds.items())
    rhs = sum(float(np.sum(a.grad.numpy() * t)) for a, t in zip(args, tangents) if t is not None)
    assert abs(lhs - rhs) <= 1e-10 * max(1.0, abs(lhs)), f"<w, Jt> = {lhs} != <J^T w, t> = {rhs}"


# --------------------------------------------------------------------------- the corpus

@pytest.mark.parametrize("case", corpus.CASES, ids=lambda c: c.name)
def test_jvp_against_central_differences(backend, case):
    for inputs in case.runs:
        jvp_check(case.kernel, case.dim, inputs, [np.zeros(case.out_shape, case.out_dtype)],
                  atol=1e-6, reverse=True)


def test_jvp_of_zero_trip_ranges_is_zero(backend):
    """The corpus's (start, stop, step) of ``ranged``: a loop that runs carries the
    tangent, an empty range or a step the wrong way carries none."""
    for a, b, s, x in corpus.BY_NAME["ranged"].runs:
        out = ad.zeros(4)
        got = ad.launch(corpus.ranged, 4, inputs=[a, b, s, ad.array(x)], outputs=[out],
                        tangents={"x": ad.ones(4)})
        assert np.all(got["out"].numpy() != 0.0) == (len(range(a, b, s)) > 0)


def test_jvp_loop_branching_on_carried_value(backend):
    """reference case 6, by hand: x = 1.5, n = 4 gives dy/dx = 2 x sum(0.81^k) = 8.992623..."""
    x, out = ad.array([1.5]), ad.zeros(1)
    got = ad.launch(corpus.loop_branch, 1, inputs=[4, x], outputs=[out],
                    tangents={x: ad.array([1.0])})
    assert abs(got["out"].numpy()[0] - 3.0 * sum(0.81 ** k for k in range(4))) < 1e-12


# --------------------------------------------------------------------------- accumulation

ACCUMULATE = '''
@ad.kernel
def accumulate(idx: ad.array(dtype=ad.int32), x: ad.array(dtype=float),
               y: ad.array(dtype=float), t: ad.array(dtype=float), s: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    y[i] = math.sin(v) * v
    t[i] += v * y[i]
    s[idx[i]] += v * v
    ad.atomic_add(s, idx[i], math.sin(v))
    ad.atomic_sub(s, idx[i], 0.5 * v * y[i])
'''


def test_jvp_atomics_and_in_out_arrays(backend, kernel_module):
    """``y`` is written and then read at each thread's index, ``t`` accumulated there (+=);
    ``s`` gathers +=, atomic_add and atomic_sub from colliding threads. The outputs start
    nonzero, with tangents of their own: the JVP carries them through (``y``'s is
    overwritten), and agrees with reverse mode."""
    m = kernel_module(ACCUMULATE)
    idx = np.array([2, 0, 2, 1, 2, 0], dtype=np.int32)
    x = np.array([0.3, -0.8, 1.1, 0.5, -1.4, 2.0])
    y0 = np.array([0.7, -0.2, 1.3, 0.1, -0.9, 0.4])
    t0 = np.array([-0.3, 0.6, 0.2, -1.1, 0.8, 0.05])
    s0 = np.array([0.25, -1.0, 0.5])
    jvp_check(m.accumulate, 6, [idx, x], [y0, t0, s0], reverse=True)


PARALLEL = '''
@ad.kernel
def histogram(idx: ad.array(dtype=ad.int32), x: ad.array(dtype=float),
              h: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    h[idx[i]] += v * v
    ad.atomic_add(h, idx[i], math.sin(v))
    out[i] = math.exp(v) * v
'''


def test_jvp_parallel_privatized_kernel(backend, kernel_module):
    """3000 threads: the numba JVP runs in parallel (threshold 2048), each chunk of threads
    accumulating ``h`` and its tangent into private zeroed copies added at the end."""
    m = kernel_module(PARALLEL)
    src = ad.source(m.histogram, "jvp")
    assert "private" in src and "dot_h" in src.split("def histogram_jvp(")[1], src
    n = 3000
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 7, n).astype(np.int32)
    x = rng.uniform(-1.0, 1.0, n)
    h0 = rng.uniform(-1.0, 1.0, 7)
    jvp_check(m.histogram, n, [idx, x], [h0, np.zeros(n)], rtol=1e-6, atol=1e-6)


COLLIDING = '''
@ad.kernel
def last_wins(idx: ad.array(dtype=ad.int32), x: ad.array(dtype=float),
              out: ad.array(dtype=float)):
    i = ad.tid()
    out[idx[i]] = x[i] * x[i]
'''


def test_jvp_of_colliding_plain_stores(backend, kernel_module):
    """Threads store into one element: on the CPU they run in order and the last value
    (and its tangent) survives; on CUDA which thread wins is unknown, so the JVP is
    refused, naming the kernel."""
    m = kernel_module(COLLIDING)
    idx = np.array([1, 0, 1, 2, 1], dtype=np.int32)
    x = np.array([0.3, -0.8, 1.1, 0.5, -1.4])
    if ad.backend_name() == "cuda":
        with pytest.raises(LaunchError, match=r"kernel 'last_wins' has no CUDA JVP"):
            ad.launch(m.last_wins, 5, inputs=[ad.array(idx), ad.array(x)],
                      outputs=[ad.zeros(3)], tangents={"x": ad.ones(5)})
        return
    dots = jvp_check(m.last_wins, 5, [idx, x], [np.zeros(3)])
    t = np.random.default_rng(0).uniform(-1.0, 1.0, 5)     # jvp_check's tangent of x
    np.testing.assert_allclose(dots[-1], 2 * x[[1, 4, 3]] * t[[1, 4, 3]], rtol=1e-14)


# --------------------------------------------------------------------------- refusals

SIMPLE = '''
@ad.kernel
def simple(n: int, idx: ad.array(dtype=ad.int32), x: ad.array(dtype=float),
           out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] * x[i] * float(n + idx[i])
'''


def test_launch_refuses_bad_tangents(backend, kernel_module):
    m = kernel_module(SIMPLE)
    idx = ad.array(np.zeros(3, dtype=np.int32))
    x, out = ad.array([1.0, 2.0, 3.0]), ad.zeros(3)

    def launch(tangents, **kw):
        return ad.launch(m.simple, 3, inputs=[2, idx, x], outputs=[out], tangents=tangents, **kw)
    refusals = [
        ({"nope": ad.zeros(3)}, r"kernel 'simple'.*'nope'.*not one of its parameters"),
        ({ad.zeros(3): ad.zeros(3)}, r"kernel 'simple'.*not one of its parameters"),
        ({"n": ad.zeros(3)}, r"kernel 'simple', parameter 'n' is not a float array"),
        ({idx: ad.zeros(3)}, r"kernel 'simple', parameter 'idx' is not a float array"),
        ({"x": ad.zeros(4)}, r"kernel 'simple', tangent of parameter 'x' must be .*shape \(3,\)"),
        ({x: ad.zeros(3, dtype=ad.float32)},
         r"kernel 'simple', tangent of parameter 'x' must be .*dtype float64"),
        ({"out": 1.0}, r"kernel 'simple', tangent of parameter 'out' must be an array"),
        ({x: x}, r"kernel 'simple'.*the tangent of 'x' shares memory"),
        ({x: out}, r"kernel 'simple'.*the tangent of 'x' shares memory"),
        ({out: out}, r"kernel 'simple'.*the tangent of 'out' shares memory"),
        ([x], r"kernel 'simple': tangents must be a dict"),
    ]
    shared = ad.zeros(3)
    refusals.append(({x: shared, out: shared}, r"kernel 'simple'.*tangent of 'x' shares memory"))
    if ad.backend_name() == "cuda":
        refusals.append(({x: np.zeros(3)},
                         r"kernel 'simple', tangent of parameter 'x'.*launch's device"))
    for tangents, message in refusals:
        with pytest.raises(LaunchError, match=message):
            launch(tangents)
            pytest.fail(f"no LaunchError for tangents={tangents}")
    with pytest.raises(LaunchError, match=r"kernel 'simple'.*adjoint=True.*tangents=.*not both"):
        launch({x: ad.zeros(3)}, adjoint=True)
    np.testing.assert_array_equal(out.numpy(), 0.0)          # nothing ran
    got = launch({x: ad.ones(3)})                             # and the kernel is fine
    np.testing.assert_array_equal(got["out"].numpy(), 2.0 * x.numpy() * 2.0)
    assert set(got) == {"x", "out"}



def test_launch_refuses_tangents_that_are_views_of_launch_arrays(backend, kernel_module):
    """Distinct host arrays that own their memory skip the pairwise memory checks (every
    JVP launch makes them); a view of another array's memory still gets them: refused
    where it overlaps an array of the launch, accepted where it does not."""
    if ad.backend_name() == "cuda":
        pytest.skip("numpy views: host arrays only")
    m = kernel_module(SIMPLE)
    idx = ad.array(np.zeros(3, dtype=np.int32))
    x, out = ad.array([1.0, 2.0, 3.0]), ad.zeros(3)

    def launch(tangents):
        return ad.launch(m.simple, 3, inputs=[2, idx, x], outputs=[out], tangents=tangents)
    for tangents in ({x: x.numpy()[::1]}, {x: out.numpy()[:]}, {out: x.numpy()[::-1]}):
        with pytest.raises(LaunchError, match=r"kernel 'simple'.*shares memory"):
            launch(tangents)
            pytest.fail(f"no LaunchError for a view: {tangents}")
    both = np.zeros(6)                      # two disjoint halves of one buffer
    both[:3] = 1.0
    got = launch({x: both[:3], out: both[3:]})
    np.testing.assert_allclose(got["out"], 2.0 * x.numpy() * 2.0)
    np.testing.assert_allclose(both[3:], 2.0 * x.numpy() * 2.0)


PLANS = '''
@ad.kernel
def rowwise(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] * x[i]


@ad.kernel
def total(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(out, 0, x[i] * x[i])


@ad.kernel
def smear(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i] * x[i]
    out[i] += v
    if i > 0:
        out[i - 1] += 0.5 * v
'''


@pytest.mark.parametrize("kernel, mode, row", [
    ("rowwise", "threads run in parallel", "tid0"),
    ("total", "sums into a local", "first + k"),      # (blocks of threads: emit/grid.py)
    ("smear", "even blocks run in parallel", "tid0")])
def test_the_jvp_grid_runs_the_forward_plan_with_a_signed_row(kernel_module, kernel, mode, row):
    """The JVP's grid function runs the forward's plan (its tangent arrays privatized with
    their arrays) and hands the thread its row through ``rt.signed``, as the forward's
    does: numba then knows the row is not negative (no wraparound, no scatter stores)."""
    k = getattr(kernel_module(PLANS), kernel)
    for part in ("forward", "jvp"):
        src = ad.source(k, part)
        grid = src[src.index(f"def {kernel}_{part}("):]
        assert mode in " ".join(grid.split()), grid
        assert f"{kernel}_{part}_thread(rt.signed({row}), " in " ".join(grid.split()).replace(
            "( ", "(").replace(" )", ")"), grid
    if kernel == "smear":
        assert "'out', 'dot_out' may" in ad.source(k, "jvp")
    if kernel == "total":       # the tangent's sum kept in a local beside the value's
        assert "out[0], dot_out[0] may" in ad.source(k, "jvp")
    x = np.linspace(0.5, 1.5, 6)
    jvp_check(k, 6, [x], [np.zeros(6)], reverse=True)

QUOTIENTS = '''
@ad.kernel
def quotient(x: ad.array(dtype=float), y: ad.array(dtype=float), v: ad.array(dtype=ad.vec3),
             out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = x[i] / y[i] + ad.length(v[i])
'''


def test_the_jvp_of_a_quotient_and_a_length_divides_once_each(backend, kernel_module,
                                                              monkeypatch, tmp_path):
    """The tangent of ``x / y`` is ``(dot_x - dot_y * z) / y`` and that of a vec3 length
    ``(dot_x * x + dot_y * y + dot_z * z) / |v|``: one division each, where each
    operand's term divided on its own before (n-body's JVP divided 4 times a pair, not 3:
    2.5x its forward, one thread). The tangents match central differences on every
    backend; on numba the JVP's IR divides 3 times a thread (the quotient and the two
    tangents; the length is a sqrt), not 6."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))    # compiled here: IR to inspect
    m = kernel_module(QUOTIENTS)
    rng = np.random.default_rng(1)
    n = 5
    x, y = rng.uniform(-2, 2, n), rng.uniform(0.5, 2, n)
    v = rng.uniform(-2, 2, (n, 3))
    jvp_check(m.quotient, n, [x, y, v], [np.zeros(n)], reverse=True)
    src = ad.source(m.quotient, "jvp")
    assert src.count("rt.div(") == 3, src      # x / y and one per tangent
    if backend == "numba":
        (gen,) = m.quotient.modules.values()
        ir = _own_ir(gen.quotient_jvp_small)
        # LLVM may unroll the thread loop: per copy of the thread (one sqrt: |v|)
        # three divisions: x / y, the quotient's tangent, the length's tangent
        copies = len(re.findall(r"call double @llvm\.sqrt\.f64", ir))
        divisions = len(re.findall(r"= fdiv double", ir))
        assert copies >= 1 and divisions == 3 * copies, (divisions, copies)



ROOTS = """
@ad.kernel
def potential(n: int, m: ad.array(dtype=float), p: ad.array(dtype=float),
              out: ad.array(dtype=float)):
    i = ad.tid()
    e = 0.0
    for j in range(n):
        d = p[j] - p[i]
        e += m[j] / ad.sqrt(d * d + 0.25)
    out[i] = e


@ad.kernel
def not_a_root(x: ad.array(dtype=float), y: ad.array(dtype=float),
               out: ad.array(dtype=float)):
    i = ad.tid()
    s = ad.exp(y[i])
    out[i] = x[i] / s


@ad.func
def over_root(m: float, x: float) -> float:
    return m / ad.sqrt(x)
"""


def test_the_jvp_divides_by_a_root_through_its_inverse(backend, kernel_module,
                                                       monkeypatch, tmp_path):
    """Pass reciprocal: in ``m / sqrt(r2)`` the tangents of the root (``dot * 0.5 / s``)
    and of the quotient (``(dot_m - dot_s * q) / s``) both divide by ``s``; they
    multiply by one inverse instead (n-body's JVP: a root and three divisions a pair
    before, a root and two after). The primal ``m / s`` keeps its division (the JVP's
    values are the forward's, bit for bit: jvp_check). A divisor that may be
    subnormal (``exp``) keeps its divisions. Tangents against central differences and
    the dot-product test with reverse mode, on every backend."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))    # compiled here: IR to inspect
    m = kernel_module(ROOTS)
    rng = np.random.default_rng(2)
    n = 6
    mass, p = rng.uniform(0.5, 1.5, n), rng.uniform(-2, 2, n)
    jvp_check(m.potential, n, [n, mass, p], [np.zeros(n)], reverse=True)
    src = ad.source(m.potential, "jvp")
    src = src[src.index("def potential_jvp_thread("):].split("\ndef ")[0]  # (not its pair's)
    assert src.count("rt.div(") == 2 and "_inv" in src, src     # m / s, and 1 / s
    x, y = rng.uniform(-2, 2, n), rng.uniform(-1, 1, n)
    jvp_check(m.not_a_root, n, [x, y], [np.zeros(n)], reverse=True)
    assert "_inv" not in ad.source(m.not_a_root, "jvp")
    if backend == "numba":
        (gen,) = m.potential.modules.values()
        ir = _own_ir(gen.potential_jvp_small)
        copies = len(re.findall(r"call double @llvm\.sqrt\.f64", ir))
        divisions = len(re.findall(r"= fdiv double", ir))
        assert copies >= 1 and divisions == 2 * copies, (divisions, copies)


@pytest.mark.parametrize("x", [0.0, np.inf, 1e-300, 4e-324])
def test_a_shared_inverse_of_a_root_keeps_the_quotients_values(backend, kernel_module, x):
    """Where the root is 0 or inf (``X / 0`` and ``X * inf``, ``X / inf`` and ``X * 0``
    agree) and where it is tiny (the root of a subnormal is a normal number: its
    inverse does not overflow), the tangent of ``m / sqrt(x)`` with the inverse is
    that of the quotient rule divided out in float64 numpy, to rounding."""
    m = kernel_module(ROOTS)
    mass, dm, dx = 1.5, 0.5, -2.0
    with np.errstate(all="ignore"):
        s = np.sqrt(np.float64(x))
        q = mass / s
        ds = dx * 0.5 / s
        expected = (dm - ds * q) / s
    value, tangent = ad.jvp(m.over_root, (mass, x), (dm, dx))
    assert value == q or (np.isnan(value) and np.isnan(q))
    if np.isfinite(expected):
        assert tangent == pytest.approx(expected, rel=1e-15)
    else:
        assert np.isnan(expected) and np.isnan(tangent) or tangent == expected


CUSTOM_GRAD = '''
@ad.func
def cube(x: float) -> float:
    return x * x * x


@ad.func_grad(cube)
def cube_grad(x: float, adj_ret: float):
    return 3.0 * x * x * adj_ret


@ad.func
def outer(x: float) -> float:
    return cube(x) + x


@ad.kernel
def direct(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = cube(x[i])


@ad.kernel
def nested(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = outer(x[i])
'''


def test_jvp_refused_through_a_custom_gradient(backend, kernel_module):
    """Forward mode would differentiate ``cube`` itself and could disagree with its
    hand-written adjoint: the JVP is refused, naming the func, also through another func;
    the forward and backward still run."""
    m = kernel_module(CUSTOM_GRAD)
    for k in (m.direct, m.nested):
        x, out = ad.array([0.5, 2.0]), ad.zeros(2)
        with pytest.raises(LaunchError, match=rf"kernel '{k.spec.name}'.*no JVP.*func 'cube'.*"
                                              r"custom gradient \(@ad\.func_grad\)"):
            ad.launch(k, 2, inputs=[x], outputs=[out], tangents={x: ad.ones(2)})
        with pytest.raises(ValueError, match=r"no JVP.*'cube'.*custom gradient"):
            ad.source(k, "jvp")
        ad.launch(k, 2, inputs=[x], outputs=[out])
        np.testing.assert_allclose(out.numpy(), x.numpy() ** 3 + (k is m.nested) * x.numpy())


def test_dot_names_are_reserved(kernel_module):
    m = kernel_module('''
        @ad.kernel
        def k(x: ad.array(dtype=float), out: ad.array(dtype=float)):
            i = ad.tid()
            dot_x = x[i] * 2.0
            out[i] = dot_x
        ''')
    with pytest.raises(TransformError, match=r"dot_x") as err:
        ad.launch(m.k, 2, inputs=[ad.zeros(2)], outputs=[ad.zeros(2)])
    assert err.value.filename == m.__file__
    assert err.value.lineno == 9                    # the kernel_module header is 4 lines
    assert err.value.source_line.strip() == "dot_x = x[i] * 2.0"
    assert f"{m.__file__}:9:" in str(err.value)


# --------------------------------------------------------------------------- showing the JVP

SHOWN = '''
@ad.func
def sq(x: float) -> float:
    return x * x


@ad.kernel
def shown(x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    v = x[i]
    out[i] = sq(math.sin(v))
'''


def test_source_and_show_print_the_jvp(kernel_module):
    m = kernel_module(SHOWN)
    text = ad.source(m.shown, "jvp")
    assert "def shown_jvp_thread(tid0, x, out, dot_x, dot_out):" in text
    assert "def shown_jvp(dim0, x, out, dot_x, dot_out):" in text
    assert "dot_v = dot_x[i]" in text and "rt.cos(v)" in text
    assert "sq_jvp(" in text and "dot_out[i] = " in text
    assert f"# {os.path.basename(m.__file__)}:14: v = x[i]" in text
    func = ad.source(m.sq, "jvp")
    assert func.startswith("def sq_jvp(x, dot_x):") and "return (" in func
    assert "cuda.grid" in ad.source(m.shown, "jvp", target="cuda")

    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = [sys.executable, "-m", "adjoint", "show", f"{m.__file__}:shown", "--stage", "jvp",
           "--optimized"]
    shown = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    first, rest = shown.stdout.split("\n", 1)      # (the line saying which code it is)
    assert first.startswith("# shown jvp: the code that runs") and rest.strip() == text.strip()
    diff = subprocess.run(run + ["--diff"], env=env, capture_output=True, text=True, timeout=300)
    assert diff.returncode == 0, diff.stderr
    assert "+    dot_v = dot_x[i]" in diff.stdout


def test_generated_module_is_byte_identical_and_holds_the_jvp(tmp_path):
    """Two generations, in two processes with different hash seeds, give the same text."""
    src = tmp_path / "kernels.py"
    text = open(corpus.__file__).read()         # the corpus's funcs and a loop kernel
    funcs = text[text.index("@ad.func\ndef sq("):text.index("def _funcs_ref(")]
    loops = text[text.index("@ad.kernel\ndef brk("):text.index("def _brk_ref(")]
    src.write_text("import math\nimport adjoint as ad\n\n" + funcs + loops + ACCUMULATE)
    texts = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed,
                   PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for target in ("cpu", "cuda"):
            p = subprocess.run([sys.executable, "-m", "adjoint", "generate", str(src),
                                "--target", target], env=env, capture_output=True, text=True,
                               timeout=300, cwd=tmp_path)
            assert p.returncode == 0, p.stderr
            texts.append(p.stdout)
    assert texts[0] == texts[2] and texts[1] == texts[3]
    for text in texts[:2]:
        for fn in ("use_funcs_jvp", "brk_jvp", "accumulate_jvp", "polar_jvp", "sq_jvp"):
            assert f"def {fn}(" in text
    assert ad.generate(str(src)) == texts[0]
