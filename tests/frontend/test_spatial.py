"""Spatial vectors and matrices (Warp's Featherstone conventions), and vectors and matrices
of any size (adjoint/runtime/vectypes.py, adjoint/frontend/vecops.py and vecframes.py).

One table, ``CASES``: each row is an expression of a kernel's loaded values ``x, y`` (of
the argument types it names), the type of its result, and a NumPy reference written here
from the textbook definitions (Featherstone's motion and force cross products as 6x6
matrices, Plücker transforms from a rotation matrix), not from adjoint's code. Each row
becomes one kernel ``out[i] = <expression>``; per backend (python, numba, the CUDA
simulator):

- float64: the value matches the reference, the tape's Jacobian and the JVP match central
  differences;
- float32 (``ad.spatial_vectorf``, ...): values and gradients match the float64 ones to
  float32 rounding;
- with NVIDIA Warp installed (skipped otherwise), the rows Warp has run as Warp code under
  ``import warp as wp`` on Warp's CPU device and under ``import adjoint.warp as wp``: the
  same values and gradients (float32).

Then the types themselves: ``ad.vector``/``ad.matrix`` (Warp's generic types) in plain
Python, the names of the float32 and float64 variants, and the errors for what a size
does not allow.
"""
from dataclasses import dataclass

import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from adjoint.autograd import gradcheck
from tests.conftest import central_fd

N = 3


def _skew(v):
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def _crm(s):
    """Featherstone's motion cross-product matrix: s x (a twist)."""
    w, v = _skew(s[:3]), _skew(s[3:])
    return np.block([[w, np.zeros((3, 3))], [v, w]])


def _crf(s):
    """Featherstone's force cross-product matrix: s x* (a wrench) = -crm(s)^T."""
    return -_crm(s).T


def _rot(q):
    """The rotation matrix of the unit quaternion q = (x, y, z, w)."""
    v, w = q[:3], q[3]
    return (w * w - v @ v) * np.eye(3) + 2.0 * np.outer(v, v) + 2.0 * w * _skew(v)


def _plucker(t):
    """The 6x6 motion transform of t = (p, q): a twist (w, v) -> (R w, p x R w + R v)."""
    R = _rot(t[3:])
    return np.block([[R, np.zeros((3, 3))], [_skew(t[:3]) @ R, R]])


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple         # the types of x, y: keys of TYPES
    result: str
    expr: str           # written with ad.; Warp's rows run with wp. in its place
    ref: object         # NumPy reference of one thread's x, y
    warp: bool = True   # a row Warp runs too


CASES = [
    Case("spatial_vector_halves", ("vec3", "vec3"), "vec6", "ad.spatial_vector(x, y)",
         lambda x, y: np.concatenate([x, y])),
    Case("spatial_vector_scalars", ("vec3", "vec3"), "vec6",
         "ad.spatial_vector(x[0], x[1], x[2], 2.0 * y[0], y[1], y[2] * x[0])",
         lambda x, y: np.array([x[0], x[1], x[2], 2 * y[0], y[1], y[2] * x[0]])),
    Case("spatial_top", ("vec6",), "vec3", "ad.spatial_top(x) * 2.0", lambda x: 2 * x[:3]),
    Case("spatial_bottom", ("vec6",), "vec3", "ad.spatial_bottom(x)", lambda x: x[3:]),
    Case("spatial_dot", ("vec6", "vec6"), "float", "ad.spatial_dot(x, y)", lambda x, y: x @ y),
    Case("spatial_cross", ("vec6", "vec6"), "vec6", "ad.spatial_cross(x, y)",
         lambda x, y: _crm(x) @ y),
    Case("spatial_cross_dual", ("vec6", "vec6"), "vec6", "ad.spatial_cross_dual(x, y)",
         lambda x, y: _crf(x) @ y),
    Case("spatial_adjoint", ("mat33", "mat33"), "mat66", "ad.spatial_adjoint(x, y)",
         lambda x, y: np.block([[x, np.zeros((3, 3))], [y, x]])),
    Case("transform_twist", ("transform", "vec6"), "vec6", "ad.transform_twist(x, y)",
         lambda t, s: _plucker(t) @ s),
    Case("transform_wrench", ("transform", "vec6"), "vec6", "ad.transform_wrench(x, y)",
         lambda t, s: np.linalg.inv(_plucker(t)).T @ s),
    Case("velocity_at_point", ("vec6", "vec3"), "vec3", "ad.velocity_at_point(x, y)",
         lambda s, r: s[3:] + np.cross(s[:3], r)),
    Case("spatial_matrix_times_vector", ("mat66", "vec6"), "vec6", "x * y",
         lambda m, s: m @ s),
    Case("spatial_matrix_product", ("mat66", "mat66"), "mat66", "ad.transpose(x) @ y + x",
         lambda a, b: a.T @ b + a),
    Case("spatial_length", ("vec6",), "float", "ad.length(x) + ad.length_sq(x)",
         lambda x: np.linalg.norm(x) + x @ x),
    Case("spatial_normalize", ("vec6",), "vec6", "ad.normalize(x) - x * 0.5",
         lambda x: x / np.linalg.norm(x) - 0.5 * x),
    Case("spatial_identity", ("vec6",), "vec6", "ad.identity(n=6, dtype=float) * x * 2.0",
         lambda x: 2 * x),
    Case("spatial_components", ("vec6", "vec6"), "vec6",
         "ad.spatial_vector(x[5] * y[0], x[4], x[3], y[2], x[1] + y[4], -x[0])",
         lambda x, y: np.array([x[5] * y[0], x[4], x[3], y[2], x[1] + y[4], -x[0]])),
    # vectors and matrices of other sizes
    Case("vec5_dot_length", ("vec5", "vec5"), "float", "ad.dot(x, y) * ad.length(x) + y[4]",
         lambda x, y: (x @ y) * np.linalg.norm(x) + y[4], warp=False),
    Case("mat23_times_vec3", ("mat23", "vec3"), "vec2", "x * y", lambda m, v: m @ v,
         warp=False),
    Case("mat23_products", ("mat23", "mat23"), "mat33", "ad.transpose(x) * y",
         lambda a, b: a.T @ b, warp=False),
    Case("vec2_times_mat23", ("vec2", "mat23"), "vec3", "x * y", lambda v, m: v @ m,
         warp=False),
    Case("outer_of_two_sizes", ("vec2", "vec3"), "mat23", "ad.outer(x, y)", np.outer),
    Case("matrix_from_rows", ("vec3", "vec3"), "mat23", "ad.matrix_from_rows(x, y * 2.0)",
         lambda x, y: np.stack([x, 2 * y])),
    Case("matrix_from_cols", ("vec3", "vec3"), "mat32", "ad.matrix_from_cols(x, y)",
         lambda x, y: np.stack([x, y], axis=1)),
    Case("vector_of_components", ("vec3", "vec3"), "vec5",
         "ad.vector(x[0], y[1], x[2] * y[2], 1.0, y[0], length=5, dtype=float)",
         lambda x, y: np.array([x[0], y[1], x[2] * y[2], 1.0, y[0]]), warp=False),
    Case("matrix_of_components", ("vec3", "vec3"), "mat23",
         "ad.matrix(x[0], x[1], x[2], y[0], y[1], y[2], shape=(2, 3), dtype=float)",
         lambda x, y: np.stack([x, y]), warp=False),
]

# type key -> (float64 spelling, float32 spelling, Warp's spelling, shape)
TYPES = {
    "float": ("float", "ad.float32", "float", ()),
    "vec2": ("ad.vec2", "ad.vec2f", "wp.vec2", (2,)),
    "vec3": ("ad.vec3", "ad.vec3f", "wp.vec3", (3,)),
    "vec5": ("ad.vector(length=5, dtype=float)", "ad.vector(length=5, dtype=ad.float32)",
             None, (5,)),
    "vec6": ("ad.spatial_vector", "ad.spatial_vectorf", "wp.spatial_vector", (6,)),
    "mat23": ("ad.matrix(shape=(2, 3), dtype=float)",
              "ad.matrix(shape=(2, 3), dtype=ad.float32)", "wp.types.matrix((2, 3), float)",
              (2, 3)),
    "mat32": ("ad.matrix(shape=(3, 2), dtype=float)",
              "ad.matrix(shape=(3, 2), dtype=ad.float32)", "wp.types.matrix((3, 2), float)",
              (3, 2)),
    "mat33": ("ad.mat33", "ad.mat33f", "wp.mat33", (3, 3)),
    "mat66": ("ad.spatial_matrix", "ad.spatial_matrixf", "wp.spatial_matrix", (6, 6)),
    "transform": ("ad.transform", "ad.transformf", "wp.transform", (7,)),
}

PRECISIONS = {"float64": 0, "float32": 1, "warp": 2}


def kernel_source(case, precision):
    """The kernel of one row, in ``precision`` ("float64", "float32": ad's types; "warp":
    Warp's spellings, for ``import warp as wp`` and ``import adjoint.warp as wp``)."""
    col = PRECISIONS[precision]
    ns = "wp" if precision == "warp" else "ad"
    names = "xyz"
    params = [f"a{k}: {ns}.array(dtype={TYPES[t][col]})" for k, t in enumerate(case.args)]
    params.append(f"out: {ns}.array(dtype={TYPES[case.result][col]})")
    loads = "".join(f"    {names[k]} = a{k}[i]\n" for k in range(len(case.args)))
    expr = case.expr.replace("ad.", "wp.") if ns == "wp" else case.expr
    return (f"@{ns}.kernel\ndef {case.name}({', '.join(params)}):\n    i = {ns}.tid()\n"
            f"{loads}    out[i] = {expr}\n\n\n")


def _inputs(case, rng):
    ins = []
    for t in case.args:
        x = rng.normal(size=(N,) + TYPES[t][3])
        if t == "transform":
            x[:, 3:] /= np.linalg.norm(x[:, 3:], axis=1, keepdims=True)
        ins.append(x)
    return ins


def _module(tmp_path_factory, precision, header="import adjoint as ad\n"):
    import importlib.util
    import sys
    folder = tmp_path_factory.mktemp("spatial")
    path = folder / f"spatial_kernels_{precision}_{len(_loaded)}.py"
    path.write_text(header + "\n\n" + "".join(kernel_source(c, precision) for c in CASES
                                              if precision != "warp" or c.warp))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    _loaded.append(mod)
    return mod


_loaded = []


@pytest.fixture(scope="module")
def kernels64(tmp_path_factory):
    return _module(tmp_path_factory, "float64")


@pytest.fixture(scope="module")
def kernels32(tmp_path_factory):
    return _module(tmp_path_factory, "float32")


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _run(kernel, case, ins, dtype=np.float64, seed=None):
    """(output, input gradients or None): one launch, and its tape's backward with ``seed``."""
    dev = _device()
    arrs = [ad.array(x.astype(dtype), requires_grad=True, device=dev) for x in ins]
    out = ad.zeros((N,) + TYPES[case.result][3], dtype=dtype, requires_grad=True, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, N, inputs=arrs, outputs=[out])
    if seed is None:
        return out.numpy().copy(), None
    tape.backward(grads={out: seed.astype(dtype)})
    return out.numpy().copy(), [a.grad.numpy().copy() for a in arrs]


def _ids(cases):
    return [c.name for c in cases]


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_values_and_both_derivatives_match_references_float64(backend, kernels64, case):
    kernel = getattr(kernels64, case.name)
    rng = np.random.default_rng(6)
    ins = _inputs(case, rng)
    got, _ = _run(kernel, case, ins)
    want = np.stack([case.ref(*(x[i] for x in ins)) for i in range(N)])
    np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-10, atol=1e-12)
    # reverse: the gradient of a random weighting of the outputs, against differences
    seed = rng.uniform(-1, 1, got.shape)
    _, grads = _run(kernel, case, ins, seed=seed)
    for k, g in enumerate(grads):
        def loss(v, k=k):
            return np.sum(seed * _run(kernel, case, ins[:k] + [v] + ins[k + 1:])[0])
        np.testing.assert_allclose(g, central_fd(loss, ins[k]), rtol=1e-6, atol=1e-7,
                                   err_msg=f"{case.name}: gradient of argument {k}")
    # forward: the JVP along a random direction, against differences
    dev = _device()
    dirs = [rng.uniform(-1, 1, x.shape) for x in ins]
    arrs = [ad.array(x, device=dev) for x in ins]
    dots = ad.launch(kernel, N, inputs=arrs, outputs=[ad.zeros(got.shape, device=dev)],
                     tangents={a: ad.array(d, device=dev) for a, d in zip(arrs, dirs)})
    h = 1e-6
    fd = (_run(kernel, case, [x + h * d for x, d in zip(ins, dirs)])[0] -
          _run(kernel, case, [x - h * d for x, d in zip(ins, dirs)])[0]) / (2 * h)
    np.testing.assert_allclose(dots["out"].numpy(), fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_float32_variants_match_float64(backend, kernels32, kernels64, case):
    rng = np.random.default_rng(7)
    ins = _inputs(case, rng)
    seed = rng.uniform(-1, 1, (N,) + TYPES[case.result][3])
    out32, g32 = _run(getattr(kernels32, case.name), case, ins, np.float32, seed)
    out64, g64 = _run(getattr(kernels64, case.name), case, ins, np.float64, seed)
    assert out32.dtype == np.float32 and all(g.dtype == np.float32 for g in g32)
    np.testing.assert_allclose(out32, out64, rtol=1e-5, atol=1e-5)
    for a, b in zip(g32, g64):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_gradcheck_of_a_twist_pipeline(backend, kernel_module):
    """A rigid body's step as warp.sim writes one: a body twist to the world frame, a
    wrench at an offset point, their spatial products, through an @ad.func."""
    m = kernel_module("""
    @ad.func
    def power(t: ad.transform, qd: ad.spatial_vector, f: ad.vec3, r: ad.vec3) -> float:
        twist = ad.transform_twist(t, qd)
        wrench = ad.spatial_vector(ad.cross(r, f), f)
        world = ad.transform_wrench(t, wrench)
        bias = ad.spatial_cross(twist, ad.spatial_cross_dual(twist, world))
        v = ad.velocity_at_point(twist, r)
        return ad.spatial_dot(twist, world) + ad.dot(v, f) + ad.length(bias)

    @ad.kernel
    def step(t: ad.array(dtype=ad.transform), qd: ad.array(dtype=ad.spatial_vector),
             f: ad.array(dtype=ad.vec3), r: ad.array(dtype=ad.vec3),
             out: ad.array(dtype=float)):
        i = ad.tid()
        out[i] = power(t[i], qd[i], f[i], r[i])
    """)
    rng = np.random.default_rng(8)
    t = rng.normal(size=(N, 7))
    t[:, 3:] /= np.linalg.norm(t[:, 3:], axis=1, keepdims=True)
    dev = _device()
    arrs = [ad.array(v, requires_grad=True, device=dev) for v in
            (t, rng.normal(size=(N, 6)), rng.normal(size=(N, 3)), rng.normal(size=(N, 3)))]
    assert gradcheck(m.step, N, arrs, [ad.zeros(N, requires_grad=True, device=dev)],
                     eps=1e-6, atol=1e-6, rtol=1e-5)
    # the func called from plain Python computes the same values with numpy
    out = ad.zeros(N, device=dev)
    ad.launch(m.step, N, inputs=arrs, outputs=[out])
    py = [m.power(*(a.numpy()[i] for a in arrs)) for i in range(N)]
    np.testing.assert_allclose(out.numpy(), py, rtol=1e-12)


# -- Warp itself ---------------------------------------------------------------------

WARP_CASES = [c for c in CASES if c.warp]


def _real_warp():
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    warp.config.quiet = True
    return warp


def _run_warp(wp, kernel, case, ins, seed):
    arrs = [wp.array(x.astype(np.float32), dtype=_warp_type(wp, t), requires_grad=True)
            for x, t in zip(ins, case.args)]
    out = wp.zeros(N, dtype=_warp_type(wp, case.result), requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, dim=N, inputs=arrs, outputs=[out])
    tape.backward(grads={out: wp.array(seed.astype(np.float32), dtype=_warp_type(
        wp, case.result))})
    return out.numpy().reshape(seed.shape), [a.grad.numpy().reshape(x.shape)
                                             for a, x in zip(arrs, ins)]


def _warp_type(wp, key):
    spelling = TYPES[key][2]
    return float if spelling == "float" else eval(spelling, {"wp": wp})


@pytest.fixture(scope="module")
def warp_kernels(tmp_path_factory):
    _real_warp()
    return (_module(tmp_path_factory, "warp", "import warp as wp\nwp.config.quiet = True\n"),
            _module(tmp_path_factory, "warp", "import adjoint.warp as wp\n"))


@pytest.mark.parametrize("case", WARP_CASES, ids=_ids(WARP_CASES))
def test_nvidia_warp_gives_the_same_values_and_gradients(warp_kernels, case):
    import warp
    real, ours = warp_kernels
    rng = np.random.default_rng(9)
    ins = _inputs(case, rng)
    seed = rng.uniform(-1, 1, (N,) + TYPES[case.result][3])
    want, want_grads = _run_warp(warp, getattr(real, case.name), case, ins, seed)
    got, grads = _run_warp(wp_ns, getattr(ours, case.name), case, ins, seed)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, want_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# -- the types -------------------------------------------------------------------------

def test_spatial_names_are_vec6_and_mat66_in_both_precisions():
    assert ad.spatial_vector is ad.vec6 is ad.spatial_vectord is ad.vector(length=6)
    assert ad.spatial_matrix is ad.mat66 is ad.matrix(shape=(6, 6), dtype=ad.float64)
    assert ad.spatial_vectorf is ad.vector(length=6, dtype=ad.float32) is ad.vec6f
    assert wp_ns.spatial_vector is ad.spatial_vectorf
    assert wp_ns.spatial_matrix is ad.spatial_matrixf
    assert wp_ns.vector(length=6, dtype=float) is ad.spatial_vectorf      # float: float32
    assert ad.vector(length=6, dtype=float) is ad.spatial_vector          # float: float64
    assert ad.matrix(shape=(2, 3)).shape == (2, 3)
    assert ad.matrix(shape=(12, 3)).comps[:2] == ("0_0", "0_1")
    assert ad.vec6.comps == ("0", "1", "2", "3", "4", "5")


def test_types_made_after_import_construct_values_in_kernels(backend, kernel_module):
    m = kernel_module("""
    VEC7 = ad.vector(length=7, dtype=float)
    MAT34 = ad.matrix(shape=(3, 4), dtype=float)

    @ad.kernel
    def later(x: ad.array(dtype=float), out: ad.array(dtype=VEC7), om: ad.array(dtype=MAT34)):
        i = ad.tid()
        v = VEC7(x[i], 2.0, 3.0, 4.0, 5.0, 6.0, x[i] * x[i])
        out[i] = v * 2.0
        om[i] = MAT34(x[i])
    """)
    dev = _device()
    x = ad.array(np.array([1.5, -0.5]), requires_grad=True, device=dev)
    out = ad.zeros(2, dtype=m.VEC7, requires_grad=True, device=dev)
    om = ad.zeros(2, dtype=m.MAT34, device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(m.later, 2, inputs=[x], outputs=[out, om])
    np.testing.assert_array_equal(out.numpy()[0], [3.0, 4, 6, 8, 10, 12, 4.5])
    np.testing.assert_array_equal(om.numpy()[1], np.full((3, 4), -0.5))
    seed = np.zeros((2, 7))
    seed[:, 0], seed[:, 6] = 1.0, 1.0
    tape.backward(grads={out: seed})
    np.testing.assert_allclose(x.grad.numpy(), 2.0 + 4.0 * np.array([1.5, -0.5]))


def test_constructors_in_plain_python():
    w, v = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    np.testing.assert_array_equal(ad.spatial_vector(w, v), np.arange(1.0, 7.0))
    np.testing.assert_array_equal(ad.spatial_vector(w=w, v=v), np.arange(1.0, 7.0))
    np.testing.assert_array_equal(ad.spatial_vector(*range(1, 7)), np.arange(1.0, 7.0))
    assert ad.spatial_vectorf().dtype == np.float32
    np.testing.assert_array_equal(ad.spatial_matrix(2.0), np.full((6, 6), 2.0))
    np.testing.assert_array_equal(ad.vector(1.0, 2.0, 3.0, 4.0, 5.0), np.arange(1.0, 6.0))
    assert ad.vector(1.0, 2.0, 3.0, 4.0, 5.0).dtype == np.float64
    assert wp_ns.vector(1.0, 2.0, 3.0, 4.0, 5.0).dtype == np.float32
    np.testing.assert_array_equal(ad.matrix(*range(6), shape=(2, 3)),
                                  np.arange(6.0).reshape(2, 3))
    a = ad.zeros(4, dtype=ad.spatial_vector)
    assert a.shape == (4, 6) and a.dtype == np.float64
    assert wp_ns.zeros(4, dtype=wp_ns.spatial_matrix).shape == (4, 6, 6)


@pytest.mark.parametrize("call, message", [
    (lambda: ad.spatial_vector(1.0, 2.0), "(w: vec3, v: vec3)"),
    (lambda: ad.vector(length=3, dtype=ad.int32), "hold float32 or float64"),
    (lambda: ad.vector(length=0), "positive integer"),
    (lambda: ad.matrix(shape=(2, 3, 4)), "(rows, columns)"),
    (lambda: ad.matrix(1.0, 2.0), "needs shape="),
])
def test_type_errors_in_plain_python(call, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


@pytest.mark.parametrize("expr, message", [
    ("ad.determinant(ad.spatial_matrix(1.0))", "square matrix of 2 to 4 rows"),
    ("ad.inverse(ad.matrix(shape=(2, 3), dtype=float))", "square matrix"),
    ("ad.trace(ad.matrix(shape=(2, 3), dtype=float))", "square matrix"),
    ("ad.spatial_top(ad.vec3(1.0))", "takes a vec6"),
    ("ad.spatial_cross(ad.spatial_vector(), ad.vec3())", "takes a vec6"),
    ("ad.spatial_adjoint(ad.mat22(), ad.mat33())", "two mat33"),
    ("ad.vector(1.0, 2.0, length=3, dtype=float)", "takes 3 components, not 2"),
    ("ad.vector(length=3, dtype=ad.int32)", "hold floats"),
    ("ad.matrix(ad.vec3(), ad.vec3(), shape=(2, 3))", "not made from vectors"),
    ("ad.spatial_vector(1.0)[6]", "out of range"),
    ("ad.spatial_vector(1.0).x", "no component '.x'"),
    ("ad.matrix(shape=(2, 3), dtype=float) * ad.vec2()", "sizes do not match"),
])
def test_kernel_errors_name_the_line(kernel_module, expr, message):
    m = kernel_module(f"""
    @ad.kernel
    def bad(out: ad.array(dtype=float)):
        i = ad.tid()
        v = {expr}
        out[i] = 0.0
    """)
    pattern = message.replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(ad.TransformError, match=pattern) as err:
        ad.launch(m.bad, 1, inputs=[], outputs=[ad.zeros(1)])
    assert err.value.lineno is not None and expr in str(err.value)
