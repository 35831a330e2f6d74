"""What numba and LLVM make of the runtime helpers generated code calls (numba only: the
other backends compile nothing)."""
import re

import numba
import numpy as np

import adjoint as ad
from adjoint.runtime import backend_numba, config


@numba.njit
def _element(i, a):
    return a[backend_numba.signed(i)]


def test_a_thread_index_is_known_not_negative():
    """``rt.signed`` turns prange's unsigned index into an int64 that LLVM knows is not
    negative, so numba's wraparound of a negative index (a compare and a select per
    access) folds away. With it in place, the heat stencil's ``out[i, j]`` store, made in
    both branches of its ``if``, keeps one address and vectorizes as a plain store; with
    the wraparound left in, LLVM made it a scatter and the forward ran 3x slower."""
    a = np.arange(10.0)
    assert _element(np.uint64(3), a) == 3.0
    assert _element(np.int64(9), a) == 9.0
    ir = "".join(_element.inspect_llvm().values())
    wraps = re.findall(r"icmp (?:slt|sgt|sle|sge) i64 %[\w.]+, (?:0|-1)\b", ir)
    assert wraps == [], wraps


SPRINGS = '''
@ad.kernel
def spring(a: ad.array(dtype=ad.int32), b: ad.array(dtype=ad.int32),
           pos: ad.array(dtype=float), energy: ad.array(dtype=float)):
    s = ad.tid()
    d = pos[a[s]] - pos[b[s]]
    ad.atomic_add(energy, 0, d * d)
'''


def _own_ir(dispatcher):
    """The LLVM IR of ``dispatcher``'s own function (its first definition)."""
    ir = "".join(dispatcher.inspect_llvm().values())
    body = ir[ir.index("define"):]
    return body[:body.index("\n}\n")]


def _springs_module(m, eager=False):
    """Run the springs kernel ``m.spring`` forward and backward on numba (compiled in this
    test: the IR is there to inspect), check its energy and gradient against numpy, and
    return its generated module. ``eager``: the tape runs ``forward_vjp`` (runtime/eager.py)
    and nothing replays; else the forward, and the backward replaying it."""
    n = 9
    a = np.arange(n, dtype=np.int32)
    b = (a + 1) % n
    x0 = np.linspace(0.0, 2.0, n) ** 2
    was = config.eager_vjp
    config.eager_vjp = eager
    try:
        with ad.backend_scope("numba"):
            pos = ad.array(x0, requires_grad=True)
            energy = ad.zeros(1, requires_grad=True)
            with ad.Tape() as tape:
                ad.launch(m.spring, n, inputs=[ad.array(a), ad.array(b), pos],
                          outputs=[energy])
            tape.backward(grads={energy: np.array([1.0])})
    finally:
        config.eager_vjp = was
    assert (tape.steps[0].eager is not None) == eager
    d = x0 - x0[b]
    np.testing.assert_allclose(energy.numpy(), [np.sum(d * d)], rtol=1e-12)
    want = np.zeros(n)
    np.add.at(want, a, 2 * d)
    np.add.at(want, b, -2 * d)
    np.testing.assert_array_equal(pos.grad.numpy(), want)
    (gen,) = m.spring.modules.values()
    return gen


def test_the_serial_loop_of_a_small_launch_takes_no_reference_counts(kernel_module,
                                                                     monkeypatch, tmp_path):
    """numba's plain pipeline left an atomic increment and decrement of three arrays'
    reference counts at every thread of the serial loop, where a bounds check returns
    early (2x the loop's time); ``rt.jit_small`` compiles it without them."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))    # compiled here: IR to inspect
    m = kernel_module(SPRINGS)
    gen = _springs_module(m)
    _springs_module(m, eager=True)
    for fn in (gen.spring_forward_small, gen.spring_backward_small,
               gen.spring_forward_vjp_small):
        assert "@NRT_incref(" not in _own_ir(fn)


def test_an_adjoint_local_starts_at_minus_zero_so_its_first_sum_folds(kernel_module,
                                                                      monkeypatch, tmp_path):
    """An adjoint local starts at -0.0, the additive identity (``-0.0 + x`` is ``x`` for
    every ``x``, -0.0 included), so LLVM folds its first ``+=`` into a move. Started at
    +0.0 it may not (``0.0 + -0.0`` is ``+0.0``): the springs backward kept three
    ``fadd %x, 0.0`` per thread, about 10% of its time. Gradients are unchanged (checked
    exactly): a gradient array starts at +0.0, and ``+0.0 + -0.0`` is ``+0.0``."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))    # compiled here: IR to inspect
    gen = _springs_module(kernel_module(SPRINGS))
    adds = [ln.strip() for ln in _own_ir(gen.spring_backward_small).splitlines()
            if re.search(r"= fadd \w+ .*\b0\.000000e\+00\b", ln)]
    assert adds == [], adds


QUOTIENTS = '''
@ad.kernel
def quotient(x: ad.array(dtype=float), y: ad.array(dtype=float), v: ad.array(dtype=ad.vec3),
             loss: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(loss, 0, x[i] / y[i] + ad.length(v[i]))
'''


def test_a_quotient_and_a_length_divide_the_adjoint_once(kernel_module, monkeypatch, tmp_path):
    """The rules of ``x / y`` and ``ad.length`` spell their partials with one shared
    ``g / y`` (``g / z``), which LLVM computes once: the backward of ``x / y`` with both
    operands active divides twice (the quotient, replayed, and ``g / y``), not three
    times; a vec3 length's backward once, not three times. A division costs several
    multiplications (n-body: 4 divisions a pair before, 3 after, 6% of its time)."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))    # compiled here: IR to inspect
    m = kernel_module(QUOTIENTS)
    rng = np.random.default_rng(0)
    n = 5
    x0, y0 = rng.uniform(-2, 2, n), rng.uniform(0.5, 2, n)
    v0 = rng.uniform(-2, 2, (n, 3))
    with ad.backend_scope("numba"):
        x, y = ad.array(x0, requires_grad=True), ad.array(y0, requires_grad=True)
        v = ad.array(v0, dtype=ad.vec3, requires_grad=True)
        loss = ad.zeros(1, requires_grad=True)
        monkeypatch.setattr(config, "eager_vjp", False)     # (the backward this test reads)
        with ad.Tape() as tape:
            ad.launch(m.quotient, n, inputs=[x, y, v], outputs=[loss])
        tape.backward(grads={loss: np.array([1.0])})
        (gen,) = m.quotient.modules.values()
        # (the gradients were fresh: the tape ran the backward storing into them, pass once)
        ir = _own_ir(gen.quotient_backward_clean_small)
        # LLVM unrolls the thread loop: per copy of the thread (one sqrt: |v|, replayed)
        # three divisions: x / y (replayed), g / y, g / |v|
        copies = len(re.findall(r"call double @llvm\.sqrt\.f64", ir))
        divisions = len(re.findall(r"= fdiv double", ir))
        assert copies >= 1 and divisions == 3 * copies, (divisions, copies)
    np.testing.assert_allclose(x.grad.numpy(), 1 / y0, rtol=1e-15)
    np.testing.assert_allclose(y.grad.numpy(), -x0 / y0 ** 2, rtol=1e-15)
    np.testing.assert_allclose(v.grad.numpy(), v0 / np.linalg.norm(v0, axis=1)[:, None],
                               rtol=1e-15)
