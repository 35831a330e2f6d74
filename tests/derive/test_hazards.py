"""derive/hazards.py: which mixes of reads and writes of one array a kernel may have.

Allowed: loads of an element the thread itself stored, after its one store, outside
every loop, at an index holding the thread's own index -- for a float array (one
store) and equally for an array of vectors or matrices, whose store is one store per
component (``v[i, 0] = ...``, ``v[i, 1] = ...``): each gradient is checked against
central finite differences in float64 on every backend. Refused, for both alike: a
load of another thread's element, a load before the store, two stores of one element.
"""
import numpy as np
import pytest

import adjoint as ad
from adjoint.autograd import gradcheck
from adjoint.errors import TransformError
from tests.conftest import central_fd

STEP = '''
@ad.struct
class Model:
    dt: float
    gravity: ad.vec3
    m: ad.array(dtype=float)


@ad.struct
class State:
    x: ad.array(dtype=ad.vec3)
    v: ad.array(dtype=ad.vec3)


@ad.kernel
def step(state_in: State, state_out: State, model: Model):
    i = ad.tid()
    state_out.v[i] = state_in.v[i] + model.gravity / model.m[i] * model.dt
    state_out.x[i] = state_in.x[i] + state_out.v[i] * model.dt
'''


def test_struct_step_reads_back_the_vector_it_stored(backend, kernel_module):
    """Warp's test_struct.py step kernel: ``state_out.v[i]`` is stored, then read back
    at the thread's own index. It was refused ('array state_out_v is both read and
    written'); the gradients on every struct array (and the gravity field) against
    central differences of ``sum(wx * x_out) + sum(wv * v_out)``."""
    m = kernel_module(STEP)
    rng = np.random.default_rng(0)
    n, dt = 5, 0.01
    X, V = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    M, G = rng.random(n) + 0.1, np.array([0.0, 0.0, -9.81])
    wx, wv = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))

    def run(x, v, mass, g, tape=None):
        s_in = m.State(x=ad.array(x, dtype=ad.vec3, requires_grad=True),
                       v=ad.array(v, dtype=ad.vec3, requires_grad=True))
        s_out = m.State(x=ad.zeros(n, dtype=ad.vec3, requires_grad=True),
                        v=ad.zeros(n, dtype=ad.vec3, requires_grad=True))
        model = m.Model(dt=dt, gravity=ad.array(g, requires_grad=True),
                        m=ad.array(mass, requires_grad=True))
        if tape is None:
            ad.launch(m.step, n, inputs=[s_in, s_out, model])
        else:
            with tape:
                ad.launch(m.step, n, inputs=[s_in, s_out, model])
        return s_in, s_out, model

    _, s_out, _ = run(X, V, M, G)
    v_want = V + G / M[:, None] * dt
    np.testing.assert_allclose(s_out.v.numpy(), v_want, rtol=1e-14)
    np.testing.assert_allclose(s_out.x.numpy(), X + v_want * dt, rtol=1e-14)

    tape = ad.Tape()
    s_in, s_out, model = run(X, V, M, G, tape)
    tape.backward(grads={s_out.x: wx, s_out.v: wv})

    def loss(x=X, v=V, mass=M, g=G):
        _, out, _ = run(x, v, mass, g)
        return float(np.sum(wx * out.x.numpy()) + np.sum(wv * out.v.numpy()))
    for got, wrt in [(s_in.x, "x"), (s_in.v, "v"), (model.m, "mass"), (model.gravity, "g")]:
        at = {"x": X, "v": V, "mass": M, "g": G}[wrt]
        want = central_fd(lambda a: loss(**{wrt: a}), at)
        np.testing.assert_allclose(got.grad.numpy(), want, rtol=1e-6, atol=1e-8, err_msg=wrt)
    # the stores replaced the outputs' values: their gradients were handed on and cleared
    np.testing.assert_array_equal(s_out.v.grad.numpy(), 0.0)
    np.testing.assert_array_equal(s_out.x.grad.numpy(), 0.0)


READ_BACK = '''
@ad.kernel
def vec_back(x: ad.array(dtype=ad.vec3), s: ad.array(dtype=float),
             v: ad.array(dtype=ad.vec3), out: ad.array(dtype=float)):
    i = ad.tid()
    v[i] = x[i] * s[i] + ad.vec3(0.0, -9.8, 0.5) * s[i] * s[i]
    w = v[i]
    out[i] = ad.dot(w, w) + ad.length(v[i]) * x[i][1]


@ad.kernel
def mat_back(x: ad.array(dtype=ad.vec3), y: ad.array(dtype=ad.vec3),
             a: ad.array(dtype=ad.mat33), out: ad.array(dtype=float)):
    i = ad.tid()
    a[i] = ad.outer(x[i], y[i]) + ad.identity(n=3, dtype=float) * 2.0
    B = a[i]
    out[i] = ad.determinant(B) + ad.trace(B @ ad.transpose(a[i])) + B[0, 2] * B[1, 0]


@ad.kernel
def grid_back(x: ad.array(dtype=ad.vec3, ndim=2), v: ad.array(dtype=ad.vec3, ndim=2),
              out: ad.array(dtype=float, ndim=2)):
    i, j = ad.tid()
    v[i, j] = ad.cross(x[i, j], ad.vec3(1.0, 2.0, 3.0)) + x[i, j] * float(j + 1)
    out[i, j] = ad.length_sq(v[i, j]) * v[i, j][2]


@ad.kernel
def float_back(x: ad.array(dtype=float), b: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    b[i] = x[i] * 2.0
    out[i] = b[i] * b[i]
'''


def test_vector_store_then_read_back_at_the_thread_index(backend, kernel_module):
    """A vec3 array element stored and read back (whole and by ``length(v[i])``): the
    store is three component stores, the load three component loads, each of an element
    this thread alone wrote before. Refused before, like the float array it mirrors."""
    m = kernel_module(READ_BACK)
    rng = np.random.default_rng(1)
    n = 4
    x, s = rng.normal(size=(n, 3)), rng.uniform(0.5, 1.5, n)
    v_want = x * s[:, None] + np.array([0.0, -9.8, 0.5]) * (s * s)[:, None]
    args = ([ad.array(x, dtype=ad.vec3, requires_grad=True), ad.array(s, requires_grad=True)],
            [ad.zeros(n, dtype=ad.vec3, requires_grad=True), ad.zeros(n, requires_grad=True)])
    ad.launch(m.vec_back, n, inputs=args[0], outputs=args[1])
    np.testing.assert_allclose(args[1][0].numpy(), v_want, rtol=1e-14)
    np.testing.assert_allclose(args[1][1].numpy(), np.sum(v_want ** 2, axis=1) +
                               np.linalg.norm(v_want, axis=1) * x[:, 1], rtol=1e-13)
    assert gradcheck(m.vec_back, n, *args, eps=1e-6, atol=1e-7, rtol=1e-6)


def test_matrix_store_then_read_back_at_the_thread_index(backend, kernel_module):
    """The same with a mat33 array: nine component stores ``a[i, r, c]``, loads back."""
    m = kernel_module(READ_BACK)
    rng = np.random.default_rng(2)
    n = 3
    x, y = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    ins = [ad.array(x, dtype=ad.vec3, requires_grad=True),
           ad.array(y, dtype=ad.vec3, requires_grad=True)]
    outs = [ad.zeros(n, dtype=ad.mat33, requires_grad=True), ad.zeros(n, requires_grad=True)]
    ad.launch(m.mat_back, n, inputs=ins, outputs=outs)
    A = np.einsum("ni,nj->nij", x, y) + 2.0 * np.eye(3)
    np.testing.assert_allclose(outs[0].numpy(), A, rtol=1e-14)
    want = (np.linalg.det(A) + np.einsum("nij,nij->n", A, A) + A[:, 0, 2] * A[:, 1, 0])
    np.testing.assert_allclose(outs[1].numpy(), want, rtol=1e-12)
    assert gradcheck(m.mat_back, n, ins, outs, eps=1e-6, atol=1e-7, rtol=1e-6)


def test_vector_store_then_read_back_on_a_2d_grid(backend, kernel_module):
    """``v[i, j]`` of a 2-D launch: the stores are ``v[i, j, 0..2]``."""
    m = kernel_module(READ_BACK)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 3))
    ins = [ad.array(x, dtype=ad.vec3, requires_grad=True)]
    outs = [ad.zeros((2, 3), dtype=ad.vec3, requires_grad=True),
            ad.zeros((2, 3), requires_grad=True)]
    ad.launch(m.grid_back, (2, 3), inputs=ins, outputs=outs)
    v = np.cross(x, [1.0, 2.0, 3.0]) + x * np.array([1.0, 2.0, 3.0])[None, :, None]
    np.testing.assert_allclose(outs[0].numpy(), v, rtol=1e-14)
    np.testing.assert_allclose(outs[1].numpy(), np.sum(v * v, axis=2) * v[..., 2], rtol=1e-13)
    assert gradcheck(m.grid_back, (2, 3), ins, outs, eps=1e-6, atol=1e-7, rtol=1e-6)


def test_float_store_then_read_back_at_the_thread_index(backend, kernel_module):
    """The float array pattern the vector one mirrors (allowed before and after)."""
    m = kernel_module(READ_BACK)
    x = np.array([0.3, -1.2, 0.8])
    ins, outs = [ad.array(x, requires_grad=True)], [ad.zeros(3, requires_grad=True),
                                                    ad.zeros(3, requires_grad=True)]
    assert gradcheck(m.float_back, 3, ins, outs, eps=1e-6, atol=1e-7, rtol=1e-6)


REFUSED = '''
@ad.kernel
def vec_neighbour(x: ad.array(dtype=ad.vec3), v: ad.array(dtype=ad.vec3),
                  out: ad.array(dtype=float)):
    i = ad.tid()
    v[i] = x[i] * 2.0
    out[i] = ad.length(v[i + 1])


@ad.kernel
def float_neighbour(x: ad.array(dtype=float), b: ad.array(dtype=float),
                    out: ad.array(dtype=float)):
    i = ad.tid()
    b[i] = x[i] * 2.0
    out[i] = b[i + 1]


@ad.kernel
def vec_read_first(v: ad.array(dtype=ad.vec3), out: ad.array(dtype=float)):
    i = ad.tid()
    w = v[i]
    v[i] = w * 2.0
    out[i] = ad.length(w)


@ad.kernel
def float_read_first(b: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    w = b[i]
    b[i] = w * 2.0
    out[i] = w


@ad.kernel
def vec_stored_twice(x: ad.array(dtype=ad.vec3), v: ad.array(dtype=ad.vec3),
                     out: ad.array(dtype=float)):
    i = ad.tid()
    v[i] = x[i]
    out[i] = ad.length(v[i])
    v[i] = x[i] * 2.0


@ad.kernel
def float_stored_twice(x: ad.array(dtype=float), b: ad.array(dtype=float),
                       out: ad.array(dtype=float)):
    i = ad.tid()
    b[i] = x[i]
    out[i] = b[i]
    b[i] = x[i] * 2.0


@ad.kernel
def rows_and_columns(x: ad.array(dtype=float), b: ad.array(dtype=float, ndim=2),
                     out: ad.array(dtype=float)):
    i = ad.tid()
    b[i, 0] = x[i]
    out[i] = b[i, 0]
    b[0, i] = x[i] * 2.0


@ad.kernel
def vec_stored_in_a_loop(n: int, x: ad.array(dtype=ad.vec3), v: ad.array(dtype=ad.vec3),
                         out: ad.array(dtype=float)):
    i = ad.tid()
    for k in range(n):
        v[i] = x[i] * float(k)
    out[i] = ad.length(v[i])
'''


@pytest.mark.parametrize("name, array", [
    ("vec_neighbour", "v"), ("float_neighbour", "b"),           # another thread's element
    ("vec_read_first", "v"), ("float_read_first", "b"),         # read, then overwritten
    ("vec_stored_twice", "v"), ("float_stored_twice", "b"),     # stored again after the read
    ("rows_and_columns", "b"),           # thread 0 stores b[0, 0] twice, reads it between
    ("vec_stored_in_a_loop", "v")])
def test_reads_that_may_see_another_value_stay_refused(name, array, kernel_module):
    """Vector arrays are refused exactly where float arrays are: the backward would replay
    the load with a value the forward did not see."""
    m = kernel_module(REFUSED)
    with pytest.raises(TransformError, match=f"array '{array}' is both read and written"):
        ad.source(getattr(m, name), "backward")
