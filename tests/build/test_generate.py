"""``ad.generate`` and the generated modules: provenance header, byte-identical
text, imports without the transformer, same gradients as the decorated
originals, ``check`` on stale modules, and the pure-Python debugging path."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import adjoint as ad
from adjoint import passes
from adjoint.api import import_path
from adjoint.generate import Header, check, generate, plan, relative_source

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SOURCE = '''\
import math

import adjoint as ad


@ad.func
def soft_abs(x: float) -> float:
    if x > 0.0:
        y = x
    else:
        y = -x
    return y


@ad.kernel
def energy(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    a = x[i]
    b = a
    s = 0.0
    for k in range(n):
        if b > 0.5:
            s = s * 0.5 + soft_abs(b) * math.sin(b + k)
        else:
            s = s - b * b
    out[i] = s


if __name__ == "__main__":
    raise SystemExit("the source's main block must not run when it is generated")
'''


def expected_grad(xs, n):
    """d(sum out)/dx of ``energy`` by hand: s_k = s*0.5 + |b| sin(b+k) or s - b^2."""
    g = np.zeros_like(xs)
    for idx, b in enumerate(xs):
        ds = 0.0
        for k in range(n):
            if b > 0.5:
                ds = ds * 0.5 + np.sign(b) * np.sin(b + k) + abs(b) * np.cos(b + k)
            else:
                ds = ds - 2.0 * b
        g[idx] = ds
    return g


@pytest.fixture
def project(tmp_path):
    """A source file in src/ and its generated module in gen/."""
    (tmp_path / "src").mkdir()
    (tmp_path / "gen").mkdir()
    src = tmp_path / "src" / "kernels.py"
    src.write_text(SOURCE)
    out = tmp_path / "gen" / "kernels_grad.py"
    out.write_text(generate(str(src), str(out)))
    return src, out


def run_python(code, env=None, cwd=None):
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=300)


def test_header_records_version_relative_source_and_hash(project):
    src, out = project
    text = out.read_text()
    header = Header.parse(text)
    assert header.version == ad.__version__
    assert header.source == "../src/kernels.py"
    import hashlib
    assert header.sha256 == hashlib.sha256(SOURCE.encode()).hexdigest()
    assert "import gast" not in text and "import astor" not in text


def test_every_kernel_and_func_under_its_own_name(project):
    _, out = project
    text = out.read_text()
    for name in ("soft_abs_forward", "soft_abs_adjoint", "energy_forward", "energy_backward"):
        assert f"def {name}(" in text
    assert "\nsoft_abs = adjoint.runtime.FuncSpec(" in text
    assert "\nenergy = adjoint.runtime.KernelSpec(" in text


def test_without_output_path_the_header_names_the_file(project):
    src, _ = project
    assert Header.parse(generate(str(src))).source == "kernels.py"
    assert relative_source(str(src), str(src.parent.parent / "a" / "b" / "m.py")) == \
        "../../src/kernels.py"


def test_generate_text_is_the_public_ad_generate(project):
    src, out = project
    assert ad.generate(str(src), str(out)) == out.read_text()


@pytest.mark.parametrize("backend", ["python", "numba"])  # `adjoint generate` writes CPU code
def test_generated_module_gives_the_originals_gradient(project, backend, kernel_module):
    _, out = project
    with ad.backend_scope(backend):    # a generated module binds its backend at import
        gen = import_path(str(out), f"adjoint_test_generated_{backend}_{os.getpid()}")
    assert (type(gen.energy_backward).__name__ == "function") == (backend == "python")
    original = kernel_module(SOURCE.split("\n", 3)[3])
    xs = np.linspace(-1.0, 1.5, 7)
    grads = []
    for k in (gen.energy, original.energy):
        with ad.backend_scope(backend):
            x = ad.array(xs, requires_grad=True)
            y = ad.zeros(7, requires_grad=True)
            with ad.Tape() as tape:
                ad.launch(k, dim=7, inputs=[3, x], outputs=[y])
            tape.backward(grads={y: np.ones(7)})
            grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[0], expected_grad(xs, 3), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(grads[0], grads[1])
    assert gen.soft_abs(-2.5) == 2.5      # a FuncSpec is callable like the func


def test_generated_module_runs_without_gast_and_astor(project):
    _, out = project
    r = run_python(f'''
        import sys
        sys.modules["gast"] = None     # any import of them now raises ImportError
        sys.modules["astor"] = None
        import importlib.util
        import numpy as np
        import adjoint as ad
        spec = importlib.util.spec_from_file_location("kernels_grad", {str(out)!r})
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)
        x = ad.array([0.25, 0.75, 1.0], requires_grad=True)
        y = ad.zeros(3, requires_grad=True)
        with ad.Tape() as tape:
            ad.launch(gen.energy, dim=3, inputs=[2, x], outputs=[y])
        tape.backward(grads={{y: np.ones(3)}})
        print(repr(x.grad.numpy().tolist()))
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("gast", "astor")
                     and sys.modules[m] is not None))
    ''')
    assert r.returncode == 0, r.stderr
    grad_line, loaded = r.stdout.strip().splitlines()[-2:]
    np.testing.assert_allclose(eval(grad_line), expected_grad(np.array([0.25, 0.75, 1.0]), 2),
                               rtol=1e-12)
    assert loaded == "[]"


def test_byte_identical_across_hash_seeds_and_processes(project):
    src, out = project
    texts = set()
    for seed in ("0", "1", "4242"):
        r = run_python(f'''
            import sys
            from adjoint.generate import generate
            sys.stdout.write(generate({str(src)!r}, {str(out)!r}))
        ''', env={"PYTHONHASHSEED": seed})
        assert r.returncode == 0, r.stderr
        texts.add(r.stdout)
    texts.add(generate(str(src), str(out)))
    assert len(texts) == 1


def test_every_block_comments_the_original_line(project):
    _, out = project
    text = out.read_text()
    body = text.split("def energy_backward_thread(", 1)[1].split("\n@rt.", 1)[0]
    src_lines = SOURCE.splitlines()
    for lineno in (18, 22, 23, 25, 26):     # a = x[i]; the loop body; the store
        assert f".py:{lineno}: {src_lines[lineno - 1].strip()}" in body


def test_lines_are_readable_length(project):
    _, out = project
    long = [line for line in out.read_text().splitlines()
            if len(line) > 99 and not line.lstrip().startswith("# ")]
    assert long == []


def test_imported_funcs_come_along(tmp_path):
    (tmp_path / "helpers.py").write_text(textwrap.dedent('''\
        import adjoint as ad

        @ad.func
        def square(x: float) -> float:
            return x * x
        '''))
    (tmp_path / "main.py").write_text(textwrap.dedent('''\
        import adjoint as ad
        from helpers import square

        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = square(x[i])
        '''))
    text = generate(str(tmp_path / "main.py"))
    assert "def square_forward(" in text and "def square_adjoint(" in text
    assert text.index("def square_forward(") < text.index("def k_forward_thread(")
    assert "\nk = adjoint.runtime.KernelSpec(" in text


def test_file_without_kernels_is_an_error(tmp_path):
    p = tmp_path / "plain.py"
    p.write_text("x = 1\n")
    with pytest.raises(ad.AdjointError, match="defines no @ad.kernel or @ad.func"):
        generate(str(p))


def test_check_up_to_date(project):
    _, out = project
    result = check(str(out))
    assert result.ok, result.reason


def test_check_names_a_changed_source(project):
    src, out = project
    src.write_text(SOURCE.replace("s * 0.5", "s * 0.25"))
    result = check(str(out))
    assert not result.ok
    assert "../src/kernels.py changed since generation" in result.reason
    assert "-            t" in result.diff or "0.25" in result.diff


def test_check_names_a_hand_edit(project):
    _, out = project
    out.write_text(out.read_text().replace("adj_ret", "adj_ret ", 1))
    result = check(str(out))
    assert not result.ok and "edited by hand" in result.reason


def test_check_names_another_version(project):
    _, out = project
    out.write_text(out.read_text().replace(f"# adjoint-version: {ad.__version__}",
                                           "# adjoint-version: 0.0.1"))
    result = check(str(out))
    assert not result.ok and "generated by adjoint 0.0.1" in result.reason


def test_a_module_generated_with_optimizations_off_records_it_and_checks(project, tmp_path):
    """Generated under ``ADJOINT_OPTIMIZE=0`` (or with some passes off), a module says so
    in its header and ``check`` regenerates it under that setting: up to date where the
    process runs every optimization; the header changed by hand makes it stale; one made
    with all of them has no such line (its header is as before)."""
    src, out = project
    assert "adjoint-optimize" not in out.read_text()
    for setting, line in ((False, "# adjoint-optimize: 0"),
                          ("-scale,-jam", "# adjoint-optimize: -scale,-jam")):
        with passes.optimizing(setting):
            text = generate(str(src), str(out))
        assert line in text.splitlines()[:10] and Header.parse(text).optimize == line[20:]
        if setting is False:
            assert text != out.read_text()      # (the plain code is another module)
        plain = tmp_path / "gen" / "plain_grad.py"
        plain.write_text(text)
        assert check(str(plain)).ok, check(str(plain)).reason
    plain.write_text(plain.read_text().replace(line, "# adjoint-optimize: 1"))
    assert not check(str(plain)).ok
    plain.write_text(plain.read_text().replace("# adjoint-optimize: 1",
                                               "# adjoint-optimize: -nonesuch"))
    result = check(str(plain))
    assert not result.ok and "no optimization pass is named 'nonesuch'" in result.reason


def test_check_missing_source_and_not_generated(project, tmp_path):
    src, out = project
    os.remove(src)
    assert "is missing" in check(str(out)).reason
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")
    assert "no adjoint header" in check(str(plain)).reason


def test_plan_for_files_and_folders(tmp_path):
    (tmp_path / "src" / "sub").mkdir(parents=True)
    a = tmp_path / "src" / "a.py"
    b = tmp_path / "src" / "sub" / "b.py"
    a.write_text(SOURCE)
    b.write_text(SOURCE)
    (tmp_path / "src" / "unrelated.py").write_text("print('not imported')\n")
    gen = str(tmp_path / "gen")
    assert plan([str(a)], gen + "/a_grad.py") == [(str(a), gen + "/a_grad.py")]
    assert plan([str(a)], None) == [(str(a), None)]
    assert plan([str(a), str(b)], gen) == [(str(a), os.path.join(gen, "a.py")),
                                           (str(b), os.path.join(gen, "b.py"))]
    assert plan([str(tmp_path / "src")], gen) == [(str(a), os.path.join(gen, "a.py")),
                                                  (str(b), os.path.join(gen, "sub", "b.py"))]
    with pytest.raises(ad.AdjointError, match="need -o FOLDER"):
        plan([str(a), str(b)], None)


# --- pure-Python debugging (ADJOINT_JIT=0) ------------------------------------

RUN_GRAD = '''
    import importlib.util, sys
    import numpy as np
    import adjoint as ad
    spec = importlib.util.spec_from_file_location("kernels_grad", sys.argv[1] if len(sys.argv) > 1
                                                  else {out!r})
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    print("backend", ad.backend_name(), type(gen.energy_backward_thread).__name__)
    x = ad.array(np.linspace(-1.0, 1.5, 9), requires_grad=True)
    y = ad.zeros(9, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(gen.energy, dim=9, inputs=[4, x], outputs=[y])
    tape.backward(grads={{y: np.ones(9)}})
    print(repr(y.numpy().tolist()))
    print(repr(x.grad.numpy().tolist()))
'''


def test_adjoint_jit_0_matches_the_compiled_run(project):
    _, out = project
    runs = {}
    for jit in ("0", "1"):
        r = run_python(RUN_GRAD.format(out=str(out)), env={"ADJOINT_JIT": jit})
        assert r.returncode == 0, r.stderr
        lines = r.stdout.strip().splitlines()
        runs[jit] = [lines[-3]] + [eval(v) for v in lines[-2:]]
    assert runs["0"][0] == "backend python function"
    assert runs["1"][0].startswith("backend numba") and "function" not in runs["1"][0]
    np.testing.assert_allclose(runs["0"][1], runs["1"][1], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(runs["0"][2], runs["1"][2], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(runs["0"][2], expected_grad(np.linspace(-1.0, 1.5, 9), 4),
                               rtol=1e-12)


def test_pdb_stops_in_the_generated_backward(project, tmp_path):
    """The documented recipe: ADJOINT_JIT=0, a breakpoint at a line of the
    generated file, pdb stops there and can print adjoints. (A tape runs the kernel's
    saving pair: its loop is stored, see tests/optimize/test_store.py; its backward stores into
    x's gradient, which is clean: tests/optimize/test_once.py.)"""
    _, out = project
    lines = out.read_text().splitlines()
    start = lines.index(next(s for s in lines
                             if s.startswith("def energy_backward_saved_clean_thread(")))
    # (the clear of out's adjoint, which runs only if the runtime asks: it may owe it)
    stop = next(k for k in range(start, len(lines)) if lines[k].strip() == "if rt_clear:") + 1
    assert "adj_out[i] = 0.0" in lines[stop]
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(RUN_GRAD.format(out=str(out))))
    commands = f"break {out}:{stop}\ncontinue\np ('ADJ', float(adj_s_1), i)\nquit\n"
    env = dict(os.environ, ADJOINT_JIT="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pdb", str(script)], input=commands,
                       capture_output=True, text=True, env=env, timeout=300)
    assert f"{out}({stop})energy_backward_saved_clean_thread()" in r.stdout, r.stdout + r.stderr
    assert "('ADJ', 1.0, 0)" in r.stdout, r.stdout


def test_require_fresh_raises_naming_the_module_when_stale(project):
    from adjoint.generate import require_fresh
    src, out = project
    require_fresh(str(out))                       # up to date: no error
    src.write_text(SOURCE.replace("s * 0.5", "s * 0.25"))
    with pytest.raises(ad.StaleModuleError) as err:
        require_fresh(str(out))
    assert str(out) in str(err.value) and "adjoint generate" in str(err.value)


# --- the CUDA target (numba's simulator here, see conftest.py) ----------------

@pytest.fixture
def cuda_project(project):
    """The same source, also generated for CUDA into gen/kernels_cuda.py."""
    src, out = project
    cuda_out = out.parent / "kernels_cuda.py"
    cuda_out.write_text(generate(str(src), str(cuda_out), target="cuda"))
    return src, out, cuda_out


def test_cpu_header_has_no_target_line(project):
    _, out = project
    lines = out.read_text().splitlines()
    start = lines.index(f"# adjoint-version: {ad.__version__}")
    assert [line.split(":")[0] for line in lines[start:start + 4]] == \
        ["# adjoint-version", "# adjoint-source", "# adjoint-source-sha256",
         "import adjoint.runtime"]
    assert "adjoint-target" not in out.read_text()
    assert Header.parse(out.read_text()).target == "cpu"


def test_cuda_header_records_the_target(cuda_project):
    src, out, cuda_out = cuda_project
    text = cuda_out.read_text()
    header = Header.parse(text)
    assert header.target == "cuda" and header.source == "../src/kernels.py"
    assert header.sha256 == Header.parse(out.read_text()).sha256
    assert "\n# adjoint-target: cuda\n" in text
    assert "@cuda.jit\ndef energy_forward(" in text and "@rt.jit" not in text
    assert ad.generate(str(src), str(cuda_out), target="cuda") == text   # byte-identical


def test_cuda_text_is_byte_identical_in_another_process(cuda_project):
    src, _, cuda_out = cuda_project
    r = run_python(f'''
        import sys
        from adjoint.generate import generate
        sys.stdout.write(generate({str(src)!r}, {str(cuda_out)!r}, target="cuda"))
    ''', env={"PYTHONHASHSEED": "7"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == cuda_out.read_text()


def test_unknown_target_is_an_error(project):
    src, out = project
    with pytest.raises(ad.AdjointError, match=r"kernels.py: unknown target 'rocm'; "
                                              r"choose one of cpu, cuda"):
        generate(str(src), str(out), target="rocm")
    out.write_text(out.read_text().replace("# adjoint-source-sha256",
                                           "# adjoint-target: rocm\n# adjoint-source-sha256"))
    result = check(str(out))
    assert not result.ok and "unknown target 'rocm'" in result.reason


def test_check_regenerates_a_cuda_module_for_cuda(cuda_project):
    from adjoint.generate import require_fresh
    src, out, cuda_out = cuda_project
    assert check(str(cuda_out)).ok, check(str(cuda_out)).reason
    require_fresh(str(cuda_out))
    src.write_text(SOURCE.replace("s * 0.5", "s * 0.25"))
    for path in (out, cuda_out):
        result = check(str(path))
        assert not result.ok and "../src/kernels.py changed since generation" in result.reason
    assert "0.25" in check(str(cuda_out)).diff
    with pytest.raises(ad.StaleModuleError, match="kernels_cuda.py: .*changed since generation"):
        require_fresh(str(cuda_out))
    cuda_out.write_text(generate(str(src), str(cuda_out), target="cuda"))
    assert check(str(cuda_out)).ok


def test_cuda_module_without_its_target_line_is_stale(cuda_project):
    _, _, cuda_out = cuda_project
    cuda_out.write_text(cuda_out.read_text().replace("# adjoint-target: cuda\n", ""))
    result = check(str(cuda_out))
    assert not result.ok and "edited by hand" in result.reason


def _energy_grad(k, xs, n, device):
    x = ad.array(xs, requires_grad=True, device=device)
    y = ad.zeros(len(xs), requires_grad=True, device=device)
    with ad.Tape() as tape:
        ad.launch(k, dim=len(xs), inputs=[n, x], outputs=[y], device=device)
    tape.backward(grads={y: np.ones(len(xs))})
    return y.numpy(), x.grad.numpy()


def test_generated_cuda_module_gives_the_cpu_modules_gradient(cuda_project):
    from tests.conftest import central_fd
    _, out, cuda_out = cuda_project
    cpu = import_path(str(out), f"adjoint_test_generated_cpu_{os.getpid()}")
    gpu = import_path(str(cuda_out), f"adjoint_test_generated_cuda_{os.getpid()}")
    assert gpu.energy.target == "cuda" and cpu.energy.target == "cpu"
    xs = np.linspace(-1.0, 1.5, 37)             # more than one simulated block of 32
    y_cpu, g_cpu = _energy_grad(cpu.energy, xs, 3, "cpu")
    y_gpu, g_gpu = _energy_grad(gpu.energy, xs, 3, "cuda")
    np.testing.assert_allclose(y_gpu, y_cpu, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(g_gpu, g_cpu, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(g_gpu, expected_grad(xs, 3), rtol=1e-12, atol=1e-12)

    def total(v):
        return float(_energy_grad(gpu.energy, v, 3, "cuda")[0].sum())
    keep = np.abs(xs - 0.5) > 1e-3                # away from the branch at b = 0.5
    fd = central_fd(total, xs)
    np.testing.assert_allclose(g_gpu[keep], fd[keep], rtol=1e-6, atol=1e-6)


def test_generated_cuda_module_refuses_a_cpu_launch(cuda_project):
    _, _, cuda_out = cuda_project
    gpu = import_path(str(cuda_out), f"adjoint_test_generated_cuda_cpu_{os.getpid()}")
    x, y = ad.array([0.25, 0.75]), ad.zeros(2)
    with pytest.raises(ad.LaunchError, match="was generated for device='cuda', not 'cpu'"):
        ad.launch(gpu.energy, dim=2, inputs=[2, x], outputs=[y])
