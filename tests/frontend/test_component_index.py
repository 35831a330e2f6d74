"""Component indices known only at run time, and component stores into array elements
(issue 38; frontend/components.py, pass scalarize).

- reads ``v[i][k]``, ``w[k]``, ``m[k, j]``, ``a[i][j, k]``, a row ``m[idx[i]]`` and a func's
  ``v[k]``; stores ``w[k] = s``, ``m[k, j] += s``, a row ``m[idx[i]] = r``; component stores
  ``y[i].x = s``, ``y[i][1] = s``, ``z[i, j][0] = s``, ``o[i][k, j] = s``, ``q[i].w = s``:
  values against numpy written here, gradients (reverse and forward mode) against central
  finite differences of the forward (float64), per backend;
- a component store changes that component only, and the gradient of the element's other
  components flows back through the launch that wrote them;
- an index outside 0..n-1: ``BoundsError`` naming the line, of an array element and of
  a local (the local's name, the axis and its size); with ``bounds_check=False`` a
  local's reads nan (read) or a vector of nans (store), never another component;
- a kernel as a Warp user writes it (``import adjoint.warp as wp``, float32);
- the generated code (select chains, ``v[i, k]``) and the errors for what stays refused.
"""
import numpy as np
import pytest

import adjoint as ad
from tests.conftest import central_fd

N = 3

KERNELS = """
@ad.func
def pick(v: ad.vec3, k: int) -> float:
    return v[k] * 2.0


@ad.kernel
def reads(v: ad.array(dtype=ad.vec3), a: ad.array(dtype=ad.mat33), idx: ad.array(dtype=int),
          out: ad.array(dtype=float, ndim=2)):
    i = ad.tid()
    w = v[i]
    m = a[i]
    s = 0.0
    for k in range(3):
        s += v[i][k] * w[k]
    out[i, 0] = s
    t = 0.0
    for k in range(3):
        for j in range(3):
            t += m[k, j] * a[i][j, k] + a[i][k][j]
    out[i, 1] = t
    r = m[idx[i]]
    out[i, 2] = r.x * a[i][idx[i]][2] + ad.length_sq(a[i][idx[i]])
    out[i, 3] = pick(w, idx[i]) * m[idx[i]][1] + m[2 - idx[i], idx[i]]


@ad.kernel
def stores(v: ad.array(dtype=ad.vec3), a: ad.array(dtype=ad.mat33), idx: ad.array(dtype=int),
           y: ad.array(dtype=ad.vec3), z: ad.array(dtype=ad.vec3, ndim=2),
           o: ad.array(dtype=ad.mat33), q: ad.array(dtype=ad.quat)):
    i = ad.tid()
    w = v[i]
    m = a[i]
    for k in range(3):
        w[k] = w[k] * m[k, k]
        m[k, 2 - k] += w[k]
    m[idx[i]] = w * 2.0
    m[idx[i]] += ad.vec3(1.0, 2.0, 3.0) * w.x
    m[idx[i]][0] *= w.z
    y[i].x = w.y
    y[i][2] = w.z * w.x
    for j in range(2):
        z[i, j][0] = w[j]
        z[i, j][1] = m[j, j]
        z[i, j].z = 1.0
    for k in range(3):
        for j in range(3):
            o[i][k, j] = m[k, j] * w[j]
    q[i].w = w.x
    q[i][1] = m[1][idx[i]]


@ad.kernel
def fill(u: ad.array(dtype=ad.vec3), y: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    y[i] = u[i] * 2.0


@ad.kernel
def outside(v: ad.array(dtype=ad.vec3), idx: ad.array(dtype=int),
            out: ad.array(dtype=float), w_out: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    w = v[i]
    out[i] = w[idx[i]]
    w[idx[i]] = 5.0
    w_out[i] = w


@ad.kernel(bounds_check=False)
def outside_unchecked(v: ad.array(dtype=ad.vec3), idx: ad.array(dtype=int),
                      out: ad.array(dtype=float), w_out: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    w = v[i]
    out[i] = w[idx[i]]
    w[idx[i]] = 5.0
    w_out[i] = w


@ad.kernel
def matrix_outside(a: ad.array(dtype=ad.mat33), idx: ad.array(dtype=int),
                   out: ad.array(dtype=float)):
    i = ad.tid()
    m = a[i]
    m[idx[i], 1] += 1.0
    out[i] = m[1, idx[i]]


@ad.kernel
def element_outside(v: ad.array(dtype=ad.vec3), idx: ad.array(dtype=int),
                    out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = v[i][idx[i]]


@ad.kernel
def store_outside(idx: ad.array(dtype=int), y: ad.array(dtype=ad.vec3)):
    i = ad.tid()
    y[i][idx[i]] = 1.0
"""


# -- numpy references ------------------------------------------------------------------

def _reads(v, a, idx, out0):
    out = np.zeros((N, 4))
    for i in range(N):
        w, m, k = v[i], a[i], idx[i]
        out[i, 0] = w @ w
        out[i, 1] = np.sum(m * m.T) + m.sum()
        out[i, 2] = m[k, 0] * m[k, 2] + m[k] @ m[k]
        out[i, 3] = 2 * w[k] * m[k, 1] + m[2 - k, k]
    return [out]


def _stores(v, a, idx, y, z, o, q):
    y, z, o, q = y.copy(), z.copy(), o.copy(), q.copy()
    for i in range(N):
        w, m, j0 = v[i].copy(), a[i].copy(), idx[i]
        for k in range(3):
            w[k] = w[k] * m[k, k]
            m[k, 2 - k] += w[k]
        m[j0] = w * 2.0
        m[j0] += np.array([1.0, 2.0, 3.0]) * w[0]
        m[j0, 0] *= w[2]
        y[i, 0] = w[1]
        y[i, 2] = w[2] * w[0]
        for j in range(2):
            z[i, j] = [w[j], m[j, j], 1.0]
        o[i] = m * w[None, :]
        q[i, 3] = w[0]
        q[i, 1] = m[1, j0]
    return [y, z, o, q]


@pytest.fixture
def kernels(kernel_module):
    return kernel_module(KERNELS)


def _arrays(values, dtypes, grad=True):
    return [ad.array(x, dtype=t, requires_grad=grad and t is not int)
            for x, t in zip(values, dtypes)]


def _check(kernel, ins, in_types, outs, out_types, reference, rng):
    """Values against ``reference(*ins, *outs)`` (``outs``: the outputs' values before the
    launch) and, for every float input, the gradient of a random weighting of the outputs
    against central differences of the forward (the kernel launched with no tape)."""
    seeds = [rng.uniform(-1, 1, x.shape) for x in outs]

    def forward(values):
        arrays = _arrays(values, in_types, grad=False)
        results = _arrays([x.copy() for x in outs], out_types, grad=False)
        ad.launch(kernel, N, inputs=arrays, outputs=results)
        return [r.numpy() for r in results]

    got = forward(ins)
    for g, w in zip(got, reference(*ins, *outs)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    arrays = _arrays(ins, in_types)
    results = _arrays([x.copy() for x in outs], out_types)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, N, inputs=arrays, outputs=results)
    tape.backward(grads={r: s for r, s in zip(results, seeds)})
    for k, (x, t) in enumerate(zip(ins, in_types)):
        if t is int:
            continue

        def loss(xk, k=k):
            values = list(ins)
            values[k] = xk
            return sum(float(np.sum(s * r)) for s, r in zip(seeds, forward(values)))
        np.testing.assert_allclose(arrays[k].grad.numpy(), central_fd(loss, x),
                                   rtol=1e-6, atol=1e-7, err_msg=f"input {k}")


def test_reads_at_run_time_indices(backend, kernels):
    rng = np.random.default_rng(1)
    ins = [rng.normal(size=(N, 3)), rng.normal(size=(N, 3, 3)), np.array([2, 0, 1])]
    _check(kernels.reads, ins, [ad.vec3, ad.mat33, int], [np.zeros((N, 4))], [float],
           _reads, rng)


def test_stores_at_run_time_indices_and_into_array_elements(backend, kernels):
    rng = np.random.default_rng(2)
    ins = [rng.normal(size=(N, 3)), rng.normal(size=(N, 3, 3)), np.array([1, 2, 0])]
    outs = [rng.normal(size=(N, 3)), rng.normal(size=(N, 2, 3)), np.zeros((N, 3, 3)),
            rng.normal(size=(N, 4))]           # y's [1] and q's [0], [2] keep these
    _check(kernels.stores, ins, [ad.vec3, ad.mat33, int], outs,
           [ad.vec3, ad.vec3, ad.mat33, ad.quat], _stores, rng)


@pytest.mark.parametrize("name", ["reads", "stores"])
def test_forward_mode_matches_central_differences(backend, kernels, name):
    rng = np.random.default_rng(5)
    ins = [rng.normal(size=(N, 3)), rng.normal(size=(N, 3, 3)), np.array([2, 0, 1])]
    if name == "reads":
        outs, types, reference = [np.zeros((N, 4))], [float], _reads
    else:
        outs = [rng.normal(size=(N, 3)), rng.normal(size=(N, 2, 3)), np.zeros((N, 3, 3)),
                rng.normal(size=(N, 4))]
        types, reference = [ad.vec3, ad.vec3, ad.mat33, ad.quat], _stores
    dirs = [rng.normal(size=x.shape) for x in ins[:2]]
    kernel = getattr(kernels, name)
    arrays = _arrays(ins, [ad.vec3, ad.mat33, int], grad=False)
    got = ad.launch(kernel, N, inputs=arrays, outputs=_arrays(outs, types, grad=False),
                    tangents={a: ad.array(d, device=a.device) for a, d in zip(arrays, dirs)})
    h = 1e-6
    up = reference(*(x + h * d for x, d in zip(ins, dirs)), ins[2], *outs)
    down = reference(*(x - h * d for x, d in zip(ins, dirs)), ins[2], *outs)
    names = [p.name for p in kernel.spec_for(arrays[0].device).params][len(ins):]
    for n, u, d in zip(names, up, down):
        np.testing.assert_allclose(got[n].numpy(), (u - d) / (2 * h), rtol=1e-6, atol=1e-7,
                                   err_msg=n)


def test_a_component_store_leaves_the_others_and_their_gradient(backend, kernels):
    """``y[i].x = s`` after ``y[i] = 2 u[i]``: y's component 1 is still 2 u[i][1], and its
    gradient reaches u through the first launch; components 0 and 2 are overwritten, so u's
    components 0 and 2 get nothing (a store replaces a value)."""
    rng = np.random.default_rng(3)
    u0, v0, a0 = rng.normal(size=(N, 3)), rng.normal(size=(N, 3)), rng.normal(size=(N, 3, 3))
    idx = np.array([0, 1, 2])
    seeds = [rng.uniform(-1, 1, s) for s in [(N, 3), (N, 2, 3), (N, 3, 3), (N, 4)]]

    def run(u_, v_, grad):
        u = ad.array(u_, dtype=ad.vec3, requires_grad=grad)
        v = ad.array(v_, dtype=ad.vec3, requires_grad=grad)
        a = ad.array(a0, dtype=ad.mat33)
        y = ad.zeros(N, dtype=ad.vec3, requires_grad=grad)
        rest = [ad.zeros((N, 2), dtype=ad.vec3, requires_grad=grad),
                ad.zeros(N, dtype=ad.mat33, requires_grad=grad),
                ad.zeros(N, dtype=ad.quat, requires_grad=grad)]
        tape = ad.Tape()
        with tape:
            ad.launch(kernels.fill, N, inputs=[u], outputs=[y])
            ad.launch(kernels.stores, N, inputs=[v, a, ad.array(idx, dtype=int)],
                      outputs=[y] + rest)
        return tape, u, v, [y] + rest

    tape, u, v, outs = run(u0, v0, True)
    y = outs[0].numpy()
    np.testing.assert_allclose(y[:, 1], 2 * u0[:, 1], rtol=1e-15)
    tape.backward(grads=dict(zip(outs, seeds)))
    ug = u.grad.numpy()
    np.testing.assert_array_equal(ug[:, [0, 2]], 0.0)
    np.testing.assert_allclose(ug[:, 1], 2 * seeds[0][:, 1], rtol=1e-15)

    def loss(which):
        def f(x):
            args = (x, v0) if which == 0 else (u0, x)
            return sum(float(np.sum(s * o.numpy())) for s, o in zip(seeds, run(*args, False)[3]))
        return f
    np.testing.assert_allclose(ug, central_fd(loss(0), u0), atol=1e-7)
    np.testing.assert_allclose(v.grad.numpy(), central_fd(loss(1), v0), rtol=1e-6, atol=1e-7)


def test_an_array_element_index_outside_the_vector_is_a_bounds_error(backend, kernels):
    v = ad.array(np.ones((N, 3)), dtype=ad.vec3)
    for bad in (3, -1):
        with pytest.raises(ad.BoundsError) as err:
            ad.launch(kernels.element_outside, N,
                      inputs=[v, ad.array(np.array([0, bad, 1]), dtype=int)],
                      outputs=[ad.zeros(N)])
            ad.synchronize()
        assert err.value.index == bad and err.value.array == "v"
        assert "out[i] = v[i][idx[i]]" in str(err.value)
    with pytest.raises(ad.BoundsError) as err:
        ad.launch(kernels.store_outside, N, inputs=[ad.array(np.array([1, 2, 3]), dtype=int)],
                  outputs=[ad.zeros(N, dtype=ad.vec3)])
        ad.synchronize()
    assert err.value.index == 3 and err.value.array == "y"


@pytest.mark.parametrize("bad, line", [(3, "out[i] = w[idx[i]]"), (-1, "out[i] = w[idx[i]]")])
def test_a_local_index_outside_the_vector_faults(backend, kernels, bad, line):
    """As an array index does: ``BoundsError`` naming the kernel, the line, the local, the
    index and the size, on every backend (a CUDA launch raises where the host waits)."""
    v0 = np.arange(9.0).reshape(N, 3)
    dev = "cuda" if ad.backend_name() == "cuda" else "cpu"
    out, w = ad.zeros(N, device=dev), ad.zeros(N, dtype=ad.vec3, device=dev)
    with pytest.raises(ad.BoundsError) as err:
        ad.launch(kernels.outside, N, inputs=[ad.array(v0, dtype=ad.vec3, device=dev),
                                              ad.array(np.array([1, bad, 0]), dtype=int,
                                                       device=dev)],
                  outputs=[out, w])
        ad.synchronize()
    assert err.value.index == bad and err.value.array == "w"
    assert f"index {bad} is out of range for axis 0 of the local 'w', of size 3" in \
        str(err.value)
    assert line in str(err.value)


def test_a_local_matrix_index_outside_faults_on_its_axis(backend, kernels):
    dev = "cuda" if ad.backend_name() == "cuda" else "cpu"
    a = ad.array(np.ones((N, 3, 3)), dtype=ad.mat33, device=dev)
    for idx, line in (([0, 4, 1], "m[idx[i], 1] += 1.0"),):
        with pytest.raises(ad.BoundsError) as err:
            ad.launch(kernels.matrix_outside, N,
                      inputs=[a, ad.array(np.array(idx), dtype=int, device=dev),
                              ad.zeros(N, device=dev)])
            ad.synchronize()
        assert "axis 0 of the local 'm', of size 3" in str(err.value) and line in str(err.value)
    out = ad.zeros(N, device=dev)
    ad.launch(kernels.matrix_outside, N,
              inputs=[a, ad.array(np.array([0, 1, 2]), dtype=int, device=dev), out])
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 1.0])


def test_unchecked_a_local_index_outside_reads_nan_and_stores_nans(backend, kernels):
    v0 = np.arange(9.0).reshape(N, 3)
    out, w = ad.zeros(N), ad.zeros(N, dtype=ad.vec3)
    ad.launch(kernels.outside_unchecked, N, inputs=[ad.array(v0, dtype=ad.vec3),
                                          ad.array(np.array([1, 3, -1]), dtype=int)],
              outputs=[out, w])
    np.testing.assert_array_equal(out.numpy(), [1.0, np.nan, np.nan])
    np.testing.assert_array_equal(w.numpy(), [[0.0, 5.0, 2.0], [np.nan] * 3, [np.nan] * 3])


def test_the_generated_code_is_a_select_chain_and_an_array_index(kernels):
    src = ad.source(kernels.reads, stage="scalarize")
    assert "s += v[i, k] * w_at" in src
    assert "if k == 0:\n            w_at = w_x\n        elif k == 1:" in src
    assert "a[i, j, k]" in src and "a[i, k, j]" in src
    stores = ad.source(kernels.stores, stage="scalarize")
    for line in ("y[i, 0] = w_y", "z[i, j, 2] = 1.0", "o[i, k, j] = ", "q[i, 3] = w_x"):
        assert line in stores
    assert "elif k == 2:\n            w_z = " in stores
    for stage in ("forward", "backward"):
        ad.source(kernels.stores, stage=stage)        # (printable at every stage)


# -- as a Warp user writes it ----------------------------------------------------------

WARP = """
import adjoint.warp as wp


@wp.kernel
def inertia(p: wp.array(dtype=wp.vec3), m: wp.array(dtype=wp.mat33),
            f: wp.array(dtype=wp.vec3), e: wp.array(dtype=float)):
    tid = wp.tid()
    s = float(0.0)
    for k in range(3):
        s += p[tid][k] * p[tid][k]
    a = m[tid]
    r = wp.vec3()
    for k in range(3):
        for j in range(3):
            r[k] = r[k] + a[k, j] * p[tid][j]
    f[tid].x = r[0] + s
    f[tid][1] = r[1]
    f[tid][2] = m[tid][2, 0] * r[2]
    e[tid] = wp.dot(r, p[tid])
"""


def _inertia(p, m):
    r = np.einsum("nkj,nj->nk", m, p)
    s = np.sum(p * p, axis=1)
    f = np.stack([r[:, 0] + s, r[:, 1], m[:, 2, 0] * r[:, 2]], axis=1)
    return f, np.sum(r * p, axis=1)


def test_a_warp_kernel_as_written_in_float32(backend, kernel_module):
    import adjoint.warp as wp
    mod = kernel_module(WARP)
    rng = np.random.default_rng(4)
    p0, m0 = rng.normal(size=(N, 3)), rng.normal(size=(N, 3, 3))
    sf, se = rng.uniform(-1, 1, (N, 3)), rng.uniform(-1, 1, N)
    p = wp.array(p0.astype(np.float32), dtype=wp.vec3, requires_grad=True)
    m = wp.array(m0.astype(np.float32), dtype=wp.mat33, requires_grad=True)
    f = wp.zeros(N, dtype=wp.vec3, requires_grad=True)
    e = wp.zeros(N, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(mod.inertia, dim=N, inputs=[p, m], outputs=[f, e])
    assert f.numpy().dtype == np.float32
    want_f, want_e = _inertia(p0, m0)
    np.testing.assert_allclose(f.numpy(), want_f, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(e.numpy(), want_e, rtol=1e-5, atol=1e-5)
    tape.backward(grads={f: wp.array(sf.astype(np.float32), dtype=wp.vec3),
                         e: wp.array(se.astype(np.float32))})

    def loss(which):
        def g(x):
            ff, ee = _inertia(x, m0) if which == 0 else _inertia(p0, x)
            return float(np.sum(sf * ff) + np.sum(se * ee))
        return g
    np.testing.assert_allclose(p.grad.numpy(), central_fd(loss(0), p0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m.grad.numpy(), central_fd(loss(1), m0), rtol=1e-4, atol=1e-5)


# -- what stays refused ----------------------------------------------------------------

@pytest.mark.parametrize("body, message", [
    ("w = v[i]\n    w[int(x[i])] = ad.vec3(1.0)", "cannot assign a vec3 to a component"),
    ("m = ad.mat33(1.0)\n    k = int(x[i])\n    m[k] *= v[i]", r"\+= or -= only"),
    ("m = ad.mat33(1.0)\n    k = int(x[i])\n    m[k] = 2.0", "expected a vec3 here, got a scalar"),
    ("t[i].q[int(x[i])] = 1.0", "a part of a transform element is indexed by constants only"),
    ("v[i][int(x[i])] = v[i]", "cannot store a vec3 into a component of an element of 'v'"),
    ("w = v[i]\n    x[i] = w[0, int(x[i])]", r"index \(0, '\?'\) is out of range for a vec3"),
])
def test_what_stays_refused_names_the_line(kernel_module, body, message):
    m = kernel_module(f"""
@ad.kernel
def bad(x: ad.array(dtype=float), v: ad.array(dtype=ad.vec3), t: ad.array(dtype=ad.transform)):
    i = ad.tid()
    {body}
""")
    with pytest.raises(ad.TransformError, match=message) as info:
        ad.source(m.bad, stage="scalarize")
    assert info.value.filename.endswith(".py") and info.value.lineno > 5
