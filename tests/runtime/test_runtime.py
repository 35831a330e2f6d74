"""Runtime: Array, Tape semantics (DESIGN.md "Semantics that must hold"), low-level
adjoint launches, and agreement between the plain-Python and numba backends."""
import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import adjoint as ad

KERNELS = '''
@ad.kernel
def scale(s: float, x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = s * x[i]


@ad.kernel
def square(y: ad.array(dtype=float), z: ad.array(dtype=float)):
    i = ad.tid()
    z[i] = y[i] * y[i]


@ad.kernel
def scale_add(x: ad.array(dtype=float), z: ad.array(dtype=float)):
    i = ad.tid()
    z[i] += 10.0 * x[i]


@ad.kernel
def sum_sq(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(loss, 0, x[i] * x[i])


@ad.kernel
def chain(x: ad.array(dtype=float), y: ad.array(dtype=float),
          z: ad.array(dtype=float), s: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i]
    z[i] = y[i]
    s[i] = z[i]


@ad.kernel
def store_twice(x: ad.array(dtype=float), y: ad.array(dtype=float)):
    i = ad.tid()
    y[i] = x[i] * x[i]
    y[i] = 3.0 * x[i]
'''


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    """KERNELS imported once for the whole file, so numba compiles each kernel only once."""
    path = tmp_path_factory.mktemp("runtime_kernels") / "runtime_kernels.py"
    path.write_text("import math\nimport numpy as np\nimport adjoint as ad\n" + KERNELS)
    spec = importlib.util.spec_from_file_location("adjoint_test_runtime_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------- Array

def test_constructors_dtype_shape_and_grad():
    for ctor, value in [(ad.zeros, 0.0), (ad.ones, 1.0)]:
        a = ctor((2, 3), dtype=ad.float32, requires_grad=True)
        assert a.shape == (2, 3) and a.dtype == np.float32 and a.device == "cpu"
        np.testing.assert_array_equal(a.numpy(), value)
        assert isinstance(a.grad, ad.Array)
        assert a.grad.shape == (2, 3) and a.grad.dtype == np.float32
        np.testing.assert_array_equal(a.grad.numpy(), 0.0)
    e = ad.empty(4)
    assert e.shape == (4,) and e.dtype == np.float64 and e.grad is None
    assert not e.requires_grad
    f = ad.full(3, 2.5, requires_grad=True)
    np.testing.assert_array_equal(f.numpy(), [2.5, 2.5, 2.5])
    assert f.requires_grad and f.grad.shape == (3,)
    i = ad.zeros(5, dtype=ad.int32)
    assert i.dtype == np.int32 and i.grad is None
    for like in (ad.zeros_like, ad.ones_like):
        b = like(f)
        assert b.shape == f.shape and b.dtype == f.dtype and b.requires_grad
        c = like(ad.zeros((2, 2), dtype=ad.float32), requires_grad=False)
        assert c.dtype == np.float32 and c.grad is None
    np.testing.assert_array_equal(ad.ones_like(i).numpy(), np.ones(5, dtype=np.int32))


def test_array_copies_its_data_and_numpy_shares_memory():
    src = np.array([1.0, 2.0, 3.0])
    a = ad.array(src, requires_grad=True)
    src[0] = 100.0
    assert a.numpy()[0] == 1.0                     # a copy of the data
    view = a.numpy()
    view[1] = 7.0
    assert a.numpy()[1] == 7.0                     # numpy() is the buffer, not a copy
    assert np.shares_memory(a.numpy(), view)
    assert ad.array([1, 2, 3]).dtype.kind == "i"
    assert ad.array([1, 2], dtype=ad.float32).dtype == np.float32
    assert ad.array(np.zeros((2, 3, 4))).shape == (2, 3, 4)


def test_assign_zero_fill():
    a = ad.array([1.0, 2.0, 3.0])
    buf = a.numpy()
    a.assign(np.array([4.0, 5.0, 6.0]))
    np.testing.assert_array_equal(a.numpy(), [4.0, 5.0, 6.0])
    a.assign(ad.array([7.0, 8.0, 9.0]))
    np.testing.assert_array_equal(buf, [7.0, 8.0, 9.0])   # in place
    a.fill_(2.0)
    np.testing.assert_array_equal(buf, 2.0)
    a.zero_()
    np.testing.assert_array_equal(buf, 0.0)


def test_integer_arrays_cannot_require_grad():
    with pytest.raises((TypeError, ValueError, ad.AdjointError)):
        ad.zeros(3, dtype=ad.int64, requires_grad=True)


# --------------------------------------------------------------------------- stores

def test_store_hands_adjoint_back_and_clears_it(backend, m):
    """Two launches store into y: only the last value's use reaches x."""
    xs = np.array([1.0, -2.0, 0.5])
    x = ad.array(xs, requires_grad=True)
    y = ad.zeros(3, requires_grad=True)
    seed = np.array([1.0, 2.0, 3.0])
    tape = ad.Tape()
    with tape:
        ad.launch(m.scale, 3, inputs=[2.0, x], outputs=[y])
        ad.launch(m.scale, 3, inputs=[5.0, x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), 5.0 * xs)
    tape.backward(grads={y: seed})
    np.testing.assert_array_equal(x.grad.numpy(), 5.0 * seed)
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)     # overwritten output reads 0


def test_store_twice_in_one_kernel(backend, m):
    xs = np.array([1.0, -2.0, 0.5])
    x = ad.array(xs, requires_grad=True)
    y = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.store_twice, 3, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), 3.0 * xs)
    tape.backward(grads={y: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)


def test_accumulation_does_not_clear(backend, m):
    xs = np.array([1.0, -2.0, 0.5])
    x = ad.array(xs, requires_grad=True)
    z = ad.full(3, 1.0, requires_grad=True)
    loss = ad.zeros(1, requires_grad=True)
    seed = np.array([1.0, 2.0, 3.0])
    tape = ad.Tape()
    with tape:
        ad.launch(m.scale_add, 3, inputs=[x], outputs=[z])
        ad.launch(m.sum_sq, 3, inputs=[x], outputs=[loss])
    np.testing.assert_array_equal(z.numpy(), 1.0 + 10.0 * xs)
    assert loss.numpy()[0] == pytest.approx(np.sum(xs * xs), rel=1e-15)
    tape.backward(grads={z: seed, loss: np.array([4.0])})
    np.testing.assert_array_equal(x.grad.numpy(), 10.0 * seed + 4.0 * 2.0 * xs)
    np.testing.assert_array_equal(z.grad.numpy(), seed)     # += keeps the adjoint
    np.testing.assert_array_equal(loss.grad.numpy(), [4.0])  # atomics keep it too


def test_backward_loss_on_one_element_array(backend, m):
    xs = np.array([0.5, -1.5, 2.0, 3.0])
    x = ad.array(xs, requires_grad=True)
    loss = ad.zeros(1, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.sum_sq, 4, inputs=[x], outputs=[loss])
    tape.backward(loss=loss)
    np.testing.assert_array_equal(x.grad.numpy(), 2.0 * xs)
    with pytest.raises(Exception):
        tape.backward(loss=x)     # not a one-element array


# --------------------------------------------------------------------------- tape

def test_seeds_zero_and_accumulation_reference_case(backend, m):
    """reference case 3 (the project's list of other systems' failures)."""
    x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    y, z, s = (ad.zeros(3, requires_grad=True) for _ in range(3))
    tape = ad.Tape()
    with tape:
        ad.launch(m.chain, 3, inputs=[x], outputs=[y, z, s])
    for out in (y, z, s, y, s):
        tape.backward(grads={out: np.ones(3)})
        np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])
        tape.zero()
        for a in (x, y, z, s):
            np.testing.assert_array_equal(a.grad.numpy(), 0.0)
    tape.backward(grads={z: np.ones(3)})
    tape.backward(grads={z: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_backward_zero_backward_with_different_seeds(backend, m):
    xs = np.array([1.0, -2.0, 0.5])
    x = ad.array(xs, requires_grad=True)
    y = ad.zeros(3, requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.scale, 3, inputs=[3.0, x], outputs=[y])
        ad.launch(m.square, 3, inputs=[y], outputs=[z])
    rng = np.random.default_rng(0)
    for _ in range(3):
        seed = rng.uniform(-1, 1, 3)
        tape.backward(grads={z: seed})
        np.testing.assert_allclose(x.grad.numpy(), seed * 2 * (3 * xs) * 3, rtol=1e-15)
        tape.zero()


def test_record_func_runs_in_place_in_reverse_order(backend, m):
    xs = np.array([1.0, -2.0, 0.5])
    x = ad.array(xs, requires_grad=True)
    y = ad.zeros(3, requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    seen = []

    def double_y_grad():
        seen.append(y.grad.numpy().copy())    # the square launch's backward has run
        seen.append(x.grad.numpy().copy())    # the scale launch's has not
        y.grad.assign(2.0 * y.grad.numpy())   # assign: numpy() may be a host copy (cuda)

    tape = ad.Tape()
    with tape:
        ad.launch(m.scale, 3, inputs=[3.0, x], outputs=[y])
        tape.record_func(double_y_grad, [y])
        ad.launch(m.square, 3, inputs=[y], outputs=[z])
    tape.backward(grads={z: np.ones(3)})
    assert len(seen) == 2
    np.testing.assert_allclose(seen[0], 2 * 3 * xs, rtol=1e-15)
    np.testing.assert_array_equal(seen[1], 0.0)
    np.testing.assert_allclose(x.grad.numpy(), 2 * (2 * 3 * xs) * 3, rtol=1e-15)


def test_reset_forgets_launches(backend, m):
    x = ad.array([1.0, 2.0], requires_grad=True)
    y = ad.zeros(2, requires_grad=True)
    z = ad.zeros(2, requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(m.square, 2, inputs=[x], outputs=[y])
    tape.backward(grads={y: np.ones(2)})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    tape.reset()
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)
    tape.backward(grads={y: np.ones(2)})
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)     # nothing recorded any more
    with tape:
        ad.launch(m.scale_add, 2, inputs=[x], outputs=[z])
    tape.backward(grads={z: np.ones(2)})
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0])


def test_copies_on_tape_reference_case(backend, m):
    """reference case 2 (the project's list of other systems' failures), for ad.copy, ad.clone and Array.assign."""
    for how in ("copy", "clone", "assign"):
        x = ad.array([1.0, 2.0, 3.0], requires_grad=True)
        z = ad.zeros(3, requires_grad=True)
        tape = ad.Tape()
        with tape:
            if how == "copy":
                y = ad.zeros(3, requires_grad=True)
                ad.copy(y, x)
            elif how == "clone":
                y = ad.clone(x)
            else:
                y = ad.zeros(3, requires_grad=True)
                y.assign(x)
            ad.launch(m.square, 3, inputs=[y], outputs=[z])
            ad.launch(m.scale_add, 3, inputs=[x], outputs=[z])
        np.testing.assert_array_equal(z.numpy(), [11.0, 24.0, 39.0])
        tape.backward(grads={z: np.ones(3)})
        np.testing.assert_array_equal(x.grad.numpy(), [12.0, 14.0, 16.0], err_msg=how)


def test_overwrite_after_read_keeps_the_read_values(backend, m):
    """reference case 7 (the project's list of other systems' failures): the backward of 'square' must see the old u."""
    for overwrite in ("kernel", "copy"):
        u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
        z = ad.zeros(3, requires_grad=True)
        tape = ad.Tape()
        with tape:
            ad.launch(m.square, 3, inputs=[u], outputs=[z])
            if overwrite == "kernel":
                ad.launch(m.scale, 3, inputs=[0.0, ad.array([5.0, 5.0, 5.0]),], outputs=[u])
            else:
                ad.copy(u, ad.array([5.0, 5.0, 5.0]))
        np.testing.assert_array_equal(u.numpy(), [0.0, 0.0, 0.0] if overwrite == "kernel"
                                      else [5.0, 5.0, 5.0])
        try:
            tape.backward(grads={z: np.ones(3)})
        except ad.AdjointError as err:      # refusing is allowed; naming both steps is required
            assert "square" in str(err)
            continue
        np.testing.assert_array_equal(u.grad.numpy(), [2.0, 4.0, 6.0], err_msg=overwrite)


def test_overwrite_error_mode_names_both_launches(backend, m):
    u = ad.array([1.0, 2.0, 3.0], requires_grad=True)
    z = ad.zeros(3, requires_grad=True)
    tape = ad.Tape(overwrite="error")
    with pytest.raises(ad.AdjointError) as info:
        with tape:
            ad.launch(m.square, 3, inputs=[u], outputs=[z])
            ad.launch(m.scale, 3, inputs=[2.0, ad.zeros(3)], outputs=[u])
    assert "square" in str(info.value) and "scale" in str(info.value)


# --------------------------------------------------------------------------- adjoint launch

PHYSICS = '''
@ad.kernel
def step(m: ad.array(dtype=float), v: ad.array(dtype=float), gravity: float, dt: float,
         v_out: ad.array(dtype=float)):
    i = ad.tid()
    v_out[i] = v[i] * m[i] + gravity * dt * m[i] * m[i]
'''


def test_low_level_adjoint_launch_reference_case(backend, kernel_module):
    """reference case 4 (the project's list of other systems' failures): explicit adjoint arrays, None for scalars."""
    k = kernel_module(PHYSICS).step
    ms = np.array([1.0, 2.0, 0.5])
    vs = np.array([0.3, -1.0, 4.0])
    g, dt = -9.8, 0.01
    m, v = ad.array(ms), ad.array(vs)
    v_out = ad.zeros(3)
    ad.launch(k, 3, inputs=[m, v, g, dt], outputs=[v_out])
    np.testing.assert_allclose(v_out.numpy(), vs * ms + g * dt * ms * ms, rtol=1e-15)
    adj_m = ad.full(3, 1.0)       # accumulated into, not overwritten
    adj_v = ad.zeros(3)
    adj_out = ad.array([1.0, 2.0, 3.0])
    ad.launch(k, 3, inputs=[m, v, g, dt], outputs=[v_out], adj_inputs=[adj_m, adj_v, None, None],
              adj_outputs=[adj_out], adjoint=True)
    w = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(adj_m.numpy(), 1.0 + w * (vs + 2 * g * dt * ms), rtol=1e-14)
    np.testing.assert_allclose(adj_v.numpy(), w * ms, rtol=1e-15)
    # an adjoint for a scalar argument is refused, naming it
    with pytest.raises(ad.LaunchError) as info:
        ad.launch(k, 3, inputs=[m, v, g, dt], outputs=[v_out],
                  adj_inputs=[adj_m, adj_v, ad.zeros(1), None], adj_outputs=[adj_out],
                  adjoint=True)
    assert "gravity" in str(info.value)


def test_adjoint_launch_none_means_the_arrays_grad_as_in_warp(backend, kernel_module):
    """Issue 11 item 8: ``None`` for an array is its ``.grad`` (Warp's meaning); for a
    scalar, and for an array without a gradient, it is no adjoint."""
    k = kernel_module(PHYSICS).step
    ms, vs, g, dt = np.array([1.0, 2.0, 0.5]), np.array([0.3, -1.0, 4.0]), -9.8, 0.01
    m = ad.array(ms, requires_grad=True)
    v = ad.array(vs)                               # no gradient: its adjoint goes nowhere
    v_out = ad.zeros(3, requires_grad=True)
    m.grad.fill_(1.0)                              # accumulated into, not overwritten
    v_out.grad.assign([1.0, 2.0, 3.0])             # the output adjoint, read from .grad
    ad.launch(k, 3, inputs=[m, v, g, dt], outputs=[v_out], adjoint=True,
              adj_inputs=[None, None, None, None], adj_outputs=[None])
    w = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(m.grad.numpy(), 1.0 + w * (vs + 2 * g * dt * ms), rtol=1e-14)
    assert v.grad is None
    # the store handed v_out's adjoint back and cleared it (as with an explicit array)
    np.testing.assert_array_equal(v_out.grad.numpy(), [0.0, 0.0, 0.0])
    # adj_inputs/adj_outputs left out altogether: every array's own .grad
    v_out.grad.assign([1.0, 2.0, 3.0])
    ad.launch(k, 3, inputs=[m, v, g, dt], outputs=[v_out], adjoint=True)
    np.testing.assert_allclose(m.grad.numpy(), 1.0 + 2 * w * (vs + 2 * g * dt * ms), rtol=1e-14)


# --------------------------------------------------------------------------- backends

NONTRIVIAL = '''
@ad.func
def smooth(a: float, b: float) -> float:
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@ad.kernel
def mixer(n: int, x: ad.array(dtype=float), w: ad.array(dtype=float, ndim=2),
          out: ad.array(dtype=float)):
    i = ad.tid()
    acc = 0.0
    h = x[i]
    for k in range(n):
        h = math.tanh(h * w[i, k] + acc)
        if h < 0.0:
            continue
        acc = smooth(acc, h * h)
    j = 0
    while j < w.shape[1]:
        acc = acc + w[i, j] * math.sin(h) if j % 2 == 0 else acc - 0.5 * w[i, j]
        j += 1
    out[i] = acc
'''


def _run_mixer(kernel, xs, ws):
    x = ad.array(xs, requires_grad=True)
    w = ad.array(ws, requires_grad=True)
    out = ad.zeros(len(xs), requires_grad=True)
    tape = ad.Tape()
    with tape:
        ad.launch(kernel, len(xs), inputs=[ws.shape[1], x, w], outputs=[out])
    tape.backward(grads={out: np.linspace(0.5, 1.5, len(xs))})
    return out.numpy().copy(), x.grad.numpy().copy(), w.grad.numpy().copy()


def test_python_and_numba_backends_agree(kernel_module):
    k = kernel_module(NONTRIVIAL).mixer
    rng = np.random.default_rng(3)
    xs = rng.uniform(-1, 1, 6)
    ws = rng.uniform(-1.5, 1.5, (6, 5))
    with ad.backend_scope("python"):
        assert ad.backend_name() == "python"
        py = _run_mixer(k, xs, ws)
    with ad.backend_scope("numba"):
        assert ad.backend_name() == "numba"
        nb = _run_mixer(k, xs, ws)
    assert np.any(py[1] != 0.0) and np.any(py[2] != 0.0)
    for a, b in zip(py, nb):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


SCRIPT = '''
import sys
import numpy as np
import adjoint as ad
import adjoint.runtime
sys.path.insert(0, {dir!r})
import jit_off_kernels as m

assert adjoint.runtime.backend_name() == "python", adjoint.runtime.backend_name()
xs = np.array([0.5, -1.0, 2.0])
x = ad.array(xs, requires_grad=True)
y = ad.zeros(3, requires_grad=True)
tape = ad.Tape()
with tape:
    ad.launch(m.cubic, 3, inputs=[x], outputs=[y])
tape.backward(grads={{y: np.ones(3)}})
assert np.allclose(y.numpy(), xs ** 3 + np.sin(xs)), y.numpy()
assert np.allclose(x.grad.numpy(), 3 * xs ** 2 + np.cos(xs), rtol=1e-14), x.grad.numpy()
print("backend", adjoint.runtime.backend_name())
'''


def test_adjoint_jit_0_runs_plain_python(tmp_path):
    (tmp_path / "jit_off_kernels.py").write_text(textwrap.dedent('''
        import math
        import adjoint as ad

        @ad.kernel
        def cubic(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = x[i] * x[i] * x[i] + math.sin(x[i])
        '''))
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(dir=str(tmp_path)))
    env = dict(os.environ, ADJOINT_JIT="0", ADJOINT_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "backend python" in proc.stdout


def test_shared_finds_buffers_sharing_memory():
    """``buffers.shared``: the positions of the buffers that may share memory with
    another (its fast answer, for arrays owning their memory, must not hide a view)."""
    from adjoint.runtime import buffers
    x, y = np.zeros(10), np.zeros(10)
    assert buffers.shared([x, y]) == frozenset()
    assert buffers.shared([x, y, x]) == {0, 2}
    assert buffers.shared([x[2:5], y, x]) == {0, 2}
    assert buffers.shared([y, x[:5], x[5:]]) == frozenset()      # disjoint parts of one array
    assert buffers.shared([x.reshape(2, 5), x[::2]]) == {0, 1}
    assert buffers.may_alias(x, x) and not buffers.may_alias(x, y)
