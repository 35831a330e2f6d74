"""Warp's kernel builtins a porter meets (issue 38): ``quat_slerp``, ``quat_to_axis_angle``
(both of Warp's forms), ``quat_rpy``, ``ddot``, ``min``/``max`` of vectors, a scalar over a
vector or matrix, ``where`` and the older ``select`` (frontend/vecrot.py, vecexpr.py,
choose.py; runtime/vecfuncs.py in plain Python).

One table, ``CASES``: a row is a kernel body of the loaded values ``x, y, z`` (of the types
it names) ending in an expression stored to ``out[i]``, and a NumPy reference written here
from textbook definitions (the slerp formula of sines, the ZYX Euler-angle formula, the
half-angle of a unit quaternion), not from adjoint's code. Per backend (python, numba, the
CUDA simulator), in float64: the value matches the reference and the tape's gradient of a
random weighting of the outputs, and the JVP along a random direction, match central
differences. Then the same builtins as a Warp user writes them (``import adjoint.warp as
wp``, float32, Warp's out-argument form, ``tape.gradients``, a tuple for a ``wp.vec3``
parameter), and the plain-Python versions.
"""
import importlib.util
import math
import sys
from dataclasses import dataclass

import numpy as np
import pytest

import adjoint as ad
from tests.conftest import central_fd

N = 3

TYPES = {"scalar": ("ad.float64", ()), "vec3": ("ad.vec3d", (3,)), "vec4": ("ad.vec4d", (4,)),
         "quat": ("ad.quatd", (4,)), "mat33": ("ad.mat33d", (3, 3))}


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple         # the types of x, y, z: keys of TYPES
    result: str
    expr: str           # stored to out[i], after ``pre``
    ref: object         # NumPy reference of one thread's x, y, z
    pre: tuple = ()     # statements before it


def _slerp(q0, q1, t):
    """The textbook slerp of unit quaternions along the shorter arc: sines of the angle."""
    q0, q1 = q0 / np.linalg.norm(q0), q1 / np.linalg.norm(q1)
    if q0 @ q1 < 0:
        q1 = -q1
    omega = math.acos(min(1.0, q0 @ q1))
    return (math.sin((1 - t) * omega) * q0 + math.sin(t * omega) * q1) / math.sin(omega)


def _axis_angle(q):
    """The axis (w made positive) and the angle in [0, pi] of the rotation q stands for."""
    s = 1.0 if q[3] >= 0 else -1.0
    v = s * q[:3]
    return np.concatenate([v / np.linalg.norm(v), [2.0 * math.acos(abs(q[3]) /
                                                                   np.linalg.norm(q))]])


def _rpy(r, p, y):
    """Roll about x, then pitch about y, then yaw about z (the ZYX formula), as (x, y, z, w)."""
    cr, sr, cp, sp = math.cos(r / 2), math.sin(r / 2), math.cos(p / 2), math.sin(p / 2)
    cy, sy = math.cos(y / 2), math.sin(y / 2)
    return np.array([sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
                     cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy])


CASES = [
    Case("slerp", ("quat", "quat", "scalar"), "quat", "ad.quat_slerp(x, y, z)", _slerp),
    Case("axis_angle_pair", ("quat",), "vec4", "ad.vec4d(axis[0], axis[1], axis[2], angle)",
         _axis_angle, ("axis, angle = ad.quat_to_axis_angle(x)",)),
    Case("axis_angle_out_arguments", ("quat",), "vec4",
         "ad.vec4d(axis[0], axis[1], axis[2], angle)", _axis_angle,
         ("axis = ad.vec3d()", "angle = 0.0", "ad.quat_to_axis_angle(x, axis, angle)")),
    Case("rpy", ("vec3",), "quat", "ad.quat_rpy(x[0], x[1], x[2])", lambda x: _rpy(*x)),
    Case("ddot", ("mat33", "mat33"), "scalar", "ad.ddot(x, y) * ad.ddot(x, x)",
         lambda x, y: np.sum(x * y) * np.sum(x * x)),
    Case("min_max_componentwise", ("vec3", "vec3"), "vec3", "min(x, y) + 2.0 * max(x, y)",
         lambda x, y: np.minimum(x, y) + 2 * np.maximum(x, y)),
    Case("min_max_of_one", ("vec3",), "scalar", "min(x) * 3.0 + max(x)",
         lambda x: 3 * np.min(x) + np.max(x)),
    Case("scalar_over_vector", ("scalar", "vec3"), "vec3", "x / y + 2.0 / y",
         lambda x, y: x / y + 2.0 / y),
    Case("scalar_over_matrix", ("mat33",), "mat33", "1.5 / x", lambda x: 1.5 / x),
    Case("where_vectors", ("scalar", "vec3", "vec3"), "vec3",
         "ad.where(x > 0.0, y * x, z * 2.0)", lambda x, y, z: y * x if x > 0 else 2 * z),
    Case("where_scalars", ("scalar", "scalar"), "scalar", "ad.where(x < 0.0, x * y, y * y)",
         lambda x, y: x * y if x < 0 else y * y),
    Case("select_false_first", ("scalar", "vec3", "vec3"), "vec3",
         "ad.select(x > 0.0, y * x, z * 2.0)", lambda x, y, z: 2 * z if x > 0 else y * x),
]


def kernel_source(case):
    params = [f"a{k}: ad.array(dtype={TYPES[t][0]})" for k, t in enumerate(case.args)]
    params.append(f"out: ad.array(dtype={TYPES[case.result][0]})")
    loads = "".join(f"    {'xyz'[k]} = a{k}[i]\n" for k in range(len(case.args)))
    pre = "".join(f"    {s}\n" for s in case.pre)
    return (f"@ad.kernel\ndef {case.name}({', '.join(params)}):\n    i = ad.tid()\n"
            f"{loads}{pre}    out[i] = {case.expr}\n\n\n")


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
    return _load(tmp_path_factory.mktemp("warp_rotations"), "warp_rotation_kernels",
                 "import adjoint as ad\n\n\n" + "".join(kernel_source(c) for c in CASES))


def _inputs(case, rng):
    ins = []
    for k, t in enumerate(case.args):
        x = rng.normal(size=(N,) + TYPES[t][1])
        if t == "quat":
            x /= np.linalg.norm(x, axis=1, keepdims=True)
        if t == "scalar" and case.name == "slerp":
            x = rng.uniform(0.1, 0.9, N)
        if t == "scalar" and case.name.startswith(("where", "select")):
            x = np.array([-0.7, 0.4, 1.3])          # both sides, away from the switch
        ins.append(x)
    return ins


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _run(kernel, case, ins, seed=None):
    """(output, input gradients or None): one launch, and its tape's backward with ``seed``."""
    dev = _device()
    arrs = [ad.array(x, dtype=ad.float64, requires_grad=True, device=dev) for x in ins]
    out = ad.zeros((N,) + TYPES[case.result][1], dtype=ad.float64, requires_grad=True,
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
    rng = np.random.default_rng(38)
    ins = _inputs(case, rng)
    got, _ = _run(kernel, case, ins)
    want = np.stack([case.ref(*(x[i] for x in ins)) for i in range(N)])
    np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-10, atol=1e-12)
    seed = rng.uniform(-1, 1, got.shape)
    _, grads = _run(kernel, case, ins, seed=seed)
    for k, g in enumerate(grads):
        def loss(v, k=k):
            return np.sum(seed * _run(kernel, case, ins[:k] + [v] + ins[k + 1:])[0])
        np.testing.assert_allclose(g, central_fd(loss, ins[k]), rtol=1e-6, atol=1e-7,
                                   err_msg=f"{case.name}: gradient of argument {k}")
    # forward mode, from the same rules: the JVP along a random direction
    dev = _device()
    dirs = [rng.uniform(-1, 1, x.shape) for x in ins]
    arrs = [ad.array(x, dtype=ad.float64, device=dev) for x in ins]
    dots = ad.launch(kernel, N, inputs=arrs, outputs=[ad.zeros(got.shape, device=dev)],
                     tangents={a: ad.array(d, device=dev) for a, d in zip(arrs, dirs)})
    h = 1e-6
    fd = (_run(kernel, case, [x + h * d for x, d in zip(ins, dirs)])[0] -
          _run(kernel, case, [x - h * d for x, d in zip(ins, dirs)])[0]) / (2 * h)
    np.testing.assert_allclose(dots["out"].numpy(), fd, rtol=1e-6, atol=1e-7)


def test_slerp_ends_and_rpy_turns_as_warp_documents():
    """slerp is q0 at t = 0 and q1 at t = 1 (the shorter arc: -q1 when q0 . q1 < 0);
    quat_rpy(pi/2, 0, pi/2) rolls (1, 2, 3) to (1, -3, 2), then yaws it to (3, 1, 2)."""
    q0 = np.array([0.1, -0.3, 0.2, 0.9]) / np.linalg.norm([0.1, -0.3, 0.2, 0.9])
    q1 = np.array([0.5, 0.4, -0.6, 0.2]) / np.linalg.norm([0.5, 0.4, -0.6, 0.2])
    np.testing.assert_allclose(ad.quat_slerp(q0, q1, 0.0), q0, atol=1e-12)
    np.testing.assert_allclose(ad.quat_slerp(q0, q1, 1.0), q1 * np.sign(q0 @ q1), atol=1e-12)
    np.testing.assert_allclose(ad.quat_slerp(q0, q1, 0.3), _slerp(q0, q1, 0.3), atol=1e-12)
    q = ad.quat_rpy(math.pi / 2, 0.0, math.pi / 2)
    np.testing.assert_allclose(ad.quat_rotate(q, np.array([1.0, 2.0, 3.0])), [3, 1, 2],
                               atol=1e-12)
    axis, angle = ad.quat_to_axis_angle(ad.quat_from_axis_angle(np.array([0, 0.6, 0.8]), 2.0))
    np.testing.assert_allclose(axis, [0, 0.6, 0.8], atol=1e-12)
    assert abs(angle - 2.0) < 1e-12
    assert ad.where(True, 1.0, 2.0) == 1.0 and ad.select(True, 1.0, 2.0) == 2.0
    assert ad.ddot(np.eye(3), np.full((3, 3), 2.0)) == 6.0


def test_errors_name_the_builtin_and_the_line(kernel_module):
    m = kernel_module("""
    @ad.kernel
    def bad_where(x: ad.array(dtype=float)):
        i = ad.tid()
        x[i] = ad.where(x[i] > 0.0, 1.0)

    @ad.kernel
    def bad_out(q: ad.array(dtype=ad.quat), x: ad.array(dtype=ad.vec3)):
        i = ad.tid()
        ad.quat_to_axis_angle(q[i], x[i], 1.0)

    @ad.kernel
    def bad_min(x: ad.array(dtype=ad.vec3), y: ad.array(dtype=ad.vec4)):
        i = ad.tid()
        x[i] = min(x[i], y[i])
    """)
    with pytest.raises(ad.TransformError, match=r":9:.*where\(\) takes three arguments"):
        ad.launch(m.bad_where, 1, inputs=[ad.zeros(1)])
    with pytest.raises(ad.TransformError, match=r"writes its last 2 arguments"):
        ad.launch(m.bad_out, 1, inputs=[ad.zeros(1, dtype=ad.quat), ad.zeros(1, dtype=ad.vec3)])
    with pytest.raises(ad.TransformError, match=r"two vectors of one type"):
        ad.launch(m.bad_min, 1, inputs=[ad.zeros(1, dtype=ad.vec3), ad.zeros(1, dtype=ad.vec4)])


WARP_PROGRAM = '''
import adjoint.warp as wp


@wp.kernel
def pose(q0: wp.array(dtype=wp.quat), q1: wp.array(dtype=wp.quat), t: wp.array(dtype=float),
         gain: wp.vec3, out: wp.array(dtype=wp.vec3), loss: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.quat_slerp(q0[i], q1[i], t[i])
    axis = wp.vec3()
    angle = float(0.0)
    wp.quat_to_axis_angle(q, axis, angle)
    r = wp.quat_rpy(t[i], 0.5 * t[i], angle)
    v = wp.quat_rotate(r, axis) + wp.vec3(2.0, 2.0, 2.0)
    w = wp.where(t[i] > 0.5, 2.0 / v, wp.min(v, gain))
    out[i] = w
    m = wp.quat_to_matrix(q)
    wp.atomic_add(loss, 0, wp.dot(w, gain) + wp.ddot(m, m) * t[i])
'''


def test_a_warp_program_runs_and_its_gradients_match_float64(backend, tmp_path):
    """The builtins as a Warp user writes them: float32, the out-argument form of
    quat_to_axis_angle, a tuple for a vec3 parameter, ``tape.gradients[x]``; the gradients
    agree with central differences of the same program in float64 (the plain-Python
    builtins of runtime/vecfuncs.py)."""
    wp = pytest.importorskip("adjoint.warp")
    mod = _load(tmp_path, f"warp_rotation_program_{backend}", WARP_PROGRAM)
    rng = np.random.default_rng(5)
    q0 = rng.normal(size=(N, 4))
    q1 = rng.normal(size=(N, 4))
    q0 /= np.linalg.norm(q0, axis=1, keepdims=True)
    q1 /= np.linalg.norm(q1, axis=1, keepdims=True)
    t = np.array([0.2, 0.7, 0.4])
    gain = (0.5, -1.0, 1.5)
    dev = _device()
    arrs = [wp.array(q0, dtype=wp.quat, requires_grad=True, device=dev),
            wp.array(q1, dtype=wp.quat, requires_grad=True, device=dev),
            wp.array(t, dtype=float, requires_grad=True, device=dev)]
    out = wp.zeros(N, dtype=wp.vec3, requires_grad=True, device=dev)
    loss = wp.zeros(1, dtype=float, requires_grad=True, device=dev)
    tape = wp.Tape()
    with tape:
        wp.launch(mod.pose, dim=N, inputs=arrs + [gain], outputs=[out, loss], device=dev)
    tape.backward(loss=loss)

    def reference(q0, q1, t):
        total = 0.0
        for i in range(N):
            q = ad.quat_slerp(q0[i], q1[i], t[i])
            axis, angle = ad.quat_to_axis_angle(q)
            v = ad.quat_rotate(ad.quat_rpy(t[i], 0.5 * t[i], angle), axis) + 2.0
            w = 2.0 / v if t[i] > 0.5 else np.minimum(v, gain)
            m = ad.quat_to_matrix(q)
            total += w @ np.array(gain) + np.sum(m * m) * t[i]
        return total

    assert abs(loss.numpy()[0] - reference(q0, q1, t)) < 1e-4 * abs(reference(q0, q1, t))
    ins = [q0, q1, t]
    for k, a in enumerate(arrs):
        def f(v, k=k):
            return reference(*(ins[:k] + [v] + ins[k + 1:]))
        assert tape.gradients[a] is a.grad
        np.testing.assert_allclose(tape.gradients[a].numpy(), central_fd(f, ins[k]),
                                   rtol=2e-3, atol=2e-3)
