"""Stores into the parts of transform array elements (issue 38): ``t[i].p = v``,
``t[i].q = q``, a component of a part (``t[i].q.w = s``, ``t[i].p[1] += s``), and reads of
them, on arrays of ``ad.transform`` (frontend/components.py ``transform_field``: ``.p`` is
the element's components 0..2, ``.q`` 3..6; only those components are written).

Values against NumPy and gradients against central differences in float64 on every
backend (python, numba, the CUDA simulator); Warp's spelling (float32) against NVIDIA
Warp's CPU device where it is installed (skipped otherwise); the refusals name the line.
"""
import numpy as np
import pytest

import adjoint as ad
import adjoint.warp as wp_ns
from adjoint.errors import TransformError
from tests.conftest import central_fd

SRC = '''
@ad.kernel
def place(x: ad.array(dtype=ad.vec3), q: ad.array(dtype=ad.quat), s: ad.array(dtype=float),
          t: ad.array(dtype=ad.transform), u: ad.array(dtype=ad.transform),
          y: ad.array(dtype=float)):
    i = ad.tid()
    t[i].p = x[i] * s[i]
    t[i].q = q[i]
    u[i].q = q[i]
    u[i].q.w = q[i].w + s[i] * s[i]
    tr = t[i]
    v = ad.transform_point(tr, ad.vec3(1.0, 2.0, -0.5))
    y[i] = ad.dot(v, v) + t[i].p.x * t[i].q.z


@ad.kernel
def nudge(s: ad.array(dtype=float), t: ad.array(dtype=ad.transform)):
    i = ad.tid()
    t[i].p[1] += math.sin(s[i])
    t[i].q.x -= s[i] * s[i]
    t[i].p.z = 2.0 * s[i]
'''

N = 3
X = np.array([[0.3, -0.7, 0.9], [0.1, -1.2, 0.4], [1.1, 0.2, -0.3]])
Q = np.array([[0.2, -0.1, 0.3, 0.9], [-0.5, 0.4, 0.1, 0.7], [0.0, 0.6, -0.2, 0.8]])
S = np.array([0.5, -1.5, 2.0])
T0 = np.arange(N * 7, dtype=float).reshape(N, 7) * 0.1


def _rotate(q, v):
    """Warp's quat_rotate (also of a non-unit quaternion)."""
    u, w = q[:3], q[3]
    return v * (2.0 * w * w - 1.0) + np.cross(u, v) * w * 2.0 + u * np.dot(u, v) * 2.0


def _reference(x, q, s):
    t = np.concatenate([x * s[:, None], q], axis=1)
    u = np.concatenate([np.zeros((N, 3)), q[:, :3], (q[:, 3] + s * s)[:, None]], axis=1)
    v = np.array([_rotate(t[i, 3:], np.array([1.0, 2.0, -0.5])) + t[i, :3] for i in range(N)])
    return t, u, (v * v).sum(1) + t[:, 0] * t[:, 5]


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _place(m, x, q, s, tape=None):
    dev = _device()
    args = [ad.array(x, dtype=ad.vec3, requires_grad=True, device=dev),
            ad.array(q, dtype=ad.quat, requires_grad=True, device=dev),
            ad.array(s, requires_grad=True, device=dev),
            ad.zeros(N, dtype=ad.transform, requires_grad=True, device=dev),
            ad.zeros(N, dtype=ad.transform, requires_grad=True, device=dev),
            ad.zeros(N, requires_grad=True, device=dev)]
    if tape is None:
        ad.launch(m.place, N, inputs=args[:3], outputs=args[3:])
    else:
        with tape:
            ad.launch(m.place, N, inputs=args[:3], outputs=args[3:])
    return args


def test_parts_stored_and_read_match_numpy(backend, kernel_module):
    m = kernel_module(SRC)
    *_, t, u, y = _place(m, X, Q, S)
    want_t, want_u, want_y = _reference(X, Q, S)
    np.testing.assert_allclose(t.numpy(), want_t, rtol=1e-14)
    np.testing.assert_allclose(u.numpy(), want_u, rtol=1e-14)
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-13)


def test_gradients_through_parts_match_central_differences(backend, kernel_module):
    m = kernel_module(SRC)
    tape = ad.Tape()
    x, q, s, t, u, y = _place(m, X, Q, S, tape)
    seed = np.array([0.7, -1.3, 0.4])
    seed_u = np.linspace(-1.0, 1.0, N * 7).reshape(N, 7)
    dev = _device()
    tape.backward(grads={y: ad.array(seed, device=dev),
                         u: ad.array(seed_u, dtype=ad.transform, device=dev)})

    def loss(which):
        def f(v):
            args = [X, Q, S]
            args[which] = v
            *_, u, y = _place(m, *args)
            return float(np.dot(seed, y.numpy()) + (seed_u * u.numpy()).sum())
        return f
    for k, (arr, v0) in enumerate([(x, X), (q, Q), (s, S)]):
        np.testing.assert_allclose(arr.grad.numpy(), central_fd(loss(k), v0),
                                   rtol=1e-7, atol=1e-8)


def test_a_part_component_updates_only_that_component(backend, kernel_module):
    m = kernel_module(SRC)
    dev = _device()

    def run(s, tape=None):
        sa = ad.array(s, requires_grad=True, device=dev)
        t = ad.array(T0, dtype=ad.transform, requires_grad=True, device=dev)
        if tape is None:
            ad.launch(m.nudge, N, inputs=[sa], outputs=[t])
        else:
            with tape:
                ad.launch(m.nudge, N, inputs=[sa], outputs=[t])
        return sa, t

    want = T0.copy()
    want[:, 1] += np.sin(S)
    want[:, 3] -= S * S
    want[:, 2] = 2.0 * S
    tape = ad.Tape()
    sa, t = run(S, tape)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-14)
    seed = np.linspace(0.5, 2.0, N * 7).reshape(N, 7)
    tape.backward(grads={t: ad.array(seed, dtype=ad.transform, device=dev)})
    fd = central_fd(lambda s: float((seed * run(s)[1].numpy()).sum()), S)
    np.testing.assert_allclose(sa.grad.numpy(), fd, rtol=1e-7, atol=1e-8)
    # the part's gradient goes on to the element's earlier value except where overwritten
    g = t.grad.numpy()
    np.testing.assert_allclose(g[:, 2], 0.0)
    np.testing.assert_allclose(np.delete(g, 2, axis=1), np.delete(seed, 2, axis=1))


@pytest.mark.parametrize("body, message", [
    ("t[i][0] = 1.0", r"assigned by its parts: \.p \(the translation\) "
                                        r"and \.q \(the rotation\)"),
    ("t[i].q[k] = 1.0", "indexed by constants only"),
    ("t[i].p.w = 1.0", r"'\.w' does not name a component"),
    ("t[i].p = ad.quat(0.0, 0.0, 0.0, 1.0)", "expected a vec3 here, got quat"),
])
def test_what_parts_refuse_names_the_line(kernel_module, body, message):
    m = kernel_module(f'''
@ad.kernel
def k(t: ad.array(dtype=ad.transform), k: int):
    i = ad.tid()
    {body}
''')
    with pytest.raises(TransformError, match=message) as err:
        ad.launch(m.k, 1, inputs=[ad.zeros(1, dtype=ad.transform), 1])
    assert f"{m.__file__}:9" in str(err.value)


WARP_PROGRAM = '''
@wp.kernel
def place(x: wp.array(dtype=wp.vec3), q: wp.array(dtype=wp.quat), s: wp.array(dtype=float),
          t: wp.array(dtype=wp.transform), u: wp.array(dtype=wp.transform),
          y: wp.array(dtype=float)):
    i = wp.tid()
    t[i].p = x[i] * s[i]
    t[i].q = q[i]
    u[i].q = q[i]
    u[i].q.w = q[i].w + s[i] * s[i]
    y[i] = t[i].p.x * t[i].q.z + t[i].q.w


def run(x, q, s):
    xa = wp.array(x, dtype=wp.vec3, requires_grad=True)
    qa = wp.array(q, dtype=wp.quat, requires_grad=True)
    sa = wp.array(s, dtype=float, requires_grad=True)
    t = wp.zeros(len(s), dtype=wp.transform, requires_grad=True)
    u = wp.zeros(len(s), dtype=wp.transform, requires_grad=True)
    y = wp.zeros(len(s), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(place, len(s), inputs=[xa, qa, sa], outputs=[t, u, y])
    u.grad.assign(np.ones((len(s), 7)))
    tape.backward(grads={y: wp.array(np.ones(len(s)), dtype=float)})
    return (t.numpy().reshape(len(s), 7), u.numpy().reshape(len(s), 7), y.numpy(), xa.grad.numpy().reshape(-1, 3),
            qa.grad.numpy().reshape(-1, 4), sa.grad.numpy())
'''


def test_warp_spelling(kernel_module):
    m = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    t, u, y, gx, gq, gs = m.run(X, Q, S)
    want_t, want_u, _ = _reference(X, Q, S)
    np.testing.assert_allclose(t, want_t, rtol=1e-6)
    np.testing.assert_allclose(u, want_u, rtol=1e-6)
    np.testing.assert_allclose(y, want_t[:, 0] * want_t[:, 5] + want_t[:, 6], rtol=1e-6)
    # y's (p.x * q.z + q.w) and u's (seeded with ones; its w, q.w + s * s, stored last)
    np.testing.assert_allclose(gs, X[:, 0] * Q[:, 2] + 2 * S, rtol=1e-6)
    ones = np.ones(N)
    np.testing.assert_allclose(gq, np.stack([ones, ones, 1 + X[:, 0] * S, 2 * ones], axis=1),
                               rtol=1e-6)


def test_nvidia_warp_computes_the_same(kernel_module):
    warp = pytest.importorskip("warp")
    if warp is wp_ns or not hasattr(warp, "__version__"):
        pytest.skip("NVIDIA Warp is not installed (warp is adjoint.warp here)")
    real = kernel_module("import warp as wp\nwp.config.quiet = True\n" + WARP_PROGRAM)
    ours = kernel_module("import adjoint.warp as wp\n" + WARP_PROGRAM)
    for got, want in zip(ours.run(X, Q, S), real.run(X, Q, S)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
