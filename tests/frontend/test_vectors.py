"""Vector, matrix, quaternion and transform types in kernels (frontend/scalarize.py).

Three kernels exercise every operator and builtin (vectors; matrices; quaternions
and transforms), each writing many results. Per backend (python, numba, the CUDA
simulator) and per precision:

- the values match numpy written independently here (np.cross, np.linalg.det,
  np.linalg.inv, rotation matrices, ...);
- float64: the reverse mode (the tape's Jacobian, ``gradcheck``) and the forward
  mode (``launch(..., tangents=...)``) match central finite differences;
- float32 (``ad.vec3f``, ...): values and both derivatives match the float64 ones
  loosely.

Then: ``length`` and ``normalize`` at the zero vector (values and derivatives 0,
Warp's convention), funcs taking and returning vectors, a kernel's vector
parameter, arrays of vectors on the Python side, a Warp kernel ported by
renaming ``wp.`` to ``ad.``, the errors for what is not supported, and
``adjoint show`` before and after scalarization.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.autograd import gradcheck

N = 3

VECS = """
@ad.kernel
def vecs(a: ad.array(dtype=ad.VEC3), b: ad.array(dtype=ad.VEC3), s: ad.array(dtype=FLOAT),
         c: ad.array(dtype=ad.VEC4), out: ad.array(dtype=FLOAT, ndim=2),
         ov: ad.array(dtype=ad.VEC3)):
    i = ad.tid()
    x = a[i]
    y = b[i]
    out[i, 0] = ad.dot(x, y)
    out[i, 1] = ad.length(x)
    out[i, 2] = ad.length_sq(y)
    n = ad.normalize(x)
    out[i, 3] = n.y
    z = ad.cross(x, y) * s[i] - y / s[i] + 2.0 * x
    out[i, 4] = z[0]
    out[i, 5] = z.z
    w = c[i]
    out[i, 6] = ad.length(w) + ad.dot(w, ad.normalize(w))
    v2 = ad.vec2(x.x, y.y)
    out[i, 7] = ad.length(v2) + ad.length_sq(ad.normalize(v2))
    z.y = z.y * x.z
    z[0] += 1.0
    ov[i] = -z + ad.cw_mul(x, y) + ad.VEC3(0.5) - ad.VEC3(1.0, 2.0, s[i])
"""

MATS = """
@ad.kernel
def mats(m: ad.array(dtype=ad.MAT33), u: ad.array(dtype=ad.VEC3), m2: ad.array(dtype=ad.MAT22),
         m4: ad.array(dtype=ad.MAT44), out: ad.array(dtype=FLOAT, ndim=2),
         om: ad.array(dtype=ad.MAT33)):
    i = ad.tid()
    A = m[i]
    x = u[i]
    y = A * x
    B = A @ ad.transpose(A) + ad.outer(x, y) - ad.skew(x) + ad.diag(y) * 0.5
    B = B + ad.identity(n=3, dtype=float)
    out[i, 0] = ad.determinant(B)
    Binv = ad.inverse(B)
    out[i, 1] = ad.trace(Binv)
    r = Binv[1]
    out[i, 2] = r.x + r[2]
    C = m2[i]
    out[i, 3] = ad.determinant(C) + ad.inverse(C)[0, 1]
    out[i, 4] = ad.determinant(m4[i])
    v = x * A
    out[i, 5] = v.y
    B[1, 2] = B[0, 0] * 2.0
    om[i] = A * B
"""

QUATS = """
@ad.kernel
def quats(q: ad.array(dtype=ad.QUAT), r: ad.array(dtype=ad.QUAT), v: ad.array(dtype=ad.VEC3),
          ang: ad.array(dtype=FLOAT), out: ad.array(dtype=FLOAT, ndim=2),
          oq: ad.array(dtype=ad.QUAT), ot: ad.array(dtype=ad.TRANSFORM)):
    i = ad.tid()
    a = q[i]
    b = r[i]
    x = v[i]
    y = ad.quat_rotate(a, x)
    z = ad.quat_rotate_inv(b, y)
    out[i, 0] = z.x
    out[i, 1] = z.y
    out[i, 2] = z.z
    oq[i] = a * ad.quat_inverse(b)
    e = ad.quat_from_axis_angle(x, ang[i])
    M = ad.quat_to_matrix(e)
    out[i, 3] = M[0, 1] + 2.0 * M[2, 2] - M[1, 0]
    t = ad.transform(x, ad.normalize(a))
    t2 = ad.transform(y, e)
    p = ad.transform_point(t, ad.transform_get_translation(t2))
    out[i, 4] = p.x + 2.0 * p.y + 3.0 * p.z
    t3 = ad.transform_multiply(t, ad.transform_inverse(t2))
    g = ad.transform_vector(t3, x)
    out[i, 5] = g.x - g.z + ad.transform_get_rotation(t3).w
    ot[i] = t3 * ad.transform_identity()
    out[i, 6] = (ad.quat_identity() * b).y
"""

TYPES64 = {"VEC3": "vec3", "VEC4": "vec4", "MAT33": "mat33", "MAT22": "mat22",
           "MAT44": "mat44", "QUAT": "quat", "TRANSFORM": "transform", "FLOAT": "float"}
TYPES32 = {k: (v + "f" if k != "FLOAT" else "ad.float32") for k, v in TYPES64.items()}


def _source(template, types):
    for k in sorted(types, key=len, reverse=True):
        template = template.replace(k, types[k])
    return template


@pytest.fixture(scope="module")
def kernels64(tmp_path_factory):
    return _kernels(tmp_path_factory, TYPES64)


@pytest.fixture(scope="module")
def kernels32(tmp_path_factory):
    return _kernels(tmp_path_factory, TYPES32)


_loaded = []


def _kernels(tmp_path_factory, types):
    import importlib.util
    import sys
    path = tmp_path_factory.mktemp("vectors") / f"vector_kernels_{len(_loaded)}.py"
    path.write_text("import adjoint as ad\n\n" + _source(VECS + MATS + QUATS, types))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    _loaded.append(mod)
    return mod


# -- inputs and independent references -------------------------------------------------

def _unit(q):
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _inputs(name, rng):
    """(inputs, output shapes) of kernel ``name`` as float64 numpy arrays."""
    if name == "vecs":
        return [rng.normal(size=(N, 3)), rng.normal(size=(N, 3)), rng.uniform(0.5, 2, N),
                rng.normal(size=(N, 4))], [(N, 8), (N, 3)]
    if name == "mats":
        m = rng.normal(size=(N, 3, 3)) + 2 * np.eye(3)
        return [m, rng.normal(size=(N, 3)) * 0.5, rng.normal(size=(N, 2, 2)) + 2 * np.eye(2),
                rng.normal(size=(N, 4, 4)) + 3 * np.eye(4)], [(N, 6), (N, 3, 3)]
    q = _unit(rng.normal(size=(N, 4))) * rng.uniform(0.8, 1.2, (N, 1))
    r = rng.normal(size=(N, 4))
    return [q, r, rng.normal(size=(N, 3)), rng.uniform(-3, 3, N)], [(N, 7), (N, 4), (N, 7)]


def _qmul(q, r):
    qv, qw, rv, rw = q[:3], q[3], r[:3], r[3]
    return np.concatenate([qw * rv + rw * qv + np.cross(qv, rv), [qw * rw - qv @ rv]])


def _qconj(q):
    return np.array([-q[0], -q[1], -q[2], q[3]])


def _qrot(q, v):
    """Rotation by the quaternion product q v q* (= Warp's formula for a unit q, and
    for any q: q v q* / |q|^2 scaled back; used with unit quaternions only)."""
    return _qmul(_qmul(q, np.concatenate([v, [0.0]])), _qconj(q))[:3]


def _qrot_warp(q, v):
    # Warp's quat_rotate, also for a non-unit q: v (2w^2 - 1) + 2w (q_v x v) + 2 q_v (q_v.v)
    qv, w = q[:3], q[3]
    return v * (2 * w * w - 1) + 2 * w * np.cross(qv, v) + 2 * qv * (qv @ v)


def _qrot_inv_warp(q, v):
    qv, w = q[:3], q[3]
    return v * (2 * w * w - 1) - 2 * w * np.cross(qv, v) + 2 * qv * (qv @ v)


def _qmat(q):
    return np.stack([_qrot_warp(q, e) for e in np.eye(3)], axis=1)


def _reference(name, ins):
    outs = [np.zeros(s) for s in _inputs(name, np.random.default_rng(0))[1]]
    for i in range(N):
        if name == "vecs":
            a, b, s, c = (x[i] for x in ins)
            o, ov = outs
            o[i, 0], o[i, 1], o[i, 2] = a @ b, np.linalg.norm(a), b @ b
            o[i, 3] = a[1] / np.linalg.norm(a)
            z = np.cross(a, b) * s - b / s + 2 * a
            o[i, 4], o[i, 5] = z[0], z[2]
            o[i, 6] = 2 * np.linalg.norm(c)
            o[i, 7] = np.hypot(a[0], b[1]) + 1.0
            z[1] *= a[2]
            z[0] += 1
            ov[i] = -z + a * b + 0.5 - np.array([1.0, 2.0, s])
        elif name == "mats":
            A, x, C, D = (m[i] for m in ins)
            o, om = outs
            y = A @ x
            skew = np.array([[0, -x[2], x[1]], [x[2], 0, -x[0]], [-x[1], x[0], 0]])
            B = A @ A.T + np.outer(x, y) - skew + np.diag(y) * 0.5 + np.eye(3)
            o[i, 0], o[i, 1] = np.linalg.det(B), np.trace(np.linalg.inv(B))
            r = np.linalg.inv(B)[1]
            o[i, 2] = r[0] + r[2]
            o[i, 3] = np.linalg.det(C) + np.linalg.inv(C)[0, 1]
            o[i, 4] = np.linalg.det(D)
            o[i, 5] = (x @ A)[1]
            B[1, 2] = 2 * B[0, 0]
            om[i] = A @ B
        else:
            a, b, x, ang = (m[i] for m in ins)
            o, oq, ot = outs
            y = _qrot_warp(a, x)
            o[i, 0:3] = _qrot_inv_warp(b, y)
            oq[i] = _qmul(a, _qconj(b))
            e = np.concatenate([x / np.linalg.norm(x) * np.sin(ang / 2), [np.cos(ang / 2)]])
            au = a / np.linalg.norm(a)
            M = _rotation(x / np.linalg.norm(x), ang)
            o[i, 3] = M[0, 1] + 2 * M[2, 2] - M[1, 0]
            p = x + _qrot(au, y)
            o[i, 4] = p @ [1, 2, 3]
            pinv = -_qrot(_qconj(e), y)
            t3p = _qrot(au, pinv) + x
            t3q = _qmul(au, _qconj(e))
            g = _qrot(t3q, x)
            o[i, 5] = g[0] - g[2] + t3q[3]
            ot[i, :3] = t3p
            ot[i, 3:] = t3q
            o[i, 6] = b[1]
    return outs


def _rotation(k, angle):
    """Rodrigues' rotation matrix about the unit axis ``k``."""
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def _launch(kernel, ins, out_shapes, dtype=np.float64):
    arrs = [ad.array(x.astype(dtype), requires_grad=True) for x in ins]
    outs = [ad.zeros(s, dtype=dtype, requires_grad=True) for s in out_shapes]
    ad.launch(kernel, N, inputs=arrs, outputs=outs)
    return arrs, outs


def _jvp(kernel, ins, out_shapes, dirs, dtype=np.float64):
    arrs = [ad.array(x.astype(dtype)) for x in ins]
    outs = [ad.zeros(s, dtype=dtype) for s in out_shapes]
    got = ad.launch(kernel, N, inputs=arrs, outputs=outs,
                    tangents={a: ad.array(d.astype(dtype), device=a.device)
                              for a, d in zip(arrs, dirs)})
    names = [p.name for p in kernel.spec_for(arrs[0].device).params][len(ins):]
    return [got[n].numpy() for n in names]


def _outputs(kernel, ins, out_shapes):
    return [o.numpy().copy() for o in _launch(kernel, ins, out_shapes)[1]]


KERNELS = ["vecs", "mats", "quats"]


@pytest.mark.parametrize("name", KERNELS)
def test_values_and_both_derivatives_match_references_float64(backend, kernels64, name):
    kernel = getattr(kernels64, name)
    rng = np.random.default_rng(1)
    ins, shapes = _inputs(name, rng)
    for got, want in zip(_outputs(kernel, ins, shapes), _reference(name, ins)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # reverse mode: every Jacobian entry of the tape against central differences
    arrs = [ad.array(x, requires_grad=True) for x in ins]
    outs = [ad.zeros(s, requires_grad=True) for s in shapes]
    assert gradcheck(kernel, N, arrs, outs, eps=1e-6, atol=1e-6, rtol=1e-5)
    # forward mode along a random direction against central differences
    dirs = [rng.uniform(-1, 1, x.shape) for x in ins]
    h = 1e-6
    plus = _outputs(kernel, [x + h * d for x, d in zip(ins, dirs)], shapes)
    minus = _outputs(kernel, [x - h * d for x, d in zip(ins, dirs)], shapes)
    for got, p, m in zip(_jvp(kernel, ins, shapes, dirs), plus, minus):
        np.testing.assert_allclose(got, (p - m) / (2 * h), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", KERNELS)
def test_float32_variants_match_float64_loosely(backend, kernels32, kernels64, name):
    k32, k64 = getattr(kernels32, name), getattr(kernels64, name)
    rng = np.random.default_rng(2)
    ins, shapes = _inputs(name, rng)
    a32, o32 = _launch(k32, ins, shapes, np.float32)
    a64, o64 = _launch(k64, ins, shapes)
    assert o32[0].numpy().dtype == np.float32
    for x, y in zip(o32, o64):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=2e-3, atol=2e-3)
    seeds = [rng.uniform(-1, 1, s) for s in shapes]
    for arrs, outs, k in ((a32, o32, k32), (a64, o64, k64)):
        tape = ad.Tape()
        with tape:
            ad.launch(k, N, inputs=arrs, outputs=outs)
        tape.backward(grads={o: s.astype(o.numpy().dtype) for o, s in zip(outs, seeds)})
    for x, y in zip(a32, a64):
        np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=5e-3, atol=5e-3)
    dirs = [rng.uniform(-1, 1, x.shape) for x in ins]
    for x, y in zip(_jvp(k32, ins, shapes, dirs, np.float32), _jvp(k64, ins, shapes, dirs)):
        np.testing.assert_allclose(x, y, rtol=5e-3, atol=5e-3)


# -- quat_from_matrix: each of Warp's four branches ---------------------------------------

def test_quat_from_matrix_takes_every_branch_and_inverts_quat_to_matrix(backend, kernel_module):
    m = kernel_module("""
    @ad.kernel
    def qfm(q: ad.array(dtype=ad.quat), out: ad.array(dtype=ad.quat)):
        i = ad.tid()
        out[i] = ad.quat_from_matrix(ad.quat_to_matrix(q[i]))
    """)
    # a small rotation (trace >= 0), then half turns about x, y and z (trace < 0, the
    # largest diagonal entry first, second, third), slightly tilted so none is a tie
    axes = [(0.3, 0.2, 0.9), (1.0, 0.1, 0.05), (0.1, 1.0, 0.05), (0.05, 0.1, 1.0)]
    angles = [0.4, 3.0, 3.0, 3.0]
    q = np.array([np.concatenate([np.array(a) / np.linalg.norm(a) * np.sin(t / 2),
                                  [np.cos(t / 2)]]) for a, t in zip(axes, angles)])
    diags = [np.diag(_qmat(x)) for x in q]
    assert np.trace(_qmat(q[0])) > 0 and [int(np.argmax(d)) for d in diags[1:]] == [0, 1, 2]
    x = ad.array(q, dtype=ad.quat, requires_grad=True)
    out = ad.zeros(4, dtype=ad.quat, requires_grad=True)
    ad.launch(m.qfm, 4, inputs=[x], outputs=[out])
    np.testing.assert_allclose(out.numpy(), q * np.sign(q[:, 3:]), atol=1e-12)
    assert gradcheck(m.qfm, 4, [x], [out], atol=1e-6, rtol=1e-5)


# -- length and normalize at the zero vector ----------------------------------------------

def test_length_and_normalize_at_zero_are_zero_with_zero_derivatives(backend, kernels64):
    ins, shapes = _inputs("vecs", np.random.default_rng(3))
    ins[0][1] = 0.0                                     # a[1] is the zero vector
    ins[3][2] = 0.0                                     # c[2] too (a vec4)
    arrs, outs = _launch(kernels64.vecs, ins, shapes)
    o = outs[0].numpy()
    assert o[1, 1] == 0.0 and o[1, 3] == 0.0 and o[2, 6] == 0.0      # length, normalize
    seed = np.zeros(shapes[0])
    seed[:, 1] = seed[:, 3] = seed[:, 6] = 1.0          # d(length + normalize.y) only
    tape = ad.Tape()
    with tape:
        ad.launch(kernels64.vecs, N, inputs=arrs, outputs=outs)
    tape.backward(grads={outs[0]: seed, outs[1]: np.zeros(shapes[1])})
    np.testing.assert_array_equal(arrs[0].grad.numpy()[1], 0.0)
    np.testing.assert_array_equal(arrs[3].grad.numpy()[2], 0.0)
    assert np.all(np.isfinite(arrs[0].grad.numpy())) and np.any(arrs[0].grad.numpy() != 0)
    dirs = [np.ones_like(x) for x in ins]
    dot_out = _jvp(kernels64.vecs, ins, shapes, dirs)[0]
    assert dot_out[1, 1] == 0.0 and dot_out[1, 3] == 0.0 and dot_out[2, 6] == 0.0


def test_a_nan_component_gives_its_own_partial_nan(backend, kernel_module):
    """The length's partials x / |x|, 0 at the origin, are one select of the quotient
    (rules/registry.py ``_guarded_quotients``): where a component is nan, the length is
    nan, the quotient 0, and that component's partial 0 * nan = nan -- the others 0. The
    nan is not hidden as a zero gradient; finite vectors are unaffected."""
    m = kernel_module("""
    @ad.kernel
    def lengths(v: ad.array(dtype=ad.vec3d), out: ad.array(dtype=float)):
        i = ad.tid()
        out[i] = ad.length(v[i])
    """)
    v0 = np.array([[np.nan, 1.0, 2.0], [0.0, 0.0, 0.0], [3.0, 0.0, 4.0]])
    v = ad.array(v0, dtype=ad.vec3d, requires_grad=True)
    out = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.lengths, 3, inputs=[v], outputs=[out])
    tape.backward(grads={out: np.ones(3)})
    g = v.grad.numpy()
    assert np.isnan(g[0, 0]) and np.array_equal(g[0, 1:], [0.0, 0.0])
    np.testing.assert_array_equal(g[1], 0.0)
    np.testing.assert_allclose(g[2], [0.6, 0.0, 0.8], rtol=1e-15)


# -- funcs, a kernel's vector parameter, Python-side arrays -------------------------------

FUNCS = """
@ad.func
def spring(a: ad.vec3, b: ad.vec3, k: float):
    d = b - a
    l = ad.length(d)
    return d * (k * (l - 1.0) / l), l

@ad.func
def moved(q: ad.quat, t: ad.vec3) -> ad.transform:
    return ad.transform(t, q)

@ad.kernel
def forces(x: ad.array(dtype=ad.vec3), q: ad.array(dtype=ad.quat), g: ad.vec3,
           f: ad.array(dtype=ad.vec3), e: ad.array(dtype=float)):
    i = ad.tid()
    j = (i + 1) % x.shape[0]
    fi, l = spring(x[i], x[j], 2.0)
    ad.atomic_add(f, i, fi + g)
    f[j] -= fi
    t = moved(q[i], g)
    p = ad.transform_point(t, x[i])
    e[i] = l * l + ad.dot(p, g)
"""


def _forces_ref(x, q, g):
    n = len(x)
    f, e = np.zeros_like(x), np.zeros(n)
    for i in range(n):
        j = (i + 1) % n
        d = x[j] - x[i]
        l = np.linalg.norm(d)
        fi = d * 2.0 * (l - 1.0) / l
        f[i] += fi + g
        f[j] -= fi
        e[i] = l * l + (_qrot_warp(q[i], x[i]) + g) @ g
    return f, e


def test_funcs_take_and_return_vectors_and_a_kernel_takes_a_vector(backend, kernel_module):
    m = kernel_module(FUNCS)
    rng = np.random.default_rng(4)
    X, Q, G = rng.normal(size=(4, 3)), _unit(rng.normal(size=(4, 4))), rng.normal(size=3)
    x = ad.array(X, dtype=ad.vec3, requires_grad=True)
    q = ad.array(Q, dtype=ad.quat, requires_grad=True)
    g = ad.array(ad.vec3(*G), requires_grad=True)
    f = ad.zeros(4, dtype=ad.vec3, requires_grad=True)
    e = ad.zeros(4, requires_grad=True)
    ad.launch(m.forces, 4, inputs=[x, q, g], outputs=[f, e])
    want_f, want_e = _forces_ref(X, Q, G)
    np.testing.assert_allclose(f.numpy(), want_f, rtol=1e-12)
    np.testing.assert_allclose(e.numpy(), want_e, rtol=1e-12)
    f.zero_()
    assert gradcheck(m.forces, 4, [x, q, g], [f, e], atol=1e-6, rtol=1e-5)
    # forward mode through the funcs, along one direction, against central differences
    dirs = [rng.uniform(-1, 1, a.shape) for a in (X, Q, G)]
    got = ad.launch(m.forces, 4, inputs=[ad.array(X), ad.array(Q), ad.array(G)],
                    outputs=[ad.zeros((4, 3)), ad.zeros(4)],
                    tangents={k: ad.array(d) for k, d in zip("xqg", dirs)})
    h = 1e-6
    up = _forces_ref(*(a + h * d for a, d in zip((X, Q, G), dirs)))
    down = _forces_ref(*(a - h * d for a, d in zip((X, Q, G), dirs)))
    np.testing.assert_allclose(got["f"].numpy(), (up[0] - down[0]) / (2 * h), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["e"].numpy(), (up[1] - down[1]) / (2 * h), rtol=1e-6, atol=1e-6)
    # the func is plain Python too, with numpy vectors
    d, l = m.spring(ad.vec3(0.0, 0.0, 0.0), ad.vec3(0.0, 3.0, 4.0), 2.0)
    np.testing.assert_allclose(d, [0.0, 3.0 * 2 * 4 / 5, 4.0 * 2 * 4 / 5])


def test_arrays_of_vectors_on_the_python_side():
    data = np.arange(12.0).reshape(4, 3)
    a = ad.array(data, dtype=ad.vec3, requires_grad=True)
    assert a.shape == (4, 3) and a.dtype == np.float64 and a.grad.numpy().shape == (4, 3)
    np.testing.assert_array_equal(a.numpy(), data)
    assert ad.zeros(5, dtype=ad.mat33).shape == (5, 3, 3)
    assert ad.ones((2, 3), dtype=ad.quatf).numpy().dtype == np.float32
    assert ad.full(2, 1.5, dtype=ad.transform).shape == (2, 7)
    assert ad.empty(2, dtype=ad.vec2d).shape == (2, 2)
    assert repr(ad.array(dtype=ad.vec3)) == "array(dtype=ad.vec3, ndim=1)"
    with pytest.raises(ValueError, match=r"trailing shape \(3,\)"):
        ad.array(np.zeros((4, 2)), dtype=ad.vec3)
    with pytest.raises(ValueError, match="trailing shape"):
        ad.array(np.zeros(3), dtype=ad.vec3)
    assert ad.vec3(1.0).tolist() == [1.0, 1.0, 1.0] and ad.quat_identity().tolist()[3] == 1.0


def test_an_array_of_vectors_copies_a_torch_tensor():
    torch = pytest.importorskip("torch")
    t = ad.array(torch.ones(2, 4, dtype=torch.float64), dtype=ad.quat)
    assert t.shape == (2, 4) and t.numpy().tolist() == [[1.0] * 4] * 2


# -- a Warp kernel, ported by renaming wp. to ad. ------------------------------------------

WARP_PORT = """
@ad.kernel
def integrate_bodies(body_q: ad.array(dtype=ad.transform), body_qd: ad.array(dtype=ad.vec3),
                     body_w: ad.array(dtype=ad.vec3), gravity: ad.vec3, dt: float,
                     body_q_new: ad.array(dtype=ad.transform),
                     body_qd_new: ad.array(dtype=ad.vec3)):
    tid = ad.tid()
    tf = body_q[tid]
    x0 = ad.transform_get_translation(tf)
    r0 = ad.transform_get_rotation(tf)
    v0 = body_qd[tid]
    w0 = body_w[tid]
    v1 = v0 + gravity * dt
    x1 = x0 + v1 * dt
    r1 = ad.normalize(r0 + ad.quat(w0, 0.0) * r0 * 0.5 * dt)
    body_q_new[tid] = ad.transform(x1, r1)
    body_qd_new[tid] = v1
"""


def test_a_warp_kernel_ports_by_renaming(kernel_module):
    m = kernel_module(WARP_PORT)
    rng = np.random.default_rng(5)
    n, dt, G = 3, 0.1, np.array([0.0, -9.8, 0.0])
    tf = np.concatenate([rng.normal(size=(n, 3)), _unit(rng.normal(size=(n, 4)))], axis=1)
    qd, w = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    ins = [ad.array(tf, dtype=ad.transform, requires_grad=True),
           ad.array(qd, dtype=ad.vec3, requires_grad=True),
           ad.array(w, dtype=ad.vec3, requires_grad=True), ad.array(G), dt]
    outs = [ad.zeros(n, dtype=ad.transform, requires_grad=True),
            ad.zeros(n, dtype=ad.vec3, requires_grad=True)]
    ad.launch(m.integrate_bodies, n, inputs=ins, outputs=outs)
    v1 = qd + G * dt
    r = tf[:, 3:] + np.array([_qmul(np.append(wi, 0.0), ri) for wi, ri in zip(w, tf[:, 3:])]) \
        * 0.5 * dt
    np.testing.assert_allclose(outs[0].numpy(), np.concatenate(
        [tf[:, :3] + v1 * dt, _unit(r)], axis=1), rtol=1e-12)
    np.testing.assert_allclose(outs[1].numpy(), v1, rtol=1e-12)
    assert gradcheck(m.integrate_bodies, n, ins, outs, atol=1e-6, rtol=1e-5)


TRANSFORM_PARTS = """
@ad.struct
class Body:
    pose: ad.transform
    scale: float

@ad.kernel
def parts(q: ad.array(dtype=ad.transform), b: Body, pos: ad.array(dtype=ad.vec3),
          rot: ad.array(dtype=ad.quat), out: ad.array(dtype=float)):
    i = ad.tid()
    pos[i] = q[i].p
    t = q[i]
    rot[i] = t.q
    u = t
    u.p = t.p * b.scale + b.pose.p
    out[i] = q[i].p.x * t.q.w + ad.dot(u.p, t.p) + b.pose.q.z

@ad.kernel
def getters(q: ad.array(dtype=ad.transform), b: Body, pos: ad.array(dtype=ad.vec3),
            rot: ad.array(dtype=ad.quat), out: ad.array(dtype=float)):
    i = ad.tid()
    t = q[i]
    p = ad.transform_get_translation(t)
    r = ad.transform_get_rotation(t)
    pos[i] = p
    rot[i] = r
    bp = ad.transform_get_translation(b.pose)
    out[i] = p.x * r.w + ad.dot(p * b.scale + bp, p) + ad.transform_get_rotation(b.pose).z
"""


def test_transform_parts_p_and_q_as_in_warp(backend, kernel_module):
    """Warp's ``t.p`` and ``t.q`` (a transform's translation and rotation) read and write
    the parts ``transform_get_translation`` / ``_get_rotation`` read: of an array element,
    a local (also assigned: ``u.p = ...``) and a struct's field, with gradients."""
    m = kernel_module(TRANSFORM_PARTS)
    rng = np.random.default_rng(7)
    n = 4
    tf = rng.normal(size=(n, 7))
    body = m.Body(pose=ad.array([0.5, -1.0, 2.0, 0.1, 0.2, 0.3, 0.9]), scale=1.5)
    results = []
    for kernel in (m.parts, m.getters):
        ins = [ad.array(tf, dtype=ad.transform, requires_grad=True), body]
        outs = [ad.zeros(n, dtype=ad.vec3, requires_grad=True),
                ad.zeros(n, dtype=ad.quat, requires_grad=True), ad.zeros(n, requires_grad=True)]
        ad.launch(kernel, n, inputs=ins, outputs=outs)
        results.append([o.numpy().copy() for o in outs])
        assert gradcheck(kernel, n, ins, outs, atol=1e-6, rtol=1e-5)
    p = tf[:, :3]
    np.testing.assert_array_equal(results[0][0], p)
    np.testing.assert_array_equal(results[0][1], tf[:, 3:])
    want = p[:, 0] * tf[:, 6] + ((p * 1.5 + [0.5, -1.0, 2.0]) * p).sum(1) + 0.3
    for got in results:
        np.testing.assert_allclose(got[2], want, rtol=1e-13)


# -- errors and show ----------------------------------------------------------------------

@pytest.mark.parametrize("body, message", [
    ("v = ad.vec3(1.0)\n    x[i] = v", "cannot store a vec3 into an element of the float array"),
    ("v = ad.vec3(1.0)\n    w = ad.vec2(1.0)\n    x[i] = ad.dot(v, w)", "dot of vec3 and vec2"),
    ("v = ad.vec3(1.0)\n    x[i] = v * v", "cw_mul"),
    ("v = ad.vec3(1.0)\n    if v > 0.0:\n        x[i] = 1.0", "needs a scalar, not vec3"),
    ("v = ad.vec3(1.0)\n    while ad.length(v * 2.0) > 1.0:\n        v = v * 0.5",
     "while condition"),
    ("v = ad.vec3(1.0)\n    m = ad.mat33(v, v, v)\n    x[i] = m[0, 0]", "row by row"),
    ("v = ad.vec3(1.0)\n    x[i] = v.q", "a vec3 has no component '.q'"),
    ("v = ad.vec3(1.0)\n    x[i] = v.r", "attribute '.r' is not supported"),
    ("t = ad.transform()\n    x[i] = t.x", r"no component '.x' \(its parts: .p, the translation"),
    ("v = ad.mat22(1.0)\n    x[i] = v.x", "has no component '.x'"),
    ("v = ad.vec3(1.0)\n    v = 2.0", "it cannot be assigned a scalar"),
    ("v = ad.vec3(1.0)\n    x[i] = v[3]", "out of range for a vec3"),
])
def test_unsupported_vector_uses_name_the_line(kernel_module, body, message):
    m = kernel_module(f"""
@ad.kernel
def bad(x: ad.array(dtype=float)):
    i = ad.tid()
    {body}
""")
    with pytest.raises(ad.TransformError, match=message) as info:
        ad.source(m.bad, stage="normalize")
    assert info.value.filename.endswith(".py") and info.value.lineno > 5


def test_a_vector_array_indexed_with_too_many_indices_is_refused(kernel_module):
    m = kernel_module("""
@ad.kernel
def bad(p: ad.array(dtype=ad.vec3), x: ad.array(dtype=float)):
    i = ad.tid()
    x[i] = p[i, 0]
""")
    with pytest.raises(ad.TransformError, match=r"array of vec3 with 1 index dimension"):
        ad.source(m.bad, stage="scalarize")


def test_show_gives_the_vector_form_then_the_scalar_form(kernel_module):
    m = kernel_module(FUNCS)
    parsed = ad.source(m.forces, stage="parse")
    assert "p = transform_point(t, x[i])" in parsed and "def forces(x, q, g, f, e):" in parsed
    scalar = "\n".join(line for line in ad.source(m.forces, stage="scalarize").splitlines()
                       if not line.lstrip().startswith("#"))
    assert "transform_point" not in scalar and "g_x = g[0]" in scalar
    assert "atomic_add(f, i, 2, " in scalar and "f[j, 0] -= " in scalar
    assert "def spring(a_x, a_y, a_z, b_x, b_y, b_z, k):" in ad.source(m.spring, stage="scalarize")


def test_a_vector_func_with_a_hand_written_adjoint_of_its_components(kernel_module):
    """The rule may take the components the func is scalarized to (a vector's rule:
    tests/frontend/test_func_grad_vectors.py)."""
    m = kernel_module("""
@ad.func
def norm2(a: ad.vec3) -> float:
    return ad.dot(a, a)

@ad.func_grad(norm2)
def norm2_grad(a_x, a_y, a_z, adj_ret):
    return 2.0 * a_x * adj_ret, 2.0 * a_y * adj_ret, 2.0 * a_z * adj_ret

@ad.kernel
def k(p: ad.array(dtype=ad.vec3), x: ad.array(dtype=float)):
    i = ad.tid()
    x[i] = norm2(p[i])
""")
    p0 = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]])
    p = ad.array(p0, dtype=ad.vec3, requires_grad=True)
    x = ad.zeros(2, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.k, 2, inputs=[p], outputs=[x])
    tape.backward(grads={x: ad.array([1.0, 0.5])})
    np.testing.assert_allclose(p.grad.numpy(), 2.0 * p0 * np.array([[1.0], [0.5]]))


SHARE = """
@ad.kernel
def put(v: ad.vec3, p: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    p[i] = v * float(i)
"""


def test_an_array_of_vectors_can_share_numpy_and_torch_memory(kernel_module):
    """``ad.array(p, dtype=ad.vec3, copy=False)`` is a view of the (n, 3) numpy array: a
    kernel's store lands in ``p``; a torch tensor is shared the same way; where sharing
    would need a copy (dtype, strides, not a numpy array) it is refused, not copied."""
    p = np.zeros((4, 3))
    a = ad.array(p, dtype=ad.vec3, copy=False, requires_grad=True)
    assert np.shares_memory(a.numpy(), p) and a.grad.numpy().shape == (4, 3)
    with ad.backend_scope("python"):
        ad.launch(kernel_module(SHARE).put, 4, inputs=[ad.array([1.0, 2.0, 3.0])], outputs=[a])
    assert p[2].tolist() == [2.0, 4.0, 6.0] and p[3].tolist() == [3.0, 6.0, 9.0]
    with pytest.raises(ValueError, match="float32, not float64"):
        ad.array(np.zeros((4, 3), np.float32), dtype=ad.vec3, copy=False)
    with pytest.raises(ValueError, match="C-contiguous"):
        ad.array(np.zeros((3, 4)).T, dtype=ad.vec3d, copy=False)
    with pytest.raises(ValueError, match="trailing shape"):
        ad.array(np.zeros((4, 2)), dtype=ad.vec3, copy=False)
    with pytest.raises(ValueError, match="numpy array or a CPU tensor"):
        ad.array([[0.0, 0.0, 0.0]], dtype=ad.vec3, copy=False)


def test_an_array_of_vectors_can_share_torch_memory():
    """A CPU torch tensor of the vector's trailing shape and dtype is shared, not copied."""
    torch = pytest.importorskip("torch")
    t = torch.zeros(2, 4, dtype=torch.float32)
    q = ad.array(t, dtype=ad.quatf, copy=False)
    q.numpy()[1, 3] = 5.0
    assert float(t[1, 3]) == 5.0


SWAPS = """
@ad.kernel
def swaps(p: ad.array(dtype=ad.vec3), x: ad.array(dtype=float), out: ad.array(dtype=ad.vec3),
          s: ad.array(dtype=float)):
    i = ad.tid()
    a = x[i]
    b = 2.0 * x[i] * x[i]
    a, b = b, a
    u = p[i]
    v = u * a + ad.vec3(b, 1.0, 0.5)
    u, v = v, u
    w, c = ad.cross(u, v), u.y
    out[i] = w + v * c
    s[i] = a - b * c
"""


def _swaps_ref(P, X):
    a, b = 2.0 * X * X, X
    u = P * a[:, None] + np.stack([b, np.ones_like(b), 0.5 * np.ones_like(b)], axis=1)
    v = P
    w, c = np.cross(u, v), u[:, 1]
    return w + v * c[:, None], a - b * c


def test_swaps_in_code_with_vectors(backend, kernel_module):
    """``a, b = b, a`` was refused in any kernel that also uses vectors (pass scalarize:
    "tuples are only supported in assignments and returns"), and vectors could not be
    swapped at all; found by the fuzzer's vector programs. Every value is read before any
    name is assigned, as in Python."""
    m = kernel_module(SWAPS)
    rng = np.random.default_rng(11)
    P, X = rng.normal(size=(5, 3)), rng.uniform(-1.0, 1.0, 5)
    device = "cuda" if backend == "cuda" else "cpu"
    p = ad.array(P, dtype=ad.vec3, requires_grad=True, device=device)
    x = ad.array(X, requires_grad=True, device=device)
    out = ad.zeros(5, dtype=ad.vec3, requires_grad=True, device=device)
    s = ad.zeros(5, requires_grad=True, device=device)
    wo, ws = rng.normal(size=(5, 3)), rng.normal(size=5)
    with ad.Tape() as tape:
        ad.launch(m.swaps, 5, inputs=[p, x], outputs=[out, s])
    want_out, want_s = _swaps_ref(P, X)
    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-12)
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-12)
    tape.backward(grads={out: wo, s: ws})

    def loss(P_, X_):
        o, t = _swaps_ref(P_, X_)
        return float(np.sum(wo * o) + np.sum(ws * t))
    h = 1e-6
    dP, dX = rng.normal(size=P.shape), rng.normal(size=X.shape)
    fd = (loss(P + h * dP, X + h * dX) - loss(P - h * dP, X - h * dX)) / (2 * h)
    got = float(np.sum(p.grad.numpy() * dP) + np.sum(x.grad.numpy() * dX))
    np.testing.assert_allclose(got, fd, rtol=1e-7)
