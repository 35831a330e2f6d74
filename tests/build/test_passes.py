"""The pass list (adjoint/build/passes.py): the switches of the optimization passes, and the code
after any pass (``adjoint show --after``, ``ADJOINT_PRINT_AFTER``, ``adjoint passes``)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import adjoint as ad
from adjoint import passes
from adjoint.cli import main

BODY = """
def {name}(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        s += x[i] * x[i] * 0.5 + math.sqrt(x[i] * x[i] + float(k))
    out[i] = s * s
"""
# one kernel three times: every optimization, none, and all but two
SOURCE = "".join(f"\n@ad.kernel{deco}" + BODY.format(name=name) for name, deco in (
    ("energy", ""), ("plain", "(optimize=False)"), ("some", '(optimize="-scale,-store")'))) + \
    """

@ad.func
def half(x: float) -> float:
    return x * x * 0.5
"""


@pytest.fixture
def m(kernel_module):
    return kernel_module(SOURCE)


@pytest.mark.parametrize("text, want", [
    (None, passes.ALL), ("1", passes.ALL), ("0", passes.NONE), ("", passes.ALL),
    ("-scale,-jam", passes.ALL - {"scale", "jam"}), ("scale", {"scale"}),
    ("scale,jam", {"scale", "jam"}), ("0,+eager", {"eager"}), (False, passes.NONE),
    (True, passes.ALL), (["once", "cover"], {"once", "cover"}),
])
def test_settings(text, want):
    assert passes.parse_setting(text) == frozenset(want)


def test_a_setting_naming_no_optimization_is_refused_with_the_list():
    with pytest.raises(ValueError, match="no optimization pass is named 'scal'.*scale"):
        passes.parse_setting("-scal")
    with pytest.raises(ValueError, match="reverse is a core pass"):
        passes.parse_setting("-reverse")
    with pytest.raises(ValueError, match="optimize="):
        ad.kernel(optimize="-nothing")(lambda: None)


def test_every_pass_reads_what_passes_before_it_made_and_says_what_it_is():
    made = {"source"}
    for p in passes.PASSES:
        assert set(p.reads) <= made, f"{p.name} reads {sorted(set(p.reads) - made)} unmade"
        made |= set(p.makes)
        assert p.summary and p.module and p.makes, p.name
        assert p.exact or p.rounding, f"{p.name}: says how it may round otherwise"
    assert set(passes.OPTIMIZATIONS) >= {"store", "once", "gather", "zeroed", "cover", "eager",
                                         "reciprocal", "scale", "sums", "jam", "unroll"}
    core = [p.name for p in passes.PASSES if not p.optimization]
    assert core[:2] == ["parse", "scalarize"] and core[-1] == "parallel"
    # (the one optimization among the core passes rewrites the user's tree before scalarize)
    first = min(n for n, p in enumerate(passes.PASSES) if p.optimization and p.name != "unroll")
    assert all(p.optimization for p in passes.PASSES[first:])


def _grad(kernel, backend):
    with ad.backend_scope(backend):
        x = ad.array(np.linspace(0.5, 2.0, 6), requires_grad=True)
        out = ad.zeros(6, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(kernel, 6, inputs=[3, x], outputs=[out])
        tape.backward(grads={out: np.linspace(1.0, 2.0, 6)})
        return out.numpy().copy(), x.grad.numpy().copy()


@pytest.mark.parametrize("backend_name", ["python", "numba"])
def test_kernels_with_optimizations_off_compute_the_same(m, backend_name):
    """A kernel's option (``optimize=False``, ``"-scale,-store"``) and ``ADJOINT_OPTIMIZE``
    (here ``passes.optimizing``) choose its passes; the values agree with all on."""
    ref = _grad(m.energy, backend_name)
    assert m.plain.transformed.applied == ()
    assert m.plain.optimizations() == passes.NONE
    assert {"scale", "store"} & set(m.some.transformed.applied) == set()
    assert {"store", "scale"} <= set(m.energy.transformed.applied)
    for k in (m.plain, m.some):
        got = _grad(k, backend_name)
        np.testing.assert_allclose(got[0], ref[0], rtol=1e-14)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-12)
    with passes.optimizing("0"):
        assert m.energy.transformed.applied == ()
        got = _grad(m.energy, backend_name)
        assert m.some.optimizations() == passes.NONE      # (both must allow a pass)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-12)
    assert m.energy.transformed.applied != ()           # (the context ended)


def test_the_environment_variable_chooses_the_passes_of_a_process(tmp_path):
    """``ADJOINT_OPTIMIZE`` is read once, as numba reads ``NUMBA_*`` (a launch does not pay
    for reading the environment); a bad value names the passes."""
    script = tmp_path / "k.py"
    script.write_text("import math\nimport numpy as np\nimport adjoint as ad\n" + SOURCE + """
out = ad.zeros(6)
ad.launch(energy, 6, inputs=[3, ad.array(np.ones(6))], outputs=[out])
print(sorted(energy.transformed.applied), energy.spec.forward_save is None)
""")
    env = dict(os.environ, ADJOINT_OPTIMIZE="-store,-scale", ADJOINT_JIT="0")
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    applied = r.stdout.strip()
    assert "'store'" not in applied and "'scale'" not in applied and "'prune'" in applied
    assert applied.endswith("True")
    env["ADJOINT_OPTIMIZE"] = "-stor"
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "no optimization pass is named 'stor'" in r.stderr


def test_a_block_chooses_the_passes_of_its_launches(m):
    with passes.optimizing("-store"):
        assert "store" not in m.energy.optimizations()
        assert m.energy.transformed.saved is None
        out = ad.zeros(6)
        ad.launch(m.energy, 6, inputs=[3, ad.array(np.ones(6))], outputs=[out])
        assert m.energy.spec.forward_save is None
    assert m.energy.transformed.saved is not None and m.energy.spec.forward_save is not None


def test_the_plain_source_is_one_threads_rule_by_rule_code(m):
    text = ad.source(m.energy, "backward", optimize=False)
    assert text.startswith("def energy_backward_thread(") and "def energy_backward(" not in text
    assert "adj_" in text and "rt_clear" not in text
    optimized = ad.source(m.energy, "backward")
    assert "def energy_backward(dim0" in optimized


def test_show_after_every_pass_names_it(m, kernel_module, tmp_path, capsys):
    src = tmp_path / "k.py"
    src.write_text("import math\nimport adjoint as ad\n" + SOURCE)
    for p in passes.PASSES:
        assert main(["show", f"{src}:energy", "--after", p.name]) == 0, p.name
        out = capsys.readouterr().out
        assert f"after pass {p.name}" in out, (p.name, out[:200])
        if p.name in ("reverse", "scale", "firsts"):
            assert "def energy_backward" in out, p.name
    assert main(["show", f"{src}:half", "--after", "scale"]) == 0
    assert "def half_backward(x, adj_ret)" in capsys.readouterr().out
    assert main(["show", f"{src}:half", "--after", "once"]) == 2
    assert "runs on kernels only" in capsys.readouterr().err


def test_after_scale_shows_its_halving_left_out_and_before_it_kept(m):
    before = ad.after_source(m.energy, "reciprocal")
    after = ad.after_source(m.energy, "scale")
    assert "0.5" in before.split("def energy_backward")[1]
    assert after != before


def test_the_passes_command_lists_them_in_order(capsys):
    assert main(["passes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [p.name for p in passes.PASSES]
    assert "optimization (rounding)" in lines[[p.name for p in passes.PASSES].index("jam")]


def test_print_after_prints_as_a_kernel_is_transformed(kernel_module, monkeypatch, capsys):
    monkeypatch.setenv("ADJOINT_PRINT_AFTER", "ssa,scale")
    m = kernel_module(SOURCE)
    m.energy.transformed
    out = capsys.readouterr().out
    assert "after pass ssa (core) of energy" in out
    assert "after pass scale (optimization) of energy" in out
    monkeypatch.setenv("ADJOINT_PRINT_AFTER", "sca")
    with pytest.raises(ValueError, match="no pass is named 'sca'"):
        kernel_module(SOURCE).energy.transformed
