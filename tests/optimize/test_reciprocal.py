"""Pass reciprocal (adjoint/optimize/reciprocal.py): divisions by a root through its inverse.

In n-body's backward the primal quotient ``q = m / s`` is replayed for the adjoint of
``/`` (``adj_s -= adj_q / s * q``), and the adjoints divide by ``s`` too; with the
quotient sharing the inverse, the backward a tape runs divides once a pair. Here:

- the divisions left in each generated function (counted in its source), and the
  gradients of that kernel against float64 central differences through both backwards
  (the tape's ``backward_saved``, an adjoint launch's replaying ``backward``) on every
  backend, and the JVP's and forward's values bitwise the same; gradients checked the
  same way for a loop whose reverse reads stacks, a func's adjoint, and quotients that a
  comparison or a call reads (these keep their division);
- on small bodies given to ``sharing`` itself: what may change and what may not (a
  quotient read by a comparison, a call, a primal statement, a loop's next iteration,
  a later block; a divisor or an operand assigned again) and that its input is left as
  it was.
"""
import ast
import re
import textwrap

import gast
import numpy as np
import pytest
from tests.conftest import central_fd

import adjoint as ad
from adjoint.frontend.parse import Callee
from adjoint.runtime import verify
from adjoint.optimize import reciprocal
from adjoint.derive.ir import AtomicMinMax, For, LoopInfo, MinOp

NBODY = '''
@ad.kernel
def energy(n: int, eps2: float, mass: ad.array(dtype=float),
           pos: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float)):
    i = ad.tid()
    xi = pos[i, 0]
    yi = pos[i, 1]
    zi = pos[i, 2]
    e = 0.0
    for j in range(n):
        dx = pos[j, 0] - xi
        dy = pos[j, 1] - yi
        dz = pos[j, 2] - zi
        e += mass[j] / ad.sqrt(dx * dx + dy * dy + dz * dz + eps2)
    out[i] = -mass[i] * e


@ad.func
def pot(m: float, r2: float) -> float:
    q = m / ad.sqrt(r2)
    return q * q + q


@ad.kernel
def chained(n: int, m: ad.array(dtype=float), x: ad.array(dtype=float),
            out: ad.array(dtype=float)):
    i = ad.tid()
    e = x[i]
    k = 0
    while k < n:
        e = e * 0.5 + m[k] / ad.sqrt(e * e + 1.0)
        k += 1
    out[i] = pot(m[i], e * e + 0.5)


@ad.kernel
def compared(m: ad.array(dtype=float), x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    q = m[i] / ad.sqrt(x[i])
    if q > 1.0:
        out[i] = q * q
    else:
        out[i] = q


@ad.kernel
def called(m: ad.array(dtype=float), x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    q = m[i] / ad.sqrt(x[i])
    out[i] = ad.sin(q)
'''
N = 5
EPS2 = 0.01


def _function(src, fname):
    """The text of the function ``fname`` of ``src``, comments left out."""
    start = src.index(f"def {fname}(")
    end = src.find("\ndef ", start + 1)
    lines = src[start:end if end >= 0 else None].splitlines()
    return "\n".join(line for line in lines if not line.strip().startswith("#"))


def _divisions(src, fname):
    """Divisions in the function ``fname`` of ``src`` (``rt.div`` calls, ``/`` operators),
    comments left out."""
    code = _function(src, fname)
    return code.count("rt.div(") + len(re.findall(r" / ", code))


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(NBODY)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_nbody_divides_once_a_pair_in_the_saved_backward(kernels, target):
    """The tape's backward: the inverse ``1 / s``, and the quotient and the adjoints of
    ``/`` and ``sqrt`` multiplying by it (main: ``m / s`` and ``1 / s``). The replaying
    backward keeps its first replay's ``m / s`` (it feeds ``e``), the reversed loop's
    shares the inverse. The JVP (its primal ``m / s`` feeds ``e``) and the forward keep
    theirs."""
    def count(stage, fname):
        return _divisions(ad.source(kernels.energy, stage, target), fname)
    assert count("backward_saved", "energy_backward_saved_thread") == 1
    assert count("backward", "energy_backward_thread") == 2
    assert count("jvp", "energy_jvp_thread") == 2
    assert count("forward", "energy_forward_thread") == 1
    saved = ad.source(kernels.energy, "backward_saved", target)
    assert re.search(r"\n( +)(\w+)_inv = rt\.div\(1\.0, \2\)\n\1t\d+ = t\d+ \* \2_inv\n",
                     saved), saved


def _nbody_inputs(seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 1.5, N), rng.standard_normal((N, 3))


def _energy(kernels, mass, pos):
    out = ad.zeros(N)
    ad.launch(kernels.energy, N, inputs=[N, EPS2, ad.array(mass), ad.array(pos)],
              outputs=[out], record_tape=False)
    return out.numpy().copy()


@pytest.fixture
def parts(monkeypatch):
    """The parts (``backward``, ``backward_saved``, ...) run, in order."""
    ran = []
    real = verify.run

    def spy(spec, part, *args, **kwargs):
        ran.append(part)
        return real(spec, part, *args, **kwargs)
    monkeypatch.setattr(verify, "run", spy)
    return ran


def test_nbody_gradients_through_both_backwards(backend, kernels, parts):
    """Float64 gradients of ``sum(w * out)`` against central differences: from a tape
    (the saved backward) and from an adjoint launch (the replaying one)."""
    mass0, pos0 = _nbody_inputs()
    w = np.random.default_rng(1).uniform(0.5, 1.5, N)
    f_mass = central_fd(lambda m: float(w @ _energy(kernels, m, pos0)), mass0)
    f_pos = central_fd(lambda p: float(w @ _energy(kernels, mass0, p)), pos0)

    mass, pos = ad.array(mass0, requires_grad=True), ad.array(pos0, requires_grad=True)
    out = ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.energy, N, inputs=[N, EPS2, mass, pos], outputs=[out])
    tape.backward(grads={out: w})
    assert parts[-1].startswith("backward_saved"), parts
    np.testing.assert_allclose(mass.grad.numpy(), f_mass, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(pos.grad.numpy(), f_pos, rtol=1e-6, atol=1e-7)

    g_mass, g_pos = ad.zeros(N), ad.zeros((N, 3))
    ad.launch(kernels.energy, N, inputs=[N, EPS2, ad.array(mass0), ad.array(pos0)],
              outputs=[ad.zeros(N)], adjoint=True, adj_inputs=[None, None, g_mass, g_pos],
              adj_outputs=[ad.array(w)])
    assert parts[-1] in ("backward", "backward_clean"), parts
    np.testing.assert_allclose(g_mass.numpy(), f_mass, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g_pos.numpy(), f_pos, rtol=1e-6, atol=1e-7)


def test_the_forward_and_the_jvp_keep_their_values(backend, kernels):
    """The primal statements of the forward and the JVP are those the pass never
    touches: the JVP's outputs are the forward's bit for bit, and its primal
    quotient is still the forward's division."""
    mass, pos = _nbody_inputs(2)
    plain = _energy(kernels, mass, pos)
    out = ad.zeros(N)
    rng = np.random.default_rng(3)
    ad.launch(kernels.energy, N, inputs=[N, EPS2, ad.array(mass), ad.array(pos)],
              outputs=[out], tangents={"mass": ad.array(rng.uniform(-1, 1, N)),
                                       "pos": ad.array(rng.uniform(-1, 1, (N, 3)))})
    np.testing.assert_array_equal(out.numpy(), plain)
    forward = _function(ad.source(kernels.energy, "forward"), "energy_forward_thread")
    jvp = _function(ad.source(kernels.energy, "jvp"), "energy_jvp_thread")
    (quotient,) = re.findall(r"t\d+ = rt\.div\(t\d+, t\d+\)", forward)
    assert quotient in jvp and "_inv" not in forward


def test_a_loop_with_stacks_and_a_func(backend, kernels):
    """A ``while`` loop whose reverse reads stacks (its replay's quotient feeds ``e``
    and keeps its division; the reversed loop's multiplies), and a func's adjoint
    (its replayed ``q`` only adjoints read). Gradients against central differences,
    through a tape and an adjoint launch."""
    src = ad.source(kernels.chained, "backward")
    assert _divisions(src, "chained_backward_thread") == 2, src
    assert re.search(r"\bq = m \* \w+_inv\n", ad.source(kernels.pot, "backward"))
    rng = np.random.default_rng(5)
    m0, x0 = rng.uniform(0.5, 1.5, N), rng.uniform(-1.0, 1.0, N)
    w = rng.uniform(0.5, 1.5, N)

    def f(m, x):
        out = ad.zeros(N)
        ad.launch(kernels.chained, N, inputs=[3, ad.array(m), ad.array(x)], outputs=[out],
                  record_tape=False)
        return float(w @ out.numpy())
    f_m = central_fd(lambda v: f(v, x0), m0)
    f_x = central_fd(lambda v: f(m0, v), x0)
    m, x = ad.array(m0, requires_grad=True), ad.array(x0, requires_grad=True)
    out = ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernels.chained, N, inputs=[3, m, x], outputs=[out])
    tape.backward(grads={out: w})
    np.testing.assert_allclose(m.grad.numpy(), f_m, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), f_x, rtol=1e-6, atol=1e-7)
    g_m, g_x = ad.zeros(N), ad.zeros(N)
    ad.launch(kernels.chained, N, inputs=[3, ad.array(m0), ad.array(x0)],
              outputs=[ad.zeros(N)], adjoint=True, adj_inputs=[None, g_m, g_x],
              adj_outputs=[ad.array(w)])
    np.testing.assert_allclose(g_m.numpy(), f_m, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g_x.numpy(), f_x, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["compared", "called"])
def test_a_quotient_a_comparison_or_a_call_reads_keeps_its_division(backend, kernels, name):
    """``q`` tested by an ``if`` or passed to ``sin``: its rounding would reach a branch
    or a value other than an adjoint's, so the backward keeps ``q = m / s`` (the
    adjoints of ``/`` and ``sqrt`` still share the inverse). Gradients against central
    differences."""
    kernel = getattr(kernels, name)
    src = ad.source(kernel, "backward")
    assert "_inv" in src and re.search(r"\bq = rt\.div\(", src), src
    rng = np.random.default_rng(4)
    m0, x0 = rng.uniform(0.5, 1.5, N), rng.uniform(0.3, 2.0, N)
    w = rng.uniform(0.5, 1.5, N)

    def f(m, x):
        out = ad.zeros(N)
        ad.launch(kernel, N, inputs=[ad.array(m), ad.array(x)], outputs=[out],
                  record_tape=False)
        return float(w @ out.numpy())
    m, x = ad.array(m0, requires_grad=True), ad.array(x0, requires_grad=True)
    out = ad.zeros(N, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, N, inputs=[m, x], outputs=[out])
    tape.backward(grads={out: w})
    np.testing.assert_allclose(m.grad.numpy(), central_fd(lambda v: f(v, x0), m0),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), central_fd(lambda v: f(m0, v), x0),
                               rtol=1e-6, atol=1e-7)


# -- sharing itself, on small bodies ---------------------------------------------------
def _body(src):
    """Statements of ``src``, each ``rt.sqrt(...)`` an op call as pass parse makes it."""
    body = gast.parse(textwrap.dedent(src)).body
    for n in gast.walk(gast.Module(body=body, type_ignores=[])):
        if isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) and \
                n.func.attr == "sqrt":
            n.callee = Callee("op", "sqrt")
    return body


def _text(body):
    return ast.unparse(gast.gast_to_ast(gast.Module(body=body, type_ignores=[])))


def _share(src, primal=True):
    body = _body(src)
    derived = {n.id for n in gast.walk(gast.Module(body=body, type_ignores=[]))
               if isinstance(n, gast.Name) and n.id.startswith("adj_")}
    out, kinds = reciprocal.sharing(body, derived, {}, primal=primal)
    return _text(out), kinds


PAIR = """
s = rt.sqrt(x)
q = m / s
adj_m += adj_q / s
adj_s -= adj_q / s * q
"""


def test_a_quotient_only_adjoints_read_multiplies_by_the_inverse():
    text, kinds = _share(PAIR)
    assert text == _text(_body("""
        s = rt.sqrt(x)
        s_inv = 1.0 / s
        q = m * s_inv
        adj_m += adj_q * s_inv
        adj_s -= adj_q * s_inv * q
        """))
    assert set(kinds) == {"s_inv"}
    text, _ = _share(PAIR, primal=False)            # (the JVP's way)
    assert "q = m / s" in text and "adj_m += adj_q * s_inv" in text


def test_a_quotient_counts_toward_the_two_divisions():
    """One adjoint dividing by ``s`` and the quotient: two divisions, one inverse. Without
    ``primal`` only one division counts: nothing changes."""
    src = """
        s = rt.sqrt(x)
        q = m / s
        adj_s -= adj_q / s * q
        """
    text, _ = _share(src)
    assert "q = m * s_inv" in text and text.count("/") == 1, text
    text, kinds = _share(src, primal=False)
    assert text == _text(_body(src)) and not kinds


def test_a_quotient_after_an_adjoint_moves_up_beside_the_inverse():
    text, _ = _share("""
        s = rt.sqrt(x)
        adj_x += adj_s / s
        u = x * 2.0
        q = m / s
        adj_m += adj_q * q
        """)
    assert text == _text(_body("""
        s = rt.sqrt(x)
        s_inv = 1.0 / s
        q = m * s_inv
        adj_x += adj_s * s_inv
        u = x * 2.0
        adj_m += adj_q * q
        """))


KEEPS = {
    "an if tests it": PAIR + "if q > 1.0:\n    adj_x += adj_q\n",
    "a comparison in an adjoint": PAIR + "adj_x += adj_q * (q > 0.0)\n",
    "a conditional expression": PAIR + "adj_x += adj_q if q > 0.0 else 0.0\n",
    "a call": PAIR + "adj_x += rt.sin(q) * adj_q\n",
    "an index": PAIR + "adj_a[q] += adj_q\n",
    "a primal statement": PAIR + "r = q * 2.0\n",
    "an adjoint in a nested block": PAIR + "if c:\n    adj_x += adj_q * q\n",
    "an earlier statement of its loop": "for k in range(n):\n    adj_x += adj_b * q\n" +
    textwrap.indent(PAIR, "    "),
    "after its loop": "for k in range(n):\n" + textwrap.indent(PAIR, "    ") +
    "adj_x += adj_b * q\n",
    "the operand assigned between": """
        s = rt.sqrt(x)
        adj_x += adj_s / s
        adj_y += adj_s / s
        m = y * 2.0
        q = m / s
        adj_m += adj_q * q
        """,
    "the quotient read between": """
        s = rt.sqrt(x)
        adj_x += adj_s / s
        adj_y += adj_s / s
        adj_z += adj_s * q
        q = m / s
        adj_m += adj_q * q
        """,
    "the divisor assigned again": """
        s = rt.sqrt(x)
        adj_x += adj_s / s
        adj_y += adj_s / s
        s = y * 2.0
        q = m / s
        adj_m += adj_q * q
        """,
}


@pytest.mark.parametrize("case", sorted(KEEPS))
def test_a_quotient_read_otherwise_keeps_its_division(case):
    text, _ = _share(textwrap.dedent(KEEPS[case]))
    assert "q = m / s" in text, text


def test_an_atomic_min_of_it_keeps_the_division():
    """``adj_a[i] = min(adj_a[i], q)``: which value wins is not a rounding of it."""
    body = _body(PAIR)
    body.append(AtomicMinMax(target=_body("adj_a[i] = 0.0")[0].targets[0], op=MinOp(),
                             value=gast.Name(id="q", ctx=gast.Load(), annotation=None,
                                             type_comment=None)))
    out, _ = reciprocal.sharing(body, {"adj_m", "adj_s", "adj_q", "adj_a"}, {}, primal=True)
    assert "q = m / s" in _text(out[:-1])
    out, _ = reciprocal.sharing(body[:-1], {"adj_m", "adj_s", "adj_q"}, {}, primal=True)
    assert "q = m * s_inv" in _text(out)


def test_a_read_in_a_loops_latch_keeps_the_division():
    """The latch runs after the body, each iteration: textually before the next
    iteration's quotient, later in time."""
    body = _body("for k in range(n):\n" + textwrap.indent(PAIR, "    "))
    loop = body[0]
    body[0] = For(target=loop.target, iter=loop.iter, body=loop.body, orelse=[],
                  type_comment=None, loop=LoopInfo(0, latch=_body("q_1 = q")))
    out, _ = reciprocal.sharing(body, {"adj_m", "adj_s", "adj_q"}, {}, primal=True)
    assert "q = m / s" in _text(out[0].body)
    body[0].loop.latch = []
    out, _ = reciprocal.sharing(body, {"adj_m", "adj_s", "adj_q"}, {}, primal=True)
    assert "q = m * s_inv" in _text(out[0].body)


def test_an_earlier_replay_outside_its_loop_is_no_later_read():
    """The replaying backward: a first loop replays ``q`` for the primal ``e`` (its own
    ``q``, read before the second loop runs); the reversed loop's ``q`` only adjoints
    read. Only the second changes."""
    text, _ = _share("""
        for k in range(n):
            s = rt.sqrt(x)
            q = m / s
            e = e + q
        for k in range(n):
            s = rt.sqrt(x)
            q = m / s
            adj_m += adj_q / s
            adj_s -= adj_q / s * q
        """)
    assert text.count("q = m / s") == 1 and text.count("q = m * s_inv") == 1, text


def test_sharing_leaves_its_input_as_it_was():
    body = _body("""
        s = rt.sqrt(x)
        adj_x += adj_s / s
        u = x * 2.0
        q = m / s
        adj_m += adj_q * q
        for k in range(n):
            s = rt.sqrt(x)
            q = m / s
            adj_m += adj_q / s
            adj_s -= adj_q / s * q
        """)
    before, nodes = gast.dump(gast.Module(body=body, type_ignores=[])), list(body)
    out, _ = reciprocal.sharing(body, {"adj_x", "adj_s", "adj_m", "adj_q"}, {}, primal=True)
    assert gast.dump(gast.Module(body=body, type_ignores=[])) == before
    assert body == nodes and out is not body
    assert "q = m * s_inv" in _text(out) and "q = m / s" in _text(body)
