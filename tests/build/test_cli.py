"""The ``adjoint`` command: generate, show, check and their exit statuses."""
import os
import shutil
import subprocess
import sys

import pytest

import adjoint as ad
from adjoint.cli import main
from adjoint.generate import Header
from tests.build.test_generate import ROOT, SOURCE

STAGES = ("parse", "normalize", "ssa", "forward", "backward")


@pytest.fixture
def src(tmp_path):
    p = tmp_path / "kernels.py"
    p.write_text(SOURCE)
    return p


def run_cli(*args, cwd=None, module=True):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "adjoint"] if module else [shutil.which("adjoint")]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_generate_to_a_file(src, tmp_path, capsys):
    out = tmp_path / "gen" / "kernels_grad.py"
    assert main(["generate", str(src), "-o", str(out)]) == 0
    assert out.read_text() == ad.generate(str(src), str(out))
    assert Header.parse(out.read_text()).source == "../kernels.py"
    assert f"wrote {out}" in capsys.readouterr().err
    assert main(["generate", str(src), "-o", str(out)]) == 0
    assert f"unchanged {out}" in capsys.readouterr().err


def test_generate_to_stdout(src, capsys):
    assert main(["generate", str(src)]) == 0
    assert capsys.readouterr().out == ad.generate(str(src))


def test_python_dash_m_and_console_script(src, tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    r = run_cli("generate", str(src), "-o", str(a))
    assert r.returncode == 0, r.stderr
    if shutil.which("adjoint") is None:
        pytest.skip("the adjoint console script is not installed (pip install -e .)")
    r = run_cli("generate", str(src), "-o", str(b), module=False)
    assert r.returncode == 0, r.stderr
    assert a.read_text() == b.read_text()


def test_generate_several_files_and_a_folder(tmp_path, capsys):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "a.py").write_text(SOURCE)
    (tmp_path / "src" / "sub" / "b.py").write_text(SOURCE.replace("s * 0.5", "s * 0.3"))
    (tmp_path / "src" / "notes.py").write_text("raise SystemExit('never imported')\n")
    gen = tmp_path / "gen"
    assert main(["generate", str(tmp_path / "src"), "-o", str(gen)]) == 0
    assert sorted(str(p.relative_to(gen)) for p in gen.rglob("*.py")) == \
        ["a.py", os.path.join("sub", "b.py")]
    assert Header.parse((gen / "sub" / "b.py").read_text()).source == "../../src/sub/b.py"
    assert main(["check", str(gen)]) == 0
    two = tmp_path / "two"
    assert main(["generate", str(tmp_path / "src" / "a.py"),
                 str(tmp_path / "src" / "sub" / "b.py"), "-o", str(two)]) == 0
    assert sorted(p.name for p in two.iterdir()) == ["a.py", "b.py"]
    capsys.readouterr()
    assert main(["generate", str(tmp_path / "src" / "a.py"), str(tmp_path / "src" / "a.py")]) == 2
    assert "need -o FOLDER" in capsys.readouterr().err


def _said(out, stage, optimized):
    """``out`` without the line saying which code ``show`` printed (forward, backward)."""
    if stage not in ("forward", "backward"):
        return out
    first, rest = out.split("\n", 1)
    which = "the code that runs" if optimized else "one thread's plain rule-by-rule code"
    assert first.startswith(f"# energy {stage}: {which}"), first
    return rest


@pytest.mark.parametrize("optimized", [False, True], ids=["plain", "optimized"])
@pytest.mark.parametrize("stage", STAGES)
def test_show_one_stage_is_ad_source(src, stage, optimized, capsys):
    """``show`` leads with the plain code of one thread (what a learner reads; ``ad.source(
    optimize=False)``); ``--optimized`` prints the code that runs (``ad.source``)."""
    assert main(["show", f"{src}:energy", "--stage", stage] +
                (["--optimized"] if optimized else [])) == 0
    from adjoint.generate import import_source
    module = import_source(str(src))
    out = _said(capsys.readouterr().out, stage, optimized)
    assert out == ad.source(module.energy, stage, optimize=optimized)
    if stage == "backward":
        assert ("def energy_backward(dim0" in out) == optimized     # (the grid function)


def test_show_defaults_to_backward_and_handles_funcs(src, capsys):
    assert main(["show", f"{src}:soft_abs"]) == 0
    assert "def soft_abs_adjoint(x, adj_ret):" in capsys.readouterr().out


def test_show_all_prints_every_stage_in_order(src, capsys):
    assert main(["show", f"{src}:energy", "--stage", "all"]) == 0
    out = capsys.readouterr().out
    positions = [out.index(f"stage: {s} ") for s in STAGES]
    assert positions == sorted(positions)
    assert "def energy(n, x, out):" in out and "def energy_backward_thread(" in out


def test_show_diff(src, capsys):
    assert main(["show", f"{src}:energy", "--stage", "ssa", "--diff"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--- energy after normalize\n+++ energy after ssa\n")
    assert any(line.startswith("+") and "_1 = " in line for line in out.splitlines())
    assert main(["show", f"{src}:energy", "--stage", "all", "--diff"]) == 0
    out = capsys.readouterr().out
    assert "+++ energy after parse" in out and "+++ energy after backward" in out


def test_show_errors(src, capsys):
    assert main(["show", f"{src}:nope"]) == 2
    err = capsys.readouterr().err
    assert "no kernel or func named 'nope'" in err and "energy, soft_abs" in err
    assert main(["show", str(src)]) == 2
    assert "expected FILE.py:NAME" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["show", f"{src}:energy", "--stage", "bogus"])
    capsys.readouterr()
    # a stage the kernel or func has no functions for: one line, not a traceback
    plain = src.parent / "plain.py"
    plain.write_text("import adjoint as ad\n\n@ad.kernel\ndef scale(x: ad.array(dtype=float), "
                     "y: ad.array(dtype=float)):\n    i = ad.tid()\n    y[i] = 2.0 * x[i]\n")
    assert main(["show", f"{plain}:scale", "--stage", "backward_saved"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("adjoint show: error: ") and "'scale' has no backward_saved" in err
    assert main(["show", f"{src}:soft_abs", "--stage", "forward_save"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("adjoint show: error: ") and "'soft_abs' is a func" in err


def test_a_file_that_fails_to_import_is_an_error_naming_its_line(tmp_path, capsys):
    """The user's file raising at import (here a relative import, as a file inside a
    package has) is exit status 2 and one line naming the file, the line and the cause,
    not a traceback through adjoint."""
    bad = tmp_path / "kernels.py"
    bad.write_text("import adjoint as ad\n\nfrom . import helpers\n")
    assert main(["show", f"{bad}:k"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: importing the file failed: ImportError" in err
    assert "use absolute imports" in err and "Traceback" not in err
    bad.write_text("import adjoint as ad\nx = 1 / 0\n")
    assert main(["generate", str(bad)]) == 2
    assert f"{bad}:2: importing the file failed: ZeroDivisionError" in capsys.readouterr().err


def test_check_exit_status_and_message(src, tmp_path, capsys):
    out = tmp_path / "kernels_grad.py"
    assert main(["generate", str(src), "-o", str(out)]) == 0
    assert main(["check", str(out)]) == 0
    src.write_text(SOURCE.replace("b * b", "b * b * b"))
    capsys.readouterr()
    assert main(["check", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"stale: {out}: kernels.py changed since generation" in err
    assert main(["check", "--diff", str(out)]) == 1
    assert "+++ " in capsys.readouterr().out
    assert main(["generate", str(src), "-o", str(out)]) == 0
    assert main(["check", str(out)]) == 0


def test_check_in_a_subprocess_like_ci(src, tmp_path):
    out = tmp_path / "kernels_grad.py"
    assert run_cli("generate", str(src), "-o", str(out)).returncode == 0
    assert run_cli("check", str(out)).returncode == 0
    out.write_text(out.read_text() + "# edited\n")
    r = run_cli("check", str(out))
    assert r.returncode == 1 and str(out) in r.stderr and "edited by hand" in r.stderr


def test_check_nothing_to_check(tmp_path, capsys):
    assert main(["check", str(tmp_path)]) == 2
    assert "no generated module found" in capsys.readouterr().err


def test_untransformable_source_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import adjoint as ad\n\n\n@ad.kernel\ndef k(x: ad.array(dtype=float)):\n"
                   "    i = ad.tid()\n    x[i] = open('f')\n")
    assert main(["generate", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:7:" in err


def test_docs_stage_markers_expand_to_real_show_output():
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    try:
        import gen_stages
    finally:
        sys.path.remove(os.path.join(ROOT, "docs"))
    page = open(os.path.join(ROOT, "docs", "reverse-mode.md"), encoding="utf-8").read()
    text = gen_stages.expand(page)
    assert "<!-- adjoint show" not in text and "<!-- include" not in text
    assert "def capped_sum_backward_thread(" in text and "--- capped_sum after normalize" in text


def test_generate_and_check_a_cuda_module(src, tmp_path, capsys):
    out = tmp_path / "gen" / "kernels_cuda.py"
    assert main(["generate", str(src), "-o", str(out), "--target", "cuda"]) == 0
    assert out.read_text() == ad.generate(str(src), str(out), target="cuda")
    assert Header.parse(out.read_text()).target == "cuda"
    assert main(["generate", str(src), "-o", str(out), "--target", "cuda"]) == 0
    assert f"unchanged {out}" in capsys.readouterr().err
    assert main(["check", str(out)]) == 0
    src.write_text(SOURCE.replace("b * b", "b * b * b"))
    capsys.readouterr()
    assert main(["check", str(out)]) == 1
    assert f"stale: {out}: ../kernels.py changed since generation" in capsys.readouterr().err
    assert main(["generate", str(src), "-o", str(out), "--target", "cuda"]) == 0
    assert main(["check", str(out)]) == 0
    assert main(["check", str(tmp_path / "gen")]) == 0      # found in a folder too


def test_generate_to_stdout_for_cuda(src, capsys):
    assert main(["generate", str(src), "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert out == ad.generate(str(src), target="cuda") and "# adjoint-target: cuda\n" in out


def test_unknown_target_is_a_usage_error(src, capsys):
    for command in (["generate", str(src)], ["show", f"{src}:energy"]):
        with pytest.raises(SystemExit) as exc:
            main(command + ["--target", "rocm"])
        assert exc.value.code == 2
        assert "invalid choice: 'rocm' (choose from 'cpu', 'cuda')" in capsys.readouterr().err


@pytest.mark.parametrize("stage", ["forward", "backward"])
def test_show_cuda_spells_forward_and_backward_for_cuda(src, stage, capsys):
    assert main(["show", f"{src}:energy", "--stage", stage, "--target", "cuda",
                 "--optimized"]) == 0
    out = _said(capsys.readouterr().out, stage, True)
    from adjoint.generate import import_source
    assert out == ad.source(import_source(str(src)).energy, stage, target="cuda")
    assert "tid0 = cuda.grid(1)" in out and "rt.prange" not in out
    assert out != ad.source(import_source(str(src)).energy, stage)
    if stage == "backward":
        assert "def energy_backward(dim0, n, x, out, adj_x, adj_out, rt_status):" in out


def test_show_cuda_of_a_func_and_of_earlier_stages(src, capsys):
    assert main(["show", f"{src}:soft_abs", "--target", "cuda"]) == 0
    assert "def soft_abs_adjoint(x, adj_ret, rt_status):" in capsys.readouterr().out
    assert main(["show", f"{src}:energy", "--stage", "ssa", "--target", "cuda"]) == 0
    ssa_cuda = capsys.readouterr().out
    assert main(["show", f"{src}:energy", "--stage", "ssa"]) == 0
    assert capsys.readouterr().out == ssa_cuda       # only forward/backward differ


def test_committed_cpu_example_is_still_up_to_date():
    r = run_cli("check", os.path.join(ROOT, "examples", "springs_grad.py"))
    assert r.returncode == 0, r.stderr
    assert "adjoint-target" not in open(os.path.join(ROOT, "examples", "springs_grad.py")).read()


# -- generate never replaces a file it did not write; check says what a file is ---------

def _state(path):
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.mark.parametrize("how", ["itself", "dot", "user_file", "folder_onto_itself", "symlink"])
def test_generate_never_overwrites_a_file_it_did_not_generate(src, tmp_path, capsys,
                                                              monkeypatch, how):
    notes = tmp_path / "notes.py"
    notes.write_text("# my notes, not generated\nx = 1\n")
    if how == "symlink":
        (tmp_path / "link.py").symlink_to(src)
    args = {"itself": [str(src), "-o", str(src)],
            "dot": ["kernels.py", "-o", "."],
            "user_file": [str(src), "-o", str(notes)],
            "folder_onto_itself": [str(tmp_path), "-o", str(tmp_path)],
            "symlink": [str(src), "-o", str(tmp_path / "link.py")]}[how]
    target = notes if how == "user_file" else src
    before = _state(target), _state(notes)
    monkeypatch.chdir(tmp_path)
    assert main(["generate"] + args) == 2
    err = capsys.readouterr().err
    assert "adjoint generate: error: refusing to overwrite" in err and target.name in err, err
    assert (_state(target), _state(notes)) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".tmp") == []


def test_generate_still_rewrites_its_own_stale_module(src, tmp_path, capsys):
    out = tmp_path / "kernels_grad.py"
    assert main(["generate", str(src), "-o", str(out)]) == 0
    src.write_text(SOURCE.replace("s * 0.5", "s * 0.25"))
    capsys.readouterr()
    assert main(["generate", str(src), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    assert out.read_text() == ad.generate(str(src), str(out))


def test_an_unwritable_output_is_a_clear_error(src, tmp_path):
    blocker = tmp_path / "not_a_folder.txt"
    blocker.write_text("a file where a folder is needed\n")
    r = run_cli("generate", str(src), "-o", str(blocker / "out.py"))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert f"cannot write {blocker / 'out.py'}: {blocker} is a file, not a folder" in r.stderr


def test_check_on_a_kernel_source_says_so(src, tmp_path, capsys):
    assert main(["check", str(src)]) == 2
    err = capsys.readouterr().err
    assert f"{src}: this is a kernel source file, not a generated module" in err
    assert "stale" not in err
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")
    assert main(["check", str(plain)]) == 2
    err = capsys.readouterr().err
    assert "not a generated module (no adjoint header)" in err and "stale" not in err
