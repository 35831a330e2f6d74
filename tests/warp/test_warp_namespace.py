"""``import adjoint.warp as wp``: NVIDIA Warp's namespace with Warp's meanings.

- a kernel written as Warp code (``float`` annotations, ``wp.array(dtype=wp.vec3)``,
  ``wp.tid()``, a ``@wp.func``, ``wp.launch``, ``wp.Tape``, ``tape.backward(loss=l)``) runs
  on every backend in float32; the same source under ``import adjoint as wp`` runs in
  float64 and matches central differences, and the float32 gradient matches that to
  float32 rounding; with NVIDIA Warp installed, the same source on Warp's CPU device gives
  the same gradient (skipped without Warp);
- ``float`` is float32 under ``wp`` and float64 under ``ad``, in one process (parameters,
  arrays, structs, funcs);
- Warp's ``%`` (C's: the sign of the dividend), int ``/`` (truncating) and float ``//``
  (``floor(x / y)``) against values Warp 1.19's CPU device printed, and ``ad``'s Python
  meanings beside them; the gradient of ``%``;
- the runtime calls of a Warp ``__main__`` (init, devices, timers, config, module
  options, memory pools, constants, optimizers);
- every refused name raises ``WarpNameError`` naming the feature and the line, inside a
  kernel the transformer names the kernel's line; the table of docs/from-warp.md covers
  every name;
- ``sys.modules["warp"] = adjoint.warp`` runs a Warp import, and examples/warp_trajectory.py
  runs, checks its gradient and lowers its loss.
"""
import io
import os
import subprocess
import sys
import textwrap
from contextlib import redirect_stdout

import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp
from adjoint.warp import names
from tests.conftest import central_fd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Warp code, run as it is under three namespaces bound to ``wp``
PROGRAM = '''
@wp.func
def bond(a: wp.vec3, b: wp.vec3, rest: float) -> float:
    d = wp.length(a - b) - rest
    return d * d


@wp.kernel
def energy(x: wp.array(dtype=wp.vec3), w: wp.array(dtype=float), rest: float,
           e: wp.array(dtype=float)):
    i = wp.tid()
    j = (i + 1) % x.shape[0]
    s = w[i] * bond(x[i], x[j], rest) + wp.sin(x[i][0]) * wp.dot(x[i], x[j]) / float(i + 2)
    wp.atomic_add(e, 0, s)


def run(x0, w0, rest=0.7):
    """(energy, x.grad, w.grad) as numpy arrays."""
    x = wp.array(x0, dtype=wp.vec3, requires_grad=True)
    w = wp.array(w0, dtype=float, requires_grad=True)
    e = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(energy, dim=len(w0), inputs=[x, w, rest], outputs=[e])
    tape.backward(loss=e)
    return e.numpy().copy(), x.grad.numpy().copy(), w.grad.numpy().copy()
'''

RNG = np.random.default_rng(38)
X0 = RNG.normal(size=(6, 3))
W0 = RNG.uniform(0.5, 1.5, size=6)


def program(kernel_module, header):
    return kernel_module(header + "\n" + PROGRAM)


@pytest.fixture(params=["python", "numba"])
def cpu_backend(request):
    with ad.backend_scope(request.param):
        yield request.param


def test_warp_program_runs_in_float32_and_matches_differences(cpu_backend, kernel_module):
    warp_mod = program(kernel_module, "import adjoint.warp as wp")
    ad_mod = program(kernel_module, "import adjoint as wp")
    e32, gx32, gw32 = warp_mod.run(X0, W0)
    e64, gx64, gw64 = ad_mod.run(X0, W0)
    assert e32.dtype == gx32.dtype == gw32.dtype == np.float32
    assert e64.dtype == gx64.dtype == gw64.dtype == np.float64
    assert [p.dtype for p in warp_mod.energy.spec.params] == ["float32"] * 4
    assert [p.dtype for p in ad_mod.energy.spec.params] == ["float64"] * 4

    # float64: the tape's gradient is the loss's central differences
    def loss_x(x):
        return ad_mod.run(x.reshape(X0.shape), W0)[0][0]

    def loss_w(w):
        return ad_mod.run(X0, w)[0][0]
    np.testing.assert_allclose(gx64, central_fd(loss_x, X0.reshape(-1)).reshape(X0.shape),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gw64, central_fd(loss_w, W0), rtol=1e-6, atol=1e-8)
    # float32: the same numbers to float32 rounding
    np.testing.assert_allclose(e32, e64, rtol=1e-5)
    np.testing.assert_allclose(gx32, gx64, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gw32, gw64, rtol=1e-4, atol=1e-5)


def _real_warp():
    warp = pytest.importorskip("warp")
    if warp is wp or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    warp.config.quiet = True
    return warp


def test_the_same_program_on_nvidia_warp_gives_the_same_gradient(kernel_module):
    _real_warp()
    real = program(kernel_module, "import warp as wp\nwp.config.quiet = True")
    ours = program(kernel_module, "import adjoint.warp as wp")
    for got, want in zip(ours.run(X0, W0), real.run(X0, W0)):
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


# -- float is float32 under wp, float64 under ad --------------------------------------

DTYPES = '''
@{ns}.struct
class Body:
    m: float
    n: int


@{ns}.func
def twice(v: float) -> float:
    return v * 2.0


@{ns}.kernel
def k(a: {ns}.array(dtype=float), s: float, b: Body, v: {ns}.vec3,
      out: {ns}.array(dtype=float)):
    i = {ns}.tid()
    out[i] = twice(a[i] * s) + b.m + v[0]
'''


def test_float_is_float32_under_wp_and_float64_under_ad(kernel_module):
    w = kernel_module("import adjoint.warp as wp\n" + DTYPES.format(ns="wp"))
    a = kernel_module(DTYPES.format(ns="ad"))
    assert [(p.name, p.dtype) for p in w.k.spec.params] == [
        ("a", "float32"), ("s", "float32"), ("b_m", "float32"), ("b_n", "int32"),
        ("v", "float32"), ("out", "float32")]
    assert [(p.name, p.dtype) for p in a.k.spec.params] == [
        ("a", "float64"), ("s", "float64"), ("b_m", "float64"), ("b_n", "int64"),
        ("v", "float64"), ("out", "float64")]
    assert wp.vec3 is ad.vec3f and ad.vec3 is ad.vec3d and wp.mat33 is ad.mat33f
    assert wp.quat is ad.quatf and wp.transform is ad.transformf
    assert wp.array(dtype=float).dtype == np.float32 and ad.array(dtype=float).dtype == np.float64
    assert wp.zeros(2).dtype == np.float32 and ad.zeros(2).dtype == np.float64
    assert wp.zeros(2, dtype=int).dtype == np.int32
    for mod, dt in ((w, np.float32), (a, np.float64)):
        ns = wp if mod is w else ad
        out = ns.zeros(3, dtype=float)
        ad.launch(mod.k, 3, inputs=[ns.ones(3, dtype=float), 1.5, mod.Body(m=0.25, n=1),
                                    ns.vec3(1.0, 2.0, 3.0)], outputs=[out])
        assert out.numpy().dtype == dt
        np.testing.assert_array_equal(out.numpy(), [4.25] * 3)


def test_array_annotations_and_constructors():
    assert wp.array[float] == ad.array(dtype=ad.float32)
    assert wp.array2d[float] == ad.array(dtype=ad.float32, ndim=2)
    assert wp.array3d(dtype=int) == ad.array(dtype=ad.int32, ndim=3)
    assert wp.array(dtype=wp.vec3) == ad.array(dtype=ad.vec3f)
    assert wp.array(dtype=float, ndim=2) == ad.array(dtype=ad.float32, ndim=2)
    a = wp.array([1.0, 2.0], dtype=float, requires_grad=True)
    assert isinstance(a, wp.array) and isinstance(a, ad.Array) and a.requires_grad
    assert wp.array([1.0, 2.0]).dtype == np.float64           # inferred, as Warp does
    # Warp's argument order: zeros(shape, dtype, device, requires_grad)
    z = wp.zeros(3, float, "cpu", True)
    assert z.requires_grad and z.device == "cpu" and z.dtype == np.float32
    assert wp.zeros((2, 4), dtype=wp.vec3).shape == (2, 4, 3)
    assert wp.full(3, 2).dtype == np.int32 and wp.full(3, 2.0).dtype == np.float32
    assert wp.ones_like(z).requires_grad and wp.empty_like(z).shape == (3,)
    np.testing.assert_array_equal(wp.full_like(z, 5.0).numpy(), [5.0] * 3)
    assert wp.from_numpy(np.ones((2, 3)), dtype=wp.vec3).shape == (2, 3)
    # clone and copy are differentiable on a tape; copy's count=0 is everything
    src = wp.array([1.0, 2.0, 3.0], dtype=float, requires_grad=True)
    dst = wp.zeros(3, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        c = wp.clone(src)
        wp.copy(dst, c)
    np.testing.assert_array_equal(dst.numpy(), [1.0, 2.0, 3.0])
    tape.backward(grads={dst: np.array([1.0, 2.0, 3.0], np.float32)})
    np.testing.assert_array_equal(src.grad.numpy(), [1.0, 2.0, 3.0])


# -- Warp's / // % --------------------------------------------------------------------

OPS = '''
@{ns}.kernel
def ops(a: {ns}.array(dtype=float), b: {ns}.array(dtype=float), ia: {ns}.array(dtype=int),
        ib: {ns}.array(dtype=int), fm: {ns}.array(dtype=float), fd: {ns}.array(dtype=float),
        im: {ns}.array(dtype=int), idv: {ns}.array(dtype=int), itd: {ns}.array(dtype=float)):
    i = {ns}.tid()
    fm[i] = a[i] % b[i]
    fd[i] = a[i] // b[i]
    im[i] = ia[i] % ib[i]
    idv[i] = ia[i] // ib[i]
    q = ia[i] / ib[i]
    itd[i] = float(q)
'''
A = [-7.5, 7.5, -7.5, 7.5, 1.0]
B = [2.0, -2.0, -2.0, 2.0, 0.1]
IA = [-7, 7, -7, 7, -9]
IB = [2, -2, -2, 2, 4]
# printed by NVIDIA Warp 1.19 on its CPU device for this kernel
WARP_SAYS = {"fm": [-1.5, 1.5, -1.5, 1.5, 0.09999999], "fd": [-4.0, -4.0, 3.0, 3.0, 10.0],
             "im": [-1, 1, -1, 1, -1], "idv": [-4, -4, 3, 3, -3],
             "itd": [-3.0, -3.0, 3.0, 3.0, -2.0]}


def _ops(ns, mod):
    a, b = ns.array(A, dtype=float), ns.array(B, dtype=float)
    ia, ib = ns.array(IA, dtype=int), ns.array(IB, dtype=int)
    outs = {n: ns.zeros(5, dtype=int if n in ("im", "idv") else float)
            for n in ("fm", "fd", "im", "idv", "itd")}
    ad.launch(mod.ops, 5, inputs=[a, b, ia, ib], outputs=list(outs.values()))
    return {n: o.numpy() for n, o in outs.items()}


def test_warp_operators_mean_cs_and_ad_operators_pythons(backend, kernel_module):
    got = _ops(wp, kernel_module("import adjoint.warp as wp\n" + OPS.format(ns="wp")))
    for n, want in WARP_SAYS.items():
        np.testing.assert_allclose(got[n], want, rtol=1e-7, err_msg=n)
    assert got["fm"].dtype == np.float32 and got["im"].dtype == np.int32
    py = _ops(ad, kernel_module(OPS.format(ns="ad")))
    np.testing.assert_allclose(py["fm"], [a % b for a, b in zip(A, B)], rtol=1e-12)
    np.testing.assert_array_equal(py["fd"], [a // b for a, b in zip(A, B)])
    np.testing.assert_array_equal(py["im"], [a % b for a, b in zip(IA, IB)])
    np.testing.assert_array_equal(py["idv"], [a // b for a, b in zip(IA, IB)])
    np.testing.assert_array_equal(py["itd"], [a / b for a, b in zip(IA, IB)])


def test_warp_operators_from_python_and_by_zero():
    assert (wp.mod(-7, 2), wp.mod(7, -2), wp.div(-7, 2), wp.floordiv(-7, 2)) == (-1, 1, -3, -4)
    assert wp.mod(-7.5, 2.0) == -1.5 and wp.floordiv(1.0, 0.1) == 10.0 and 1.0 // 0.1 == 9.0
    assert (wp.div(5, 0), wp.mod(5, 0), wp.floordiv(5, 0)) == (0, 0, 0)
    assert np.isnan(wp.mod(1.0, 0.0)) and wp.div(1.0, 0.0) == np.inf
    assert wp.div(-2 ** 63, -1) == 0 and wp.mod(-2 ** 63, -1) == 0
    assert wp.mod is ad.trunc_mod and wp.div is ad.trunc_div and wp.floordiv is ad.div_floor


MOD_GRAD = '''
@wp.kernel
def wrap(x: wp.array(dtype=float), y: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = (x[i] % y[i]) * x[i]
'''


def test_warp_mod_gradient(backend, kernel_module):
    mod = kernel_module("import adjoint.warp as wp\n" + MOD_GRAD)
    x0, y0 = np.array([-7.3, 7.3, -2.2, 0.4]), np.array([2.0, -2.0, 1.5, 0.3])
    x = wp.array(x0, dtype=float, requires_grad=True)
    y = wp.array(y0, dtype=float, requires_grad=True)
    out = wp.zeros(4, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(mod.wrap, 4, inputs=[x, y], outputs=[out])
    tape.backward(grads={out: np.ones(4, np.float32)})
    z = np.fmod(x0, y0)
    np.testing.assert_allclose(out.numpy(), z * x0, rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), z + x0, rtol=1e-5)      # d/dx: 1 * x + z
    np.testing.assert_allclose(y.grad.numpy(), -np.trunc(x0 / y0) * x0, rtol=1e-5)


# -- the runtime calls of a Warp __main__ ----------------------------------------------

def test_runtime_calls_answer_as_warps_cpu_device():
    assert wp.init() is None
    d = wp.get_device()
    assert (d.alias, d.is_cpu, d.is_cuda, str(d)) == ("cpu", True, False, "cpu")
    assert wp.get_device("cpu") == "cpu" and wp.is_cpu_available()
    assert wp.get_devices()[0].alias == "cpu"
    with wp.ScopedDevice("cpu") as scoped:
        assert scoped.alias == "cpu" and wp.zeros(1).device == "cpu"
    assert wp.synchronize() is None and wp.synchronize_device() is None
    assert wp.synchronize_device("cpu") is None
    buf, times = io.StringIO(), {}
    with redirect_stdout(buf):
        with wp.ScopedTimer("outer", dict=times) as outer:
            with wp.ScopedTimer("inner"):
                sum(range(10000))
        with wp.ScopedTimer("quiet", print=False):
            pass
        with wp.ScopedTimer("off", active=False) as off:
            pass
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("  inner took ") and lines[1].startswith("outer took ")
    assert lines[1].endswith(" ms") and len(lines) == 2 and off.elapsed == 0.0
    assert outer.elapsed > 0 and times["outer"] == [outer.elapsed]
    assert wp.constant(7) == 7 and wp.pi == np.pi and wp.e == np.e and wp.inf == np.inf
    assert wp.PI == wp.pi and wp.half_pi == np.pi / 2


def test_config_and_module_options(kernel_module):
    wp.config.mode = "debug"
    wp.config.verbose = True
    assert (wp.config.mode, wp.config.verbose) == ("debug", True)
    old = ad.config.verify_fp
    try:
        wp.config.verify_fp = True
        assert ad.config.verify_fp is True and wp.config.verify_fp is True
    finally:
        wp.config.verify_fp = old
    mod = kernel_module('''
        import adjoint.warp as wp
        wp.set_module_options({"enable_backward": False})

        @wp.kernel
        def k(x: wp.array(dtype=float)):
            x[wp.tid()] = 1.0

        options = wp.get_module_options()
        ''')
    assert mod.k.enable_backward is False and mod.options["enable_backward"] is False
    assert wp.get_module_options()["enable_backward"] is True      # (this module's)


def test_memory_pool_queries_answer_as_warps_cpu_device():
    assert not wp.is_mempool_supported("cpu") and not wp.is_mempool_enabled("cpu")
    assert not wp.is_mempool_access_supported("cpu", "cpu")
    assert wp.set_mempool_enabled("cpu", False) is None
    for call in (lambda: wp.get_mempool_release_threshold("cpu"),
                 lambda: wp.get_mempool_used_mem_current("cpu"),
                 lambda: wp.set_mempool_enabled("cpu", True)):
        with pytest.raises(ValueError, match="only supported on CUDA devices"):
            call()


def test_optimizers_step_as_adjoints():
    g = np.array([0.5, -1.0, 2.0])
    for ours, theirs in ((lambda p: wp.optim.Adam([p], lr=0.1),
                          lambda p: ad.optim.Adam([p], lr=0.1)),
                         (lambda p: wp.optim.SGD([p], lr=0.1, momentum=0.9),
                          lambda p: ad.optim.SGD([p], lr=0.1, momentum=0.9))):
        p1, p2 = wp.array(np.ones(3), dtype=float), wp.array(np.ones(3), dtype=float)
        o1, o2 = ours(p1), theirs(p2)
        for _ in range(3):
            o1.step([wp.array(g, dtype=float)])
            o2.step([wp.array(g, dtype=float)])
        np.testing.assert_array_equal(p1.numpy(), p2.numpy())
        assert not np.array_equal(p1.numpy(), np.ones(3))
    opt = wp.optim.Adam(lr=0.1)
    opt.set_params([p1])
    opt.reset_internal_state()
    with pytest.raises(wp.WarpFeatureError, match="nesterov"):
        wp.optim.SGD([p1], nesterov=True)


# -- what is refused --------------------------------------------------------------------

REFUSED = [n for n in names.NAMES if n not in vars(wp)]


@pytest.mark.parametrize("name", REFUSED)
def test_every_refused_name_raises_naming_the_feature_and_the_line(name):
    with pytest.raises(wp.WarpNameError) as info:
        getattr(wp, name)
    msg = str(info.value)
    assert isinstance(info.value, ad.AdjointError)
    assert msg.startswith(f"wp.{name} is not supported by adjoint.warp: ")
    assert "test_warp_namespace.py:" in msg and "getattr(wp, name)" in msg
    assert not hasattr(wp, name)


def test_refusals_and_unknown_names(kernel_module):
    with pytest.raises(wp.WarpNameError, match=r"CUDA graph capture.*test_warp_namespace.py"):
        wp.capture_begin()
    with pytest.raises(AttributeError, match=r"did you mean wp\.normalize") as info:
        wp.normalise
    assert not isinstance(info.value, ad.AdjointError)
    mod = kernel_module('''
        import adjoint.warp as wp

        @wp.kernel
        def k(x: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = wp.tile_load(x, 0)
        ''')
    with pytest.raises(ad.TransformError,
                       match=r"kernels_\d+\.py:11:12: wp\.tile_load is not supported.*tiles"):
        wp.launch(mod.k, 3, inputs=[wp.zeros(3)])
    with pytest.raises(wp.WarpFeatureError, match=r"warp\.sim .*test_warp_namespace.py"):
        import adjoint.warp.sim  # noqa: F401
    with pytest.raises(wp.WarpFeatureError, match="record_cmd"):
        wp.launch(mod.k, 3, inputs=[wp.zeros(3)], record_cmd=True)
    with pytest.raises(wp.WarpFeatureError, match="strides"):
        wp.array(np.ones(3), strides=(4,))


def test_the_table_covers_every_name_once():
    assert len(set(names.NAMES)) == len(names.NAMES)
    rows = wp.name_table()
    assert [r[1] for r in rows] == list(names.NAMES)
    supported = {r[1] for r in rows if r[2] == "supported"}
    assert supported == set(wp.__all__) and supported == {n for n in names.NAMES if n in vars(wp)}
    assert {"kernel", "func", "func_grad", "struct", "tid", "array", "launch", "Tape", "vec3",
            "ScopedTimer", "config", "optim", "mod"} <= supported
    assert {"Mesh", "capture_begin", "tile_load", "func_native", "HashGrid"} <= \
        {r[1] for r in rows if r[2] == "refused"}
    table = wp.markdown_table()
    for n in names.NAMES:
        assert f"`{n}`" in table, n
    with open(os.path.join(ROOT, "docs", "from-warp.md"), encoding="utf-8") as fh:
        assert "<!-- warp table -->" in fh.read().splitlines()
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    try:
        import gen_stages
    finally:
        sys.path.pop(0)
    assert gen_stages.expand("<!-- warp table -->") == table


# -- whole programs -----------------------------------------------------------------------

ALIASED = '''
import sys
import numpy as np
import adjoint.warp
sys.modules["warp"] = adjoint.warp
import warp as wp
import warp.optim


@wp.kernel
def square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


wp.init()
x = wp.array([1.0, 2.0, 3.0], dtype=float, requires_grad=True)
y = wp.zeros(3, dtype=float, requires_grad=True)
tape = wp.Tape()
with tape:
    wp.launch(square, dim=3, inputs=[x], outputs=[y])
tape.backward(grads={y: wp.ones(3, dtype=float)})
warp.optim.SGD([x], lr=0.5).step([x.grad])
print(x.dtype, x.numpy().tolist())
'''


def test_a_program_importing_warp_runs_on_adjoint(tmp_path):
    script = tmp_path / "aliased.py"
    script.write_text(ALIASED)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "float32 [0.0, 0.0, 0.0]"


def test_the_warp_trajectory_example_checks_its_gradient_and_improves(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "warp_trajectory.py"),
                        "--iters", "6", "--steps", "30"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    check, result = r.stdout.strip().splitlines()
    assert check.startswith("gradient check:") and float(check.split()[-1]) < 2e-2
    first, last = (float(v) for v in result.split(": ")[1].split(";")[0].split(" -> "))
    assert last < first
