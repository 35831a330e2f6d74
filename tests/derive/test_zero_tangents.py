"""Symbolic zero tangents: a JVP launch given no tangent for a float array the kernel only
reads holds that array constant (api.Kernel.with_zero_tangents; runtime/launch.py).

Its terms are dropped from the JVP rather than computed as zero: the same tangents on
finite inputs (checked against the JVP given explicit zeros, against float64 central
differences and against the derivative written by hand), and a finite tangent where an
``inf``/``nan`` partial of the constant array would have turned ``0 * inf`` into
``nan``. An array the kernel writes keeps its tangent (its initial contents' tangent is
then zero, as given). Vector mode holds the same arrays constant, so its rows stay
bit for bit the separate launches' (tests/derivatives/test_vector_mode.py).
"""
import contextlib

import numpy as np
import pytest

import adjoint as ad
from adjoint import passes
from adjoint.build.inputs import module_key
from adjoint.vector_mode import jvp_launch
from tests.gpu_tolerance import assert_same

SOURCE = """
@ad.kernel
def ratio(x: ad.array(dtype=ad.float64), c: ad.array(dtype=ad.float64),
          y: ad.array(dtype=ad.float64)):
    i = ad.tid()
    y[i] = (1.0 + c[i]) / (2.0 + ad.cos(x[i]))


@ad.kernel
def scaled(x: ad.array(dtype=ad.float64), w: ad.array(dtype=ad.float64),
           y: ad.array(dtype=ad.float64)):
    i = ad.tid()
    s = 0.0
    for j in range(3):
        s += w[j] * x[i]
    y[i] = x[i] * ad.sqrt(w[i]) + ad.sin(s)


@ad.kernel
def grow(x: ad.array(dtype=ad.float64), y: ad.array(dtype=ad.float64)):
    i = ad.tid()
    y[i] += x[i] * x[i]
"""

N = 5


def _inputs():
    x = np.linspace(0.1, 1.0, N)
    w = np.array([0.0, 1.0, 2.0, 3.0, 4.0])      # sqrt's partial at w[0] = 0 is inf
    return x, w


def _scaled_reference(x, w):
    """d y / d x along a tangent of ones, by hand: sqrt(w) + cos(s) * sum(w[:3])."""
    s = x * w[:3].sum()
    return np.sqrt(w) + np.cos(s) * w[:3].sum()


def _forward(kernel, x, w):
    y = ad.zeros(N, dtype=ad.float64)
    ad.launch(kernel, N, [ad.array(x), ad.array(w)], [y], record_tape=False)
    return y.numpy()


@pytest.mark.levels_skip("w[0] = 0 is the one input where pass zero_tangents documents "
                         "another value (nan with it off: test_the_pass_off_computes_zeros)")
def test_untangented_array_is_held_constant(kernel_module, backend):
    m = kernel_module(SOURCE)
    x, w = _inputs()
    t = np.ones(N)
    y = ad.zeros(N, dtype=ad.float64)
    got = ad.launch(m.scaled, N, [ad.array(x), ad.array(w)], [y],
                    tangents={"x": ad.array(t)}, record_tape=False)["y"].numpy()
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, _scaled_reference(x, w), rtol=1e-12, atol=1e-12)
    eps = 1e-6
    fd = (_forward(m.scaled, x + eps * t, w) - _forward(m.scaled, x - eps * t, w)) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-7)
    # given explicitly, a zero tangent is a number: 0 * inf is nan where w = 0
    y = ad.zeros(N, dtype=ad.float64)
    zeros = ad.launch(m.scaled, N, [ad.array(x), ad.array(w)], [y], record_tape=False,
                      tangents={"x": ad.array(t), "w": ad.zeros(N, dtype=ad.float64)})["y"]
    assert np.isnan(zeros.numpy()[0])
    np.testing.assert_array_equal(zeros.numpy()[1:], got[1:])


def test_the_same_tangents_as_explicit_zeros_on_finite_inputs(kernel_module, backend):
    """Here bit for bit (no rule of this kernel has a one-operand form that rounds
    otherwise: test_a_quotient_of_a_constant_rounds_within_an_ulp)."""
    m = kernel_module(SOURCE)
    rng = np.random.default_rng(3)
    x, w = rng.uniform(0.5, 1.5, N), rng.uniform(0.5, 1.5, N)
    t = rng.uniform(-1.0, 1.0, N)
    outs = []
    for extra in ({}, {"w": ad.zeros(N, dtype=ad.float64)}):
        y = ad.zeros(N, dtype=ad.float64)
        outs.append(ad.launch(m.scaled, N, [ad.array(x), ad.array(w)], [y], record_tape=False,
                              tangents={"x": ad.array(t), **extra}))
    # (on a real GPU to rounding: NVVM fuses a * b + c where the rest of a kernel lets it)
    assert_same(outs[0]["y"].numpy(), outs[1]["y"].numpy())
    np.testing.assert_array_equal(outs[0]["w"].numpy(), np.zeros(N))   # (returned, zeros)


def test_only_arrays_the_kernel_only_reads(kernel_module, backend):
    m = kernel_module(SOURCE)
    assert m.grow.with_zero_tangents(frozenset({"y"})) is m.grow    # y is written
    variant = m.scaled.with_zero_tangents(frozenset({"w", "y"}))
    assert variant is not m.scaled and variant.zero_tangents == frozenset({"w"})
    assert m.scaled.with_zero_tangents(frozenset({"w"})) is variant    # made once
    rng = np.random.default_rng(4)
    x, y0, t = rng.uniform(0.5, 1.5, N), rng.uniform(0.5, 1.5, N), rng.uniform(-1, 1, N)
    y = ad.array(y0)
    got = ad.launch(m.grow, N, [ad.array(x)], [y], tangents={"x": ad.array(t)},
                    record_tape=False)["y"].numpy()
    np.testing.assert_allclose(got, 2.0 * x * t, rtol=1e-14)     # y's tangent starts at 0


def test_a_quotient_of_a_constant_rounds_within_an_ulp(kernel_module, backend):
    """The fuzzer's seed 1103232: ``n / d`` with ``n`` held constant has the tangent
    ``-(dot_d / d) * q``; given ``dot_n = 0`` the JVP computes ``(dot_n - dot_d * q) / d``,
    which rounds otherwise (here in 29 of 64 elements). Both are the derivative (float64
    central differences, and by hand) and agree to an ulp."""
    m = kernel_module(SOURCE)
    rng = np.random.default_rng(7)
    x, c, t = rng.uniform(-2, 2, 64), rng.uniform(-3, 3, 64), rng.uniform(-1, 1, 64)
    outs = []
    for extra in ({}, {"c": ad.zeros(64, dtype=ad.float64)}):
        y = ad.zeros(64, dtype=ad.float64)
        outs.append(ad.launch(m.ratio, 64, [ad.array(x), ad.array(c)], [y], record_tape=False,
                              tangents={"x": ad.array(t), **extra})["y"].numpy())
    assert not np.array_equal(outs[0], outs[1])     # (the shape the fuzzer found)
    np.testing.assert_allclose(outs[0], outs[1], rtol=5e-16, atol=1e-300)
    by_hand = (1.0 + c) * np.sin(x) / (2.0 + np.cos(x)) ** 2 * t
    np.testing.assert_allclose(outs[0], by_hand, rtol=1e-14)

    def f(v):
        y = ad.zeros(64, dtype=ad.float64)
        ad.launch(m.ratio, 64, [ad.array(v), ad.array(c)], [y], record_tape=False)
        return y.numpy()
    eps = 1e-6
    np.testing.assert_allclose(outs[0], (f(x + eps * t) - f(x - eps * t)) / (2 * eps),
                               rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("off", ["setting", "kernel"])
def test_the_pass_off_computes_zeros(kernel_module, backend, off):
    """With pass zero_tangents off (ADJOINT_OPTIMIZE's setting, or the kernel's
    optimize=...), no variant is made: the left-out tangent is computed as zeros, so
    sqrt's infinite partial at w[0] = 0 gives nan, as explicit zeros do."""
    off_here = "@ad.kernel(optimize='-zero_tangents')\ndef scaled"
    source = SOURCE if off == "setting" else SOURCE.replace("@ad.kernel\ndef scaled", off_here)
    m = kernel_module(source)
    x, w = _inputs()
    t = np.ones(N)
    with passes.optimizing("-zero_tangents") if off == "setting" else contextlib.nullcontext():
        assert m.scaled.with_zero_tangents(frozenset({"w"})) is m.scaled
        y = ad.zeros(N, dtype=ad.float64)
        got = ad.launch(m.scaled, N, [ad.array(x), ad.array(w)], [y],
                        tangents={"x": ad.array(t)}, record_tape=False)["y"].numpy()
    assert np.isnan(got[0])
    np.testing.assert_allclose(got[1:], _scaled_reference(x, w)[1:], rtol=1e-12)
    if off == "kernel":     # (the pass on again: a variant, and a finite tangent)
        assert kernel_module(SOURCE).scaled.with_zero_tangents(frozenset({"w"})).zero_tangents


def test_the_variant_drops_the_terms_and_has_a_key_of_its_own(kernel_module):
    m = kernel_module(SOURCE)
    variant = m.scaled.with_zero_tangents(frozenset({"w"}))
    read = {n.value.id for s in variant.transformed.tangent.body for n in _walk(s)
            if n.__class__.__name__ == "Subscript" and hasattr(n.value, "id")}
    assert "dot_w" not in read and "dot_x" in read
    full = {n.value.id for s in m.scaled.transformed.tangent.body for n in _walk(s)
            if n.__class__.__name__ == "Subscript" and hasattr(n.value, "id")}
    assert "dot_w" in full
    # same forward and backward; only the JVP differs, and so does the module's key
    assert variant.transformed.rev.backward is not None
    keys = [module_key([k], [], k, "numba") for k in (m.scaled, variant)]
    assert None not in keys and keys[0] != keys[1]


def test_vector_mode_holds_the_same_arrays_constant(kernel_module, backend):
    m = kernel_module(SOURCE)
    x, w = _inputs()
    w = w + 0.5         # (finite partials: compared with the pass off too, tests/levels.py)
    T = np.stack([np.ones(N), np.arange(N, dtype=np.float64)])
    y = ad.zeros(N, dtype=ad.float64)
    rows = jvp_launch(m.scaled, N, [ad.array(x), ad.array(w)], [y], tangents={"x": ad.array(T)})["y"]
    for j in range(2):
        y = ad.zeros(N, dtype=ad.float64)
        one = ad.launch(m.scaled, N, [ad.array(x), ad.array(w)], [y], record_tape=False,
                        tangents={"x": ad.array(T[j])})["y"]
        assert np.array_equal(rows.numpy()[j], one.numpy())


def _walk(node):
    import gast
    return gast.walk(node)


def test_the_variant_resumes_from_the_kernels_transform(kernel_module):
    """The passes before zero_tangents read no zero tangents, nor do the optimizations after
    it but reciprocal and scale: a variant shares their work with its kernel
    (pipeline.transform's ``resume``; reciprocal and scale rewrite its tangent alone) and
    prints what a transform of its own from the source prints, the same passes applied."""
    m = kernel_module(SOURCE)
    variant = m.scaled.with_zero_tangents(frozenset({"w"}))
    assert variant.transformed.ssa is m.scaled.transformed.ssa
    # (it carries the kernel's Resume on: a variant of it shares the same work)
    assert variant.transformed.resume is m.scaled.transformed.resume
    # the optimization passes that read no tangent are the kernel's, shared (_shared)
    for field in ("rev", "saved", "once", "gather", "zeroed", "eager"):
        assert getattr(variant.transformed, field) is getattr(m.scaled.transformed, field)
    assert variant.transformed.tangent is not m.scaled.transformed.tangent
    alone = ad.Kernel(m.scaled.pyfunc, zero_tangents=frozenset({"w"}))
    assert getattr(alone, "_base", None) is None
    assert alone.transformed.ssa is not m.scaled.transformed.ssa
    for stage in ("forward", "backward", "jvp"):
        assert ad.source(variant, stage) == ad.source(alone, stage), stage
    assert variant.transformed.applied == alone.transformed.applied


def test_the_variant_has_its_jvp_alone_and_a_tape_keeps_the_kernels_backward(kernel_module,
                                                                             backend):
    """A variant's module holds its JVP alone (its launches run nothing else); a JVP launch
    recorded on a tape records the kernel's own spec, so the tape's backward is the
    kernel's: the same gradients as a tape of plain forward launches."""
    m = kernel_module(SOURCE)
    x, w = _inputs()
    w = w + 0.5
    device = "cuda" if backend == "cuda" else "cpu"
    spec = m.scaled.with_zero_tangents(frozenset({"w"})).spec_for(device)
    assert spec.jvp is not None and spec.forward is None and spec.backward is None
    grads = []
    for tangents in (None, {"x": ad.array(np.ones(N))}):
        xa, wa = ad.array(x, requires_grad=True), ad.array(w, requires_grad=True)
        y = ad.zeros(N, dtype=ad.float64, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(m.scaled, N, [xa, wa], [y], tangents=tangents)
        tape.backward(grads={y: ad.array(np.arange(1.0, N + 1))})
        grads.append((xa.grad.numpy().copy(), wa.grad.numpy().copy(), y.numpy().copy()))
    for plain, jvp in zip(*grads):
        assert np.array_equal(plain, jvp)
    assert np.abs(grads[0][0]).sum() > 0 and np.abs(grads[0][1]).sum() > 0
