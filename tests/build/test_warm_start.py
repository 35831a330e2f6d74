"""A warm start: a second process finds its generated modules by the key of their inputs
(adjoint/build/inputs.py) and runs no transformer; any change of an input the generated text
depends on gives a new module, never a stale one.

Each subprocess test runs the same kernel file in fresh processes sharing one cache
folder; a child reports its results and whether the transformer was imported at all
(``adjoint.build.pipeline`` in ``sys.modules``)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import adjoint as ad
from adjoint.build import inputs, passes
from adjoint.build.inputs import module_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = '''
import json, os, sys
sys.path.insert(0, {folder!r})
import numpy as np
import adjoint as ad
import wk_kernels as m
dt = getattr(m, "DT", np.float64)
device = "cuda" if os.environ.get("ADJ_TEST_DEVICE") == "cuda" else "cpu"
x = ad.array(np.array([0.5, -1.0, 2.0], dtype=dt), requires_grad=True, device=device)
y = ad.zeros(3, dtype=dt, requires_grad=True, device=device)
if hasattr(m, "REBIND"):        # a global rebound after another kernel was launched
    ad.launch(m.other, 3, inputs=[x], outputs=[ad.zeros(3, dtype=dt, device=device)])
    for name, value in m.REBIND:
        setattr(m, name, value)
tape = ad.Tape()
with tape:
    ad.launch(m.k, 3, inputs=[x], outputs=[y])
g = None
if getattr(m, "BACKWARD", True):
    tape.backward(grads={{y: np.ones(3, dtype=dt)}})
    g = x.grad.numpy().tolist()
print("RESULT", json.dumps({{"y": y.numpy().tolist(), "g": g, "dtype": str(y.numpy().dtype),
                            "transformed": "adjoint.build.pipeline" in sys.modules,
                            "gast": "gast" in sys.modules}}))
'''

X = np.array([0.5, -1.0, 2.0])


def run_child(folder, cache, backend, env_extra=None):
    env = dict(os.environ, PYTHONPATH=ROOT, ADJOINT_CACHE_DIR=str(cache),
               NUMBA_CACHE_DIR=str(cache / "numba"), PYTHONDONTWRITEBYTECODE="1",
               ADJOINT_JIT="0" if backend == "python" else "1",
               ADJ_TEST_DEVICE="cuda" if backend == "cuda" else "cpu")
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD.format(folder=str(folder)))],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.split("RESULT", 1)[1])


def write(folder, files):
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))


def check(res, y, g, dtype="float64"):
    rtol = 1e-12 if dtype == "float64" else 1e-6
    np.testing.assert_allclose(res["y"], y, rtol=rtol)
    if g is not None:
        np.testing.assert_allclose(res["g"], g, rtol=rtol)
    assert res["dtype"] == dtype


SQUARE = '''
import os
import adjoint as ad
K = float(os.environ.get("ADJ_TEST_K", "2.0"))

@ad.kernel
def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = K * x[i] * x[i]
'''


def test_a_warm_start_runs_no_transformer(backend, tmp_path):
    """The second process imports the module its first one generated: no transformer,
    no gast; same values, gradients by hand (d(2 x^2)/dx = 4 x)."""
    write(tmp_path, {"wk_kernels.py": SQUARE})
    cache = tmp_path / "cache"
    cold = run_child(tmp_path, cache, backend)
    warm = run_child(tmp_path, cache, backend)
    for res in (cold, warm):
        check(res, 2.0 * X * X, 4.0 * X)
    assert cold["transformed"]
    assert not warm["transformed"] and not warm["gast"]


# Variants: (files, env of run A, env of run B, expected (y, g, dtype) of A, of B). Run B
# changes one input the generated text depends on; the kernel's own file stays the same.
def _square(k):
    return k * X * X, 2 * k * X, "float64"


VARIANTS = {
    "a global constant": (
        {"wk_kernels.py": SQUARE}, {"ADJ_TEST_K": "2.0"}, {"ADJ_TEST_K": "3.0"},
        _square(2.0), _square(3.0)),
    "a constant read through an attribute chain": (
        {"wk_cfg.py": '''
            import os
            class Cfg:
                SCALE = float(os.environ["ADJ_TEST_K"])
            ''',
         "wk_kernels.py": '''
            import adjoint as ad
            import wk_cfg

            @ad.kernel
            def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
                i = ad.tid()
                y[i] = wk_cfg.Cfg.SCALE * x[i] * x[i]
            '''},
        {"ADJ_TEST_K": "2.0"}, {"ADJ_TEST_K": "5.0"}, _square(2.0), _square(5.0)),
    "a closure variable": (
        {"wk_kernels.py": '''
            import os
            import adjoint as ad

            def make(c):
                @ad.kernel
                def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
                    i = ad.tid()
                    y[i] = c * x[i] * x[i]
                return k

            k = make(float(os.environ["ADJ_TEST_K"]))
            '''},
        {"ADJ_TEST_K": "2.0"}, {"ADJ_TEST_K": "-1.5"}, _square(2.0), _square(-1.5)),
    "a func in another file": (
        {"wk_funcs.py": '''
            import os
            import adjoint as ad
            if os.environ["ADJ_TEST_F"] == "square":
                @ad.func
                def f(v: float) -> float:
                    return v * v
            else:
                @ad.func
                def f(v: float) -> float:
                    return v * v * v
            ''',
         "wk_kernels.py": '''
            import adjoint as ad
            from wk_funcs import f

            @ad.kernel
            def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
                i = ad.tid()
                y[i] = f(x[i])
            '''},
        {"ADJ_TEST_F": "square"}, {"ADJ_TEST_F": "cube"},
        (X * X, 2 * X, "float64"), (X ** 3, 3 * X * X, "float64")),
    "a custom gradient": (
        {"wk_kernels.py": '''
            import os
            import adjoint as ad

            @ad.func
            def f(v: float) -> float:
                return v * v

            if os.environ.get("ADJ_TEST_CUSTOM"):
                @ad.func_grad(f)
                def f_grad(v: float, adj_ret: float):
                    return 10.0 * adj_ret         # not the derivative: it shows it is used

            @ad.kernel
            def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
                i = ad.tid()
                y[i] = f(x[i])
            '''},
        {}, {"ADJ_TEST_CUSTOM": "1"},
        (X * X, 2 * X, "float64"), (X * X, 10.0 + 0 * X, "float64")),
    "float32 arrays": (
        {"wk_kernels.py": '''
            import os
            import numpy as np
            import adjoint as ad
            DT = np.float32 if os.environ.get("ADJ_TEST_F32") else np.float64
            FT = ad.float32 if os.environ.get("ADJ_TEST_F32") else float

            @ad.kernel
            def k(x: ad.array(dtype=FT), y: ad.array(dtype=FT)):
                i = ad.tid()
                y[i] = 2.0 * x[i] * x[i]
            '''},
        {}, {"ADJ_TEST_F32": "1"}, _square(2.0), _square(2.0)[:2] + ("float32",)),
    "the option bounds_check": (
        {"wk_kernels.py": '''
            import os
            import adjoint as ad

            @ad.kernel(bounds_check=os.environ.get("ADJ_TEST_OPT") != "1")
            def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
                i = ad.tid()
                y[i] = 2.0 * x[i] * x[i]
            '''},
        {}, {"ADJ_TEST_OPT": "1"}, _square(2.0), _square(2.0)),
    "the option loop_capacity": (
        {"wk_kernels.py": '''
            import os
            import adjoint as ad

            @ad.kernel(loop_capacity=int(os.environ.get("ADJ_TEST_CAP", "256")))
            def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
                i = ad.tid()
                s = 0.0
                for j in range(2):
                    s = s + x[i] * x[i]
                y[i] = s
            '''},
        {}, {"ADJ_TEST_CAP": "8"}, _square(2.0), _square(2.0)),
    "the option enable_backward": (
        {"wk_kernels.py": '''
            import os
            import adjoint as ad
            BACKWARD = os.environ.get("ADJ_TEST_OPT") != "1"

            @ad.kernel(enable_backward=BACKWARD)
            def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
                i = ad.tid()
                y[i] = 2.0 * x[i] * x[i]
            '''},
        {}, {"ADJ_TEST_OPT": "1"}, _square(2.0), (2.0 * X * X, None, "float64")),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_changed_input_gives_a_new_module_not_a_stale_one(variant, tmp_path):
    """Run A, then run B with one input changed: B must transform (a new key) and get
    its own values; A again is warm. Python backend: the key is the same for all."""
    files, env_a, env_b, want_a, want_b = VARIANTS[variant]
    write(tmp_path, files)
    cache = tmp_path / "cache"
    a = run_child(tmp_path, cache, "python", env_a)
    b = run_child(tmp_path, cache, "python", env_b)
    a2 = run_child(tmp_path, cache, "python", env_a)
    check(a, *want_a)
    check(b, *want_b)
    check(a2, *want_a)
    assert a["transformed"] and b["transformed"], "run B loaded run A's module"
    assert not a2["transformed"]


def test_a_func_rewritten_between_runs_gives_a_new_module(tmp_path):
    """The func's file itself changes (the kernel's file does not)."""
    kernels = '''
        import adjoint as ad
        from wk_funcs import f

        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = f(x[i])
        '''
    func = '''
        import adjoint as ad

        @ad.func
        def f(v: float) -> float:
            return {body}
        '''
    cache = tmp_path / "cache"
    write(tmp_path, {"wk_kernels.py": kernels, "wk_funcs.py": func.format(body="v * v")})
    a = run_child(tmp_path, cache, "python")
    write(tmp_path, {"wk_funcs.py": func.format(body="v * v * v")})
    b = run_child(tmp_path, cache, "python")
    check(a, X * X, 2 * X)
    check(b, X ** 3, 3 * X * X)
    assert b["transformed"]


def test_a_global_rebound_after_a_func_was_transformed_is_not_recorded_wrongly(tmp_path):
    """A process transforms func ``f`` (reading ``K = 1``) for kernel ``other``, then
    rebinds ``K = 3`` and launches kernel ``k``, which calls ``f``: ``f`` is transformed
    again (adjoint/build/bindings.py), and ``k`` reads ``K = 3`` (y = 3 x^2, dy/dx = 6 x). A
    later process that starts with ``K = 3`` gets the same (it may load the module the
    first one recorded under its key, which was made from ``K = 3``)."""
    kernels = '''
        import os
        import adjoint as ad
        K = 1.0
        if os.environ.get("ADJ_TEST_REBIND"):
            REBIND = [("K", 3.0)]
        else:
            K = 3.0

        @ad.func
        def f(v: float) -> float:
            return K * v * v

        @ad.kernel
        def other(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = f(x[i])

        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = f(x[i])
        '''
    write(tmp_path, {"wk_kernels.py": kernels})
    cache = tmp_path / "cache"
    rebound = run_child(tmp_path, cache, "python", {"ADJ_TEST_REBIND": "1"})
    check(rebound, 3.0 * X * X, 6.0 * X)
    fresh = run_child(tmp_path, cache, "python")
    check(fresh, 3.0 * X * X, 6.0 * X)


# ---- the key itself (no process, no compile) -------------------------------------------

def key(kernel, target="cpu"):
    return module_key([kernel], [], kernel, target)


def test_the_key_hashes_every_folder_of_the_transformer(tmp_path):
    """The key hashes the transformer's own source (``inputs.environment``): every .py file
    of the package, in every folder (frontend/, derive/, optimize/, emit/, rules/, build/,
    ...), wherever inputs.py itself lives, so that a change to any pass gives new keys."""
    root = os.path.dirname(os.path.abspath(ad.__file__))
    assert inputs.SOURCE_DIR == root
    hashed = {os.path.relpath(p, root) for p in inputs.source_files(root)}
    every = {os.path.relpath(os.path.join(d, f), root)
             for d, _, files in os.walk(root) for f in files if f.endswith(".py")}
    assert hashed == every
    assert {p.module for p in passes.PASSES} <= hashed      # each pass's module ("derive/ssa.py")
    folders = {h.split(os.sep)[0] for h in hashed if os.sep in h}
    assert {"frontend", "derive", "optimize", "emit", "rules", "build", "runtime"} <= folders
    copy = tmp_path / "adjoint"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = inputs._files_digest(str(copy))
    for rel in ("frontend/parse.py", "derive/reverse.py", "optimize/store.py", "emit/module.py"):
        path = copy / rel
        path.write_text(path.read_text() + "\n# changed\n")
        after = inputs._files_digest(str(copy))
        assert after != before, f"a change to {rel} leaves the key as it was"
        before = after


def test_the_key_is_stable_and_names_the_target(kernel_module):
    m = kernel_module('''
        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = x[i] * 2.0
        ''')
    assert key(m.k) is not None and key(m.k) == key(m.k)
    assert key(m.k, "cuda") != key(m.k, "cpu")


def test_the_key_follows_options_set_after_decoration(kernel_module):
    m = kernel_module('''
        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = x[i] * 2.0
        ''')
    seen = {key(m.k)}
    m.k.loop_capacity = 16
    seen.add(key(m.k))
    m.k.enable_backward = False
    seen.add(key(m.k))
    m.k.bounds_check = False
    seen.add(key(m.k))
    assert len(seen) == 4


def test_the_key_follows_a_struct_layout_and_a_vector_annotation(kernel_module):
    m = kernel_module('''
        @ad.struct
        class Body:
            x: ad.array(dtype=float)
            m: float

        @ad.kernel
        def k(b: Body, v: ad.array(dtype=ad.vec3), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = b.x[i] * b.m + v[i].x
        ''')
    before = key(m.k)
    m.Body.__adjoint_struct__ = type(m.Body.__adjoint_struct__)(
        "Body", (("x", ad.array(dtype=float)), ("m", np.dtype(np.float32))))
    after_struct = key(m.k)
    m.k.pyfunc.__annotations__["v"] = ad.array(dtype=ad.vec3f)
    after_vec = key(m.k)
    assert len({before, after_struct, after_vec}) == 3


def test_the_key_follows_a_custom_jvp_and_a_func_rebound(kernel_module):
    m = kernel_module('''
        @ad.func
        def f(v: float) -> float:
            return v * v

        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = f(x[i])
        ''')
    plain = key(m.k)

    @ad.func_jvp(m.f)
    def f_jvp(v: float, dot_v: float):
        return v * v, 2.0 * v * dot_v
    with_jvp = key(m.k)
    assert with_jvp not in (None, plain)
    m.f = ad.func(m.f.pyfunc)       # another func object of the same source: same text
    assert key(m.k) == plain


def test_no_key_where_the_inputs_cannot_be_told_apart(kernel_module):
    """Two funcs of one name, or a kernel without source: transform (and report) instead."""
    m = kernel_module('''
        @ad.func
        def f(v: float) -> float:
            return v * v

        def make():
            @ad.func
            def f(v: float) -> float:
                return v + v
            return f

        g = make()

        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = f(x[i]) + g(x[i])
        ''')
    assert key(m.k) is None
    scope = {"ad": ad}
    exec("def nosrc(x: ad.array(dtype=float)):\n    i = ad.tid()\n", scope)
    assert key(ad.kernel(scope["nosrc"])) is None


@pytest.mark.parametrize("entry", [b"adjoint_gen_k_0000000000000000\n",     # no such module
                                   b"adjoint_gen_other_%s\n",              # another's name
                                   b"\xff\xfe garbage", b""])
def test_a_damaged_index_entry_is_ignored(backend, kernel_module, tmp_path, monkeypatch, entry):
    """An entry of keys/ that names no module, a module of another kernel, or is not
    text: the module is generated again (right values, 2 x^2 and 4 x) and the entry
    rewritten."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ADJOINT_CACHE_DIR", str(cache))
    m = kernel_module('''
        @ad.kernel
        def k(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = 2.0 * x[i] * x[i]
        ''')
    device = "cuda" if backend == "cuda" else "cpu"

    def run():
        x = ad.array(X, requires_grad=True, device=device)
        y = ad.zeros(3, requires_grad=True, device=device)
        tape = ad.Tape()
        with tape:
            ad.launch(m.k, 3, inputs=[x], outputs=[y])
        tape.backward(grads={y: np.ones(3)})
        np.testing.assert_allclose(y.numpy(), 2.0 * X * X, rtol=1e-12)
        np.testing.assert_allclose(x.grad.numpy(), 4.0 * X, rtol=1e-12)

    run()
    (index,) = (cache / "keys").iterdir()
    good = index.read_bytes()
    stem = good.decode().strip()
    index.write_bytes(entry.replace(b"%s", stem.rsplit("_", 1)[1].encode()))
    for module in m.k.modules.values():
        sys.modules.pop(module.__name__, None)
    m.k.modules.clear()
    m.k._specs.clear()
    run()
    assert index.read_bytes() == good
