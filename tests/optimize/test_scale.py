"""Pass scale (adjoint/optimize/scale.py): powers of two the rules cancel are left out.

Of JVPs:

- On small JVP bodies given to ``folded`` itself: a length's tangent keeps no doubling
  and no halving; what stays scaled and what is multiplied back (a store, a call, a read
  in a nested block or a loop's next iteration, a name assigned twice, two scales
  added); no scale below 1; the input is left as it was. Each folded body is run beside
  the rules' own on random float32 and float64 values: bit for bit the same.
- A float32 value whose rules' form overflows (``a + a``) is finite folded.
- Kernels: a spring's and n-body's JVP print no ``0.5``, and match central differences
  on every backend.

Of backwards (``folded_backward``): an adjoint added into from zero twice by the same
term is added once, at twice the scale; a root's ``0.5`` meets it; not where the
adjoint may not be zero (no reset, a loop's earlier iteration), nor where the term's
operands change between; scales are multiplied back at the end of a block, before a
nested one, and at a read that is no scaled adjoint. Each folded body is run beside
the rules' own: bit for bit the same. The kernels' backwards print no ``0.5`` and
their gradients match central differences.
"""
import ast
import re
import textwrap

import gast
import numpy as np
import pytest

import adjoint as ad
from tests.conftest import central_fd
from adjoint.optimize import scale
from adjoint.derive.ir import copy_tree

DERIVED = {"dot_x", "dot_y", "dot_z", "dot_a", "dot_b", "dot_c", "dot_s", "dot_q", "dot_e",
           "dot_out", "dot_t"}

LENGTH = """
dot_a = dot_x * x + dot_x * x
dot_b = dot_y * y + dot_y * y
dot_c = dot_a + dot_b
dot_z = dot_z0 * z + dot_z0 * z
dot_q = dot_c + dot_z
dot_s = dot_q * 0.5 / s
dot_out[0] = dot_s
"""


def _body(src):
    return gast.parse(textwrap.dedent(src)).body


def _text(body):
    return ast.unparse(gast.gast_to_ast(gast.Module(body=body, type_ignores=[])))


def _fold(src, derived=DERIVED | {"dot_z0"}):
    return _text(scale.folded(_body(src), derived))


ADJ = {"adj_a", "adj_b", "adj_c", "adj_d", "adj_e", "adj_x", "adj_out", "adj_acc"}


def _fold_back(src):
    return _text(scale.folded_backward(_body(textwrap.dedent(src)), ADJ))


def _run(src, values, dtype, out="dot_out"):
    """Run the statements ``src`` on numpy scalars of ``dtype`` (the ints ``n`` and ``k``
    as they are): what they stored into the array ``out``."""
    env = {k: (v if k in ("n", "k") else dtype(v)) for k, v in values.items()}
    env[out] = np.zeros(4, dtype)
    with np.errstate(all="ignore"):
        exec(compile(src, "<body>", "exec"), {"np": np}, env)
    return env[out]


def _bitwise(src, fold, names, out, rounds=200):
    """``fold(src)``, having checked that it stores into ``out`` bit for bit what ``src``
    does, on random float32 and float64 values of ``names`` (``s`` positive)."""
    src = textwrap.dedent(src)
    folded = fold(src)
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64):
        for _ in range(rounds):
            values = {n: rng.standard_normal() * 10.0 ** rng.integers(-3, 4) for n in names}
            values.update(s=abs(values.get("s", 1.0)) + 0.1, n=3, k=0)
            want, got = _run(src, values, dtype, out), _run(folded, values, dtype, out)
            assert np.array_equal(want.view(np.uint8), got.view(np.uint8)), (values, dtype)
    return folded


def _same_values(src, names):
    return _bitwise(src, _fold, names, "dot_out")


def _same_backward(src, names):
    return _bitwise(src, _fold_back, names, "adj_out")


def test_a_length_keeps_no_doubling_and_no_halving():
    text = _same_values(LENGTH, ["x", "y", "z", "dot_x", "dot_y", "dot_z0", "s"])
    assert "dot_a = dot_x * x\n" in text + "\n", text
    assert "dot_s = dot_q / s" in text, text
    assert "0.5" not in text and "2.0" not in text, text


@pytest.mark.parametrize("read, where", [
    ("dot_out[1] = dot_a", "dot_out[1] = dot_a * 2.0"),            # a store
    ("dot_e = f(dot_a)", "dot_e = f(dot_a * 2.0)"),                  # a call
    ("dot_e = dot_a * dot_a", "dot_e = dot_a * 2.0 * (dot_a * 2.0)"),  # not linear
    ("dot_e = dot_a + 1.0", "dot_e = dot_a * 2.0 + 1.0"),            # not linear
])
def test_a_read_that_is_no_scaled_tangent_multiplies_back(read, where):
    text = _fold(f"dot_a = dot_x * x + dot_x * x\n{read}\n")
    assert "dot_a = dot_x * x\n" in text, text
    assert where in text, text


def test_a_tangent_that_is_not_deferred_stores_its_value():
    """A read in a nested block, a read before it in its loop (the next iteration), a
    second assignment, or no read at all: the doubling is a multiplication there."""
    for src in ["dot_a = dot_x * x + dot_x * x\nif c:\n    dot_out[0] = dot_a\n",
                "for k in range(n):\n    dot_e = dot_a * 0.5\n"
                "    dot_a = dot_x * x + dot_x * x\n",
                "dot_a = dot_x * x + dot_x * x\ndot_e = dot_a * 0.5\n"
                "dot_a = dot_y * y + dot_y * y\ndot_out[0] = dot_a\n",
                "dot_a = dot_x * x + dot_x * x\n"]:
        text = _fold(src)
        assert "dot_a = dot_x * x * 2.0" in text, (src, text)
        assert "dot_e = dot_a * 0.5" in text or "dot_e" not in src, (src, text)


def test_no_scale_below_one():
    """``dot_x * 0.5`` stays: a scale below 1 would store a value twice the rules'."""
    src = "dot_a = dot_x * 0.5\ndot_b = dot_a * y\ndot_out[0] = dot_b\n"
    assert _fold(src) == src.strip()
    text = _same_values("dot_a = dot_x * x + dot_x * x\ndot_b = dot_a * 0.25\n"
                        "dot_out[0] = dot_b\n", ["x", "dot_x"])
    assert "dot_b = dot_a * 0.5\ndot_out[0] = dot_b\n" in text + "\n", text


def test_two_scales_added_meet_at_the_smaller():
    src = """
    dot_a = dot_x * x + dot_x * x
    dot_b = dot_a + dot_a
    dot_c = dot_b - dot_a
    dot_e = -dot_c / 2.0
    dot_out[0] = dot_e
    dot_out[1] = dot_c
    """
    text = _same_values(src, ["x", "dot_x"])
    assert "dot_c = dot_b * 2.0 - dot_a" in text, text
    assert "dot_e = -dot_c\n" in text + "\n", text
    assert "dot_out[1] = dot_c * 2.0" in text, text


def test_primal_statements_and_the_input_stay():
    body = _body(LENGTH + "t = x * x + x * x\nu = t * 0.5\n")
    before = _text(body)
    out = scale.folded(body, DERIVED | {"dot_z0"})
    assert _text(body) == before
    assert "t = x * x + x * x\nu = t * 0.5" in _text(out)
    assert _text(scale.folded(copy_tree(body), DERIVED | {"dot_z0"})) == _text(out)


def test_a_float32_tangent_that_overflows_doubled_is_finite():
    src = "dot_a = dot_x * x + dot_x * x\ndot_s = dot_a * 0.5\ndot_out[0] = dot_s\n"
    values = {"x": 2.0e19, "dot_x": 1.0e19}        # dot_x * x = 2e38 < 3.4e38 < 4e38
    assert np.isinf(_run(src, values, np.float32)[0])
    got = _run(_fold(src), values, np.float32)[0]
    assert got == np.float32(2.0e38)


SPRING = '''
@ad.kernel
def spring(a: ad.array(dtype=ad.int32), b: ad.array(dtype=ad.int32),
           rest: ad.array(dtype=float), pos: ad.array(dtype=float, ndim=2),
           energy: ad.array(dtype=float)):
    s = ad.tid()
    i = a[s]
    j = b[s]
    dx = pos[i, 0] - pos[j, 0]
    dy = pos[i, 1] - pos[j, 1]
    dz = pos[i, 2] - pos[j, 2]
    d = ad.sqrt(dx * dx + dy * dy + dz * dz) - rest[s]
    ad.atomic_add(energy, 0, 0.75 * d * d)


@ad.kernel
def energy(n: int, eps2: float, mass: ad.array(dtype=float),
           pos: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float)):
    i = ad.tid()
    e = 0.0
    for j in range(n):
        dx = pos[j, 0] - pos[i, 0]
        dy = pos[j, 1] - pos[i, 1]
        dz = pos[j, 2] - pos[i, 2]
        e += mass[j] / ad.sqrt(dx * dx + dy * dy + dz * dz + eps2)
    out[i] = -mass[i] * e
'''


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(SPRING)


def _outputs(kernel, inputs, n_out, tangents=None):
    out = ad.zeros(n_out)
    dots = ad.launch(kernel, 6, inputs=inputs, outputs=[out], tangents=tangents)
    return out.numpy().copy(), dots


def test_the_kernels_jvps_print_no_halving_and_match_differences(backend, kernels):
    """A spring's and n-body's JVP: no ``0.5`` left of the root's rule, the values of the
    forward, and tangents against central differences along the tangent."""
    for k in (kernels.spring, kernels.energy):
        for stage in ("jvp", "backward"):
            text = ad.source(k, stage=stage)
            assert "0.5" not in text.split("def ", 2)[1], text
    rng = np.random.default_rng(3)
    pos, dpos = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    a, b = np.array([0, 1, 2, 3, 4, 0], np.int32), np.array([1, 2, 3, 4, 5, 5], np.int32)
    rest, drest = rng.uniform(0.5, 1.5, 6), rng.standard_normal(6)
    mass, dmass = rng.uniform(0.5, 1.5, 6), rng.standard_normal(6)
    cases = [(kernels.spring, 1, lambda p, r, m: [ad.array(a), ad.array(b), ad.array(r),
                                                  ad.array(p)], "energy"),
             (kernels.energy, 6, lambda p, r, m: [6, 0.01, ad.array(m), ad.array(p)], "out")]
    h = 1e-6
    for kernel, n_out, args, out in cases:
        tangents = {"pos": ad.array(dpos)}
        tangents.update({"rest": ad.array(drest)} if kernel is kernels.spring else
                        {"mass": ad.array(dmass)})
        value, dots = _outputs(kernel, args(pos, rest, mass), n_out, tangents)
        np.testing.assert_array_equal(value, _outputs(kernel, args(pos, rest, mass), n_out)[0])
        plus = _outputs(kernel, args(pos + h * dpos, rest + h * drest, mass + h * dmass), n_out)[0]
        minus = _outputs(kernel, args(pos - h * dpos, rest - h * drest, mass - h * dmass),
                         n_out)[0]
        np.testing.assert_allclose(dots[out].numpy(), (plus - minus) / (2 * h), rtol=1e-6,
                                   atol=1e-8)
        # the backward (the tape's): the gradient of w . out, against central differences
        w = rng.standard_normal(n_out)
        arrays = args(pos, rest, mass)
        grads = [a for a in arrays if isinstance(a, ad.Array) and a.dtype == np.float64]
        assert len(grads) == 2, grads          # (pos and rest, pos and mass)
        for a in grads:
            a.requires_grad = True
        result = ad.zeros(n_out, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(kernel, 6, inputs=arrays, outputs=[result])
        tape.backward(grads={result: w})
        for a in grads:
            base = a.numpy().copy()

            def f(v, a=a, base=base):
                given = [ad.array(v) if x is a else
                         (ad.array(x.numpy()) if isinstance(x, ad.Array) else x) for x in arrays]
                return float(w @ _outputs(kernel, given, n_out)[0])
            np.testing.assert_allclose(a.grad.numpy(), central_fd(f, base), rtol=1e-6,
                                       atol=1e-8)


ROOT_CHAIN = """
adj_b = -0.0
adj_c = -0.0
adj_d = -0.0
adj_acc = -0.0
for j in range(n):
    adj_a = g * x
    adj_b += adj_a * 0.5 * inv
    adj_c += adj_b
    adj_b = -0.0
    adj_d += adj_c * x
    adj_d += adj_c * x
    adj_c = -0.0
    adj_acc -= adj_d
    adj_out[1] += adj_d
    adj_d = -0.0
adj_out[0] += adj_acc
"""


def test_a_roots_half_meets_the_doubled_add():
    text = _same_backward(ROOT_CHAIN, ["g", "x", "inv"])
    assert "adj_b += adj_a * inv" in text, text
    assert text.count("adj_d += adj_c * x") == 1, text
    assert "0.5" not in text and "2.0" not in text, text


def test_the_same_add_twice_from_zero_is_one():
    src = "adj_d = -0.0\nadj_d -= a * x\nadj_d -= a * x\nadj_out[0] += adj_d\n"
    text = _same_backward(src, ["a", "x"])
    assert text.count("adj_d -= a * x") == 1 and "adj_out[0] += adj_d * 2.0" in text, text


@pytest.mark.parametrize("src, adds", [
    ("adj_d += a * x\nadj_d += a * x\nadj_out[0] += adj_d\n", 2),              # not zero
    ("adj_d = -0.0\nadj_d += a * x\nx = x * 3.0\nadj_d += a * x\nadj_out[0] += adj_d\n", 2),
    ("adj_d = -0.0\nadj_d += a * x\nadj_d += a * y\nadj_out[0] += adj_d\n", 2),
    ("adj_d = -0.0\nfor j in range(n):\n    adj_d += a * x\n    adj_d += a * x\n"
     "adj_out[0] += adj_d\n", 2),                                    # an earlier iteration
    ("adj_d = -0.0\nadj_d += a * x\nadj_d += a * x\nadj_d += a * x\nadj_out[0] += adj_d\n",
     2),                                                        # the third is no doubling
])
def test_adds_that_are_not_a_doubling_stay(src, adds):
    text = _same_backward(src, ["a", "x", "y", "adj_d"])
    assert len(re.findall(r"adj_d \+= a \* [xy]|adj_d = adj_d \* 2\.0 \+ a", text)) == adds, text


def test_scales_are_multiplied_back_before_a_nested_block_and_at_its_end():
    src = """
    adj_b = -0.0
    adj_d = -0.0
    adj_b += adj_a * 0.5 * x
    if x > 0.0:
        adj_d += adj_b * y
        adj_d += adj_b * y
        adj_out[2] += adj_d
        adj_e = adj_d * 0.5
    else:
        adj_d += adj_b
    adj_out[0] += adj_d
    adj_out[1] += adj_b
    """
    text = _same_backward(src, ["adj_a", "x", "y"])
    assert "adj_b += adj_a * x\nadj_b = adj_b * 0.5\nif x > 0.0:" in text, text
    assert "adj_out[2] += adj_d * 2.0\n    adj_e = adj_d\n    adj_d = adj_d * 2.0\nelse:" \
        in text, text


def test_no_adjoint_scale_below_one_half():
    src = "adj_b = -0.0\nadj_b += adj_a * 0.25\nadj_out[0] += adj_b\n"
    assert _same_backward(src, ["adj_a"]) == src.strip()


def test_the_backwards_input_stays():
    body = _body(textwrap.dedent(ROOT_CHAIN))
    before = _text(body)
    out = scale.folded_backward(body, ADJ)
    assert _text(body) == before and _text(out) != before


def test_a_loop_that_may_skip_its_resets_knows_no_zero():
    """A ``continue`` (or ``break``) before the reset: the next iteration's first add is
    not into zero, so the two adds stay."""
    for leave in ("continue", "break"):
        src = f"""
        adj_d = -0.0
        for j in range(n):
            adj_d += adj_a * y
            adj_d += adj_a * y
            adj_out[0] += adj_d
            if x > 0.0:
                {leave}
            adj_d = -0.0
        adj_out[1] += adj_d
        """
        text = _same_backward(src, ["adj_a", "x", "y"])
        assert text.count("adj_d += adj_a * y") == 2, text


def test_an_update_that_reads_its_scaled_target_multiplies_it_back_first():
    src = "adj_d = -0.0\nadj_d += adj_a * y\nadj_d += adj_a * y\nadj_d *= x\nadj_out[0] += adj_d\n"
    text = _same_backward(src, ["adj_a", "x", "y"])
    assert "adj_d = adj_d * 2.0\nadj_d *= x\nadj_out[0] += adj_d\n" in text + "\n", text


# -------------------------------------------------------- stores into one element (issue 37)

@pytest.mark.parametrize("between", [
    "adj_out[1] = 0.0",                          # the clear of a store's adjoint
    "adj_out[1] += a",                           # an add into it
    "rt.atomic_add(adj_out, 1, a)",              # a call given the array
])
def test_a_write_into_the_array_an_add_reads_ends_the_doubling(between):
    """``adj_v += adj_out[1]`` twice is no doubling when the element is written between
    (a kernel storing one value into one element twice: the second store's clear)."""
    src = f"adj_d = -0.0\nadj_d += adj_out[1]\n{between}\nadj_d += adj_out[1]\nadj_out[0] += adj_d\n"
    text = _fold_back(src)
    assert text.count("adj_d += adj_out[1]") == 2 and "2.0" not in text, text

    class rt:                                    # what the call does in the runtime
        @staticmethod
        def atomic_add(arr, i, v):
            arr[i] += v
    for body in (src, text):
        env = {"a": 5.0, "rt": rt, "adj_out": np.array([0.0, 1.0, 0.0, 0.0])}
        exec(compile(body, "<body>", "exec"), {}, env)
        want = {"adj_out[1] = 0.0": 1.0, "adj_out[1] += a": 7.0}.get(between, 7.0)
        assert env["adj_out"][0] == want, (body, env["adj_out"])


STORED_TWICE = """
@ad.kernel
def twice(a: ad.array(dtype=float), o: ad.array(dtype=float)):
    i = ad.tid()
    v = a[i] * 3.0
    o[i] = v
    o[i] = v

@ad.kernel
def twice_between(a: ad.array(dtype=float), o: ad.array(dtype=float)):
    i = ad.tid()
    v = a[i] * 3.0
    o[i] = v
    w = v * v
    o[i] = v

@ad.kernel
def thrice_other_between(a: ad.array(dtype=float), o: ad.array(dtype=float),
                         p: ad.array(dtype=float)):
    i = ad.tid()
    v = a[i] * 3.0
    o[i] = v
    p[i] = v * 2.0
    o[i] = v
    o[i] = v
"""


@pytest.mark.parametrize("name, outs, slope", [
    ("twice", 1, 3.0), ("twice_between", 1, 3.0), ("thrice_other_between", 2, 9.0)])
def test_a_value_stored_into_one_element_twice_has_its_gradient_once(backend, kernel_module,
                                                                     name, outs, slope):
    """The loss sum(o) (+ sum(p)) of ``o[i] = 3 a[i]`` stored two or three times (p[i] =
    6 a[i]): d/da is 3 (9), once, not doubled by pass scale (issue 37, found by a fuzzer
    from outside); central differences agree."""
    kern = getattr(kernel_module(STORED_TWICE), name)
    x0 = np.array([0.5, -1.25, 2.0])

    def loss(x, grad=False):
        a = ad.array(x, requires_grad=True)
        arrays = [ad.zeros(3, requires_grad=True) for _ in range(outs)]
        with ad.Tape() as tape:
            ad.launch(kern, 3, inputs=[a], outputs=arrays)
        if grad:
            tape.backward(grads={arr: np.ones(3) for arr in arrays})
            return a.grad.numpy()
        return sum(float(arr.numpy().sum()) for arr in arrays)

    g = loss(x0, grad=True)
    np.testing.assert_array_equal(g, np.full(3, slope))
    np.testing.assert_allclose(g, central_fd(loss, x0), rtol=1e-7)


def test_a_scale_nothing_reads_afterwards_is_not_multiplied_back():
    """Before a ``return`` only what it returns is multiplied back (``adj_t`` at half its
    value is read by nothing after: ``adj_t = adj_t * 0.5`` would be dead code)."""
    src = ("adj_t = -0.0\nadj_x = -0.0\nadj_t += adj_r * 0.5 * inv\n"
           "adj_x += adj_t * x\nadj_x += adj_t * x\nreturn adj_x\n")
    text = _fold_back(src)
    assert "adj_t = adj_t" not in text and "return adj_x" in text, text
    env = {"adj_r": 3.0, "inv": 0.25, "x": 1.5}
    for body in (src, text):
        exec(compile("def f():\n" + textwrap.indent(body, "    "), "<b>", "exec"), env)
        env.setdefault("results", []).append(env["f"]())
    assert env["results"][0] == env["results"][1]
