"""Warp's mat44 forms of three builtins (issue 38): ``quat_from_matrix(m44)`` (the quaternion
of the top-left 3x3 block), ``transform_point(m44, p)`` (the first three components of
``m44 @ (p, 1)``) and ``transform_vector(m44, v)`` (of ``m44 @ (v, 0)``);
frontend/vecframes.py (and vecrot.py) in kernels, runtime/vecfuncs.py in plain Python.

One table, ``CASES``: a kernel body of the loaded ``m`` (a mat44) and ``x`` (a vec3) ending
in an expression stored to ``out[i]``, and a NumPy reference written here from the
definitions (the homogeneous product; the quaternion of a rotation matrix as the leading
eigenvector of Bar-Itzhack's symmetric 4x4 matrix, compared up to its sign), not from
adjoint's code. Per backend, in float64: values against the reference, the tape's
gradient and the JVP against central differences. Then a float32 program written with
``import adjoint.warp as wp``, the plain-Python functions, the errors, and, where NVIDIA
Warp is installed, the same program on Warp's CPU device.
"""
import importlib.util
import math
import sys
from dataclasses import dataclass

import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from tests.conftest import central_fd

N = 4


def _point(m, x):
    return (m @ np.append(x, 1.0))[:3]


def _vector(m, x):
    return (m @ np.append(x, 0.0))[:3]


def _quat_of(r):
    """The unit quaternion (x, y, z, w) of rotation matrix ``r`` (column vectors): the
    eigenvector of the largest eigenvalue of Bar-Itzhack's K (exact for a rotation)."""
    k = np.array([
        [r[0, 0] - r[1, 1] - r[2, 2], r[1, 0] + r[0, 1], r[2, 0] + r[0, 2], r[2, 1] - r[1, 2]],
        [r[1, 0] + r[0, 1], r[1, 1] - r[0, 0] - r[2, 2], r[2, 1] + r[1, 2], r[0, 2] - r[2, 0]],
        [r[2, 0] + r[0, 2], r[2, 1] + r[1, 2], r[2, 2] - r[0, 0] - r[1, 1], r[1, 0] - r[0, 1]],
        [r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1], r[0, 0] + r[1, 1] + r[2, 2]],
    ]) / 3.0
    vals, vecs = np.linalg.eigh(k)
    return vecs[:, np.argmax(vals)]


def _rotation(axis, angle):
    """Rodrigues' formula: the rotation by ``angle`` about unit ``axis``."""
    a = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * k @ k


@dataclass(frozen=True)
class Case:
    name: str
    result: str         # "vec3", "quat" or "scalar"
    expr: str           # stored to out[i]
    ref: object         # NumPy reference of one thread's m, x
    signless: bool = False      # a quaternion: equal up to its sign


CASES = [
    Case("point", "vec3", "ad.transform_point(m, x)", _point),
    Case("vector", "vec3", "ad.transform_vector(m, x)", _vector),
    Case("quat_from_matrix", "quat", "ad.quat_from_matrix(m)", lambda m, x: _quat_of(m[:3, :3]),
         signless=True),
    Case("composed", "vec3",
         "ad.quat_rotate(ad.quat_from_matrix(m), ad.transform_point(m, x)) - "
         "2.0 * ad.transform_vector(m, ad.transform_vector(m, x))",
         lambda m, x: m[:3, :3] @ _point(m, x) - 2.0 * _vector(m, _vector(m, x))),
    Case("a_point_times_itself", "scalar",
         "ad.dot(ad.transform_point(m, x), ad.transform_point(m * m, x))",
         lambda m, x: _point(m, x) @ _point(m @ m, x)),
]

SHAPES = {"vec3": (3,), "quat": (4,), "scalar": ()}
RESULT = {"vec3": "ad.vec3d", "quat": "ad.quatd", "scalar": "ad.float64"}


def kernel_source(case):
    return (f"@ad.kernel\ndef {case.name}(ms: ad.array(dtype=ad.mat44d), "
            f"xs: ad.array(dtype=ad.vec3d), out: ad.array(dtype={RESULT[case.result]})):\n"
            f"    i = ad.tid()\n    m = ms[i]\n    x = xs[i]\n    out[i] = {case.expr}\n\n\n")


def _load(folder, name, text):
    path = folder / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return _load(tmp_path_factory.mktemp("mat44_forms"), "mat44_form_kernels",
                 "import adjoint as ad\n\n\n" + "".join(kernel_source(c) for c in CASES))


def _matrices(rng):
    """Homogeneous matrices whose rotation blocks take each of quat_from_matrix's four
    branches (a small turn: trace >= 0; a turn near pi about an axis near x, y, z: the
    largest diagonal entry), away from the branches' switches; a random translation and
    a random last row (ignored by quat_from_matrix and transform_point as Warp's are)."""
    turns = [([0.3, -0.5, 0.8], 0.9), ([1.0, 0.2, -0.1], 2.9), ([0.1, 1.0, 0.3], 2.8),
             ([-0.2, 0.1, 1.0], 3.0)]
    ms = rng.normal(size=(N, 4, 4))
    for i, (axis, angle) in enumerate(turns[:N]):
        ms[i, :3, :3] = _rotation(axis, angle)
    return ms


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _run(kernel, case, ms, xs, seed=None):
    """(output, [gradient of ms, of xs] or None): one launch, then its tape's backward."""
    dev = _device()
    arrs = [ad.array(v, dtype=ad.float64, requires_grad=True, device=dev) for v in (ms, xs)]
    out = ad.zeros((N,) + SHAPES[case.result], dtype=ad.float64, requires_grad=True,
                   device=dev)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, N, inputs=arrs, outputs=[out])
    if seed is None:
        return out.numpy().copy(), None
    tape.backward(grads={out: seed})
    return out.numpy().copy(), [a.grad.numpy().copy() for a in arrs]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_values_and_both_derivatives_match_references_float64(backend, kernels, case):
    kernel = getattr(kernels, case.name)
    rng = np.random.default_rng(44)
    ms, xs = _matrices(rng), rng.normal(size=(N, 3))
    got, _ = _run(kernel, case, ms, xs)
    want = np.stack([case.ref(ms[i], xs[i]) for i in range(N)])
    if case.signless:
        want *= np.sign(np.sum(want * got, axis=1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    seed = rng.uniform(-1, 1, got.shape)
    _, grads = _run(kernel, case, ms, xs, seed=seed)
    ins = [ms, xs]
    for k, g in enumerate(grads):
        def loss(v, k=k):
            args = ins[:k] + [v] + ins[k + 1:]
            return np.sum(seed * _run(kernel, case, *args)[0])
        np.testing.assert_allclose(g, central_fd(loss, ins[k]), rtol=1e-6, atol=1e-7,
                                   err_msg=f"{case.name}: gradient of argument {k}")
    # forward mode, from the same rules: the JVP along a random direction
    dev = _device()
    dirs = [rng.uniform(-1, 1, v.shape) for v in ins]
    arrs = [ad.array(v, dtype=ad.float64, device=dev) for v in ins]
    dots = ad.launch(kernel, N, inputs=arrs, outputs=[ad.zeros(got.shape, device=dev)],
                     tangents={a: ad.array(d, device=dev) for a, d in zip(arrs, dirs)})
    h = 1e-6
    fd = (_run(kernel, case, *[v + h * d for v, d in zip(ins, dirs)])[0] -
          _run(kernel, case, *[v - h * d for v, d in zip(ins, dirs)])[0]) / (2 * h)
    np.testing.assert_allclose(dots["out"].numpy(), fd, rtol=1e-6, atol=1e-7)


def test_only_the_rotation_block_reaches_quat_from_matrix(kernels):
    """The gradient of quat_from_matrix(m44) is 0 outside the top-left 3x3 block, and of
    transform_vector(m44, v) 0 outside it too; transform_point's reaches the last column's
    top three entries, never the last row."""
    rng = np.random.default_rng(3)
    ms, xs = _matrices(rng), rng.normal(size=(N, 3))
    for name, mask in (("quat_from_matrix", np.s_[:3, :3]), ("vector", np.s_[:3, :3]),
                       ("point", np.s_[:3, :])):
        case = next(c for c in CASES if c.name == name)
        seed = rng.uniform(-1, 1, (N,) + SHAPES[case.result])
        g = _run(getattr(kernels, name), case, ms, xs, seed=seed)[1][0]
        outside = np.ones((4, 4), bool)
        outside[mask] = False
        assert np.all(g[:, outside] == 0.0) and np.any(g[:, ~outside] != 0.0), name


def test_plain_python_forms_match_the_references():
    rng = np.random.default_rng(5)
    ms, xs = _matrices(rng), rng.normal(size=(N, 3))
    for m, x in zip(ms, xs):
        for f in (ad.transform_point, wp_ns.transform_point):
            np.testing.assert_allclose(f(m, x), _point(m, x), rtol=1e-13, atol=1e-14)
        for f in (ad.transform_vector, wp_ns.transform_vector):
            np.testing.assert_allclose(f(m, x), _vector(m, x), rtol=1e-13, atol=1e-14)
        q, want = ad.quat_from_matrix(m), _quat_of(m[:3, :3])
        np.testing.assert_allclose(q, want * np.sign(q @ want), atol=1e-12)
        np.testing.assert_array_equal(wp_ns.quat_from_matrix(m), ad.quat_from_matrix(m[:3, :3]))
        np.testing.assert_allclose(ad.quat_to_matrix(q), m[:3, :3], atol=1e-12)
    # a transform's forms are unchanged: the mat44 of a transform gives the same results
    t = np.concatenate([rng.normal(size=3), _quat_of(_rotation([1.0, 2.0, 3.0], 1.2))])
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = ad.quat_to_matrix(t[3:]), t[:3]
    np.testing.assert_allclose(ad.transform_point(m, xs[0]), ad.transform_point(t, xs[0]),
                               atol=1e-12)
    np.testing.assert_allclose(ad.transform_vector(m, xs[0]), ad.transform_vector(t, xs[0]),
                               atol=1e-12)


def test_other_shapes_are_refused_with_the_line(kernel_module):
    m = kernel_module("""
    @ad.kernel
    def point33(m: ad.array(dtype=ad.mat33), x: ad.array(dtype=ad.vec3)):
        i = ad.tid()
        x[i] = ad.transform_point(m[i], x[i])

    @ad.kernel
    def quat22(m: ad.array(dtype=ad.mat22), q: ad.array(dtype=ad.quat)):
        i = ad.tid()
        q[i] = ad.quat_from_matrix(m[i])

    @ad.kernel
    def vector4(m: ad.array(dtype=ad.mat44), x: ad.array(dtype=ad.vec4)):
        i = ad.tid()
        ad.transform_vector(m[i], x[i])
    """)
    with pytest.raises(ad.TransformError, match=r":9:.*transform_point takes a transform or "
                                                r"a mat44, not mat33"):
        ad.launch(m.point33, 1, inputs=[ad.zeros(1, dtype=ad.mat33), ad.zeros(1, dtype=ad.vec3)])
    with pytest.raises(ad.TransformError, match=r"quat_from_matrix takes a mat33 or a mat44, "
                                                r"not mat22"):
        ad.launch(m.quat22, 1, inputs=[ad.zeros(1, dtype=ad.mat22), ad.zeros(1, dtype=ad.quat)])
    with pytest.raises(ad.TransformError, match=r"transform_vector takes a vec3, not vec4"):
        ad.launch(m.vector4, 1, inputs=[ad.zeros(1, dtype=ad.mat44), ad.zeros(1, dtype=ad.vec4)])


# -- as a Warp user writes it: float32 -------------------------------------------------

WARP_PROGRAM = '''
{header}


@wp.func
def place(m: wp.mat44, x: wp.vec3) -> wp.vec3:
    return wp.transform_point(m, x) - 0.5 * wp.transform_vector(m, x)


@wp.kernel
def pose(ms: wp.array(dtype=wp.mat44), xs: wp.array(dtype=wp.vec3),
         out: wp.array(dtype=wp.vec3), rot: wp.array(dtype=wp.quat),
         loss: wp.array(dtype=float)):
    i = wp.tid()
    p = place(ms[i], xs[i])
    q = wp.quat_from_matrix(ms[i])
    out[i] = p
    rot[i] = q
    wp.atomic_add(loss, 0, wp.dot(p, p) + wp.dot(wp.quat_rotate(q, xs[i]), p))
'''


def _reference_loss(ms, xs):
    """The program in float64 with the plain-Python builtins."""
    total = 0.0
    for m, x in zip(ms, xs):
        p = ad.transform_point(m, x) - 0.5 * ad.transform_vector(m, x)
        total += p @ p + ad.quat_rotate(ad.quat_from_matrix(m), x) @ p
    return total


def _run_program(wp, mod, ms, xs, device):
    arrs = [wp.array(ms.astype(np.float32), dtype=wp.mat44, requires_grad=True, device=device),
            wp.array(xs.astype(np.float32), dtype=wp.vec3, requires_grad=True, device=device)]
    out = wp.zeros(N, dtype=wp.vec3, requires_grad=True, device=device)
    rot = wp.zeros(N, dtype=wp.quat, requires_grad=True, device=device)
    loss = wp.zeros(1, dtype=float, requires_grad=True, device=device)
    tape = wp.Tape()
    with tape:
        wp.launch(mod.pose, dim=N, inputs=arrs, outputs=[out, rot, loss], device=device)
    tape.backward(loss=loss)
    return ([out.numpy(), rot.numpy(), loss.numpy()],
            [tape.gradients[a].numpy().reshape(v.shape) for a, v in zip(arrs, (ms, xs))])


def test_a_warp_program_runs_in_float32_and_its_gradients_match(backend, tmp_path):
    mod = _load(tmp_path, f"mat44_program_{backend}",
                WARP_PROGRAM.format(header="import adjoint.warp as wp"))
    rng = np.random.default_rng(6)
    ms, xs = _matrices(rng), rng.normal(size=(N, 3))
    (out, rot, loss), grads = _run_program(wp_ns, mod, ms, xs, _device())
    assert out.dtype == rot.dtype == loss.dtype == np.float32
    want = np.stack([_point(m, x) - 0.5 * _vector(m, x) for m, x in zip(ms, xs)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rot, np.stack([ad.quat_from_matrix(m) for m in ms]),
                               rtol=1e-5, atol=1e-6)
    assert abs(loss[0] - _reference_loss(ms, xs)) < 1e-5 * abs(_reference_loss(ms, xs))
    ins = [ms, xs]
    for k, g in enumerate(grads):
        def f(v, k=k):
            return _reference_loss(*(ins[:k] + [v] + ins[k + 1:]))
        np.testing.assert_allclose(g, central_fd(f, ins[k]), rtol=2e-3, atol=2e-3)


def _real_warp():
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    warp.config.quiet = True
    return warp


def test_nvidia_warp_gives_the_same_values_and_gradients(tmp_path):
    warp = _real_warp()
    real = _load(tmp_path, "mat44_program_nvidia",
                 WARP_PROGRAM.format(header="import warp as wp\nwp.config.quiet = True"))
    ours = _load(tmp_path, "mat44_program_ours",
                 WARP_PROGRAM.format(header="import adjoint.warp as wp"))
    rng = np.random.default_rng(7)
    ms, xs = _matrices(rng), rng.normal(size=(N, 3))
    want, want_grads = _run_program(warp, real, ms, xs, "cpu")
    got, grads = _run_program(wp_ns, ours, ms, xs, "cpu")
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, want_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
