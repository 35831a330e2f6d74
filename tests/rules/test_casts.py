"""Casts in kernels: ``ad.float32(x)``, ``ad.float64(x)`` (Warp's ``wp.float32(x)``, ...)
and ``float(x)`` pass the gradient; ``int(x)``, ``ad.int64(x)`` and the narrower
``ad.int8`` ... ``ad.uint32`` (Warp's ``wp.uint8(x)``, ...) truncate, wrap to their width
as C converts, and have no derivative (adjoint/rules/builtins_.py, runtime/intops.py).

Two tables, one kernel per row, on every backend (python, numba, the CUDA simulator):

- ``CAST_INT_CASES``: int results of int64 operands ``p``, ``q`` and a float ``x``, bit for
  bit against NumPy's conversions (``astype(np.uint8)``: C's wrap-around) written here;
- ``CAST_FLOAT_CASES``: float results through casts, against NumPy; the tape's gradient
  and the JVP against central differences in float64.

tests/rules/test_integers.py uses the same machinery for the bit operations.
"""
from dataclasses import dataclass

import numpy as np
import pytest

import adjoint as ad
from tests.conftest import central_fd

N = 6
P0 = np.array([5, -7, 1000, 123456789, 0, -2 ** 40])
Q0 = np.array([3, 12, -1, 77, 9, 5])
X0 = np.array([0.25, -1.9, 0.0, 3.3, 2.6, -0.55])
# the float cases: away from the jumps (x = 0 for nonzero), values whose differences are exact
P1 = np.array([5, -7, 1000, 1234, 0, -20])
X1 = np.array([0.25, -1.9, 0.1, 3.3, 2.6, -0.55])


def _wrap(v, bits, signed):
    """NumPy's int64 ``v`` wrapped to ``bits`` bits (C's conversion), as int64."""
    t = {(8, True): np.int8, (16, True): np.int16, (32, True): np.int32,
         (8, False): np.uint8, (16, False): np.uint16, (32, False): np.uint32}[bits, signed]
    return np.asarray(v, np.int64).astype(t).astype(np.int64)


@dataclass(frozen=True)
class Case:
    name: str
    expr: str           # of p, q (int64) and x (float64)
    ref: object         # of numpy arrays p, q, x


CAST_INT_CASES = [
    Case("int8", "ad.int8(p)", lambda p, q, x: _wrap(p, 8, True)),
    Case("int16", "ad.int16(p * 1000)", lambda p, q, x: _wrap(p * 1000, 16, True)),
    Case("int32", "ad.int32(p * 100000)", lambda p, q, x: _wrap(p * 100000, 32, True)),
    Case("uint8", "ad.uint8(p)", lambda p, q, x: _wrap(p, 8, False)),
    Case("uint16", "ad.uint16(p - q)", lambda p, q, x: _wrap(p - q, 16, False)),
    Case("uint32", "ad.uint32(p) - q", lambda p, q, x: _wrap(p, 32, False) - q),
    Case("casts_of_floats", "ad.int64(x * 10.0) + ad.uint8(x * 100.0) + ad.int8(x * -90.0)",
         lambda p, q, x: np.trunc(x * 10).astype(np.int64) +
         _wrap(np.trunc(x * 100).astype(np.int64), 8, False) +
         _wrap(np.trunc(x * -90).astype(np.int64), 8, True)),
]

CAST_FLOAT_CASES = [
    Case("float32_cast", "ad.float32(x) * x + ad.float64(x * x)", lambda p, q, x: 2 * x * x),
    Case("float_of_int", "ad.float64(p) * x + ad.float32(q) * x * x + float(p * q)",
         lambda p, q, x: p * x + q * x * x + p * q),
    Case("int_cast_stops_the_gradient", "x * float(ad.int32(x * 7.0)) + float(ad.uint8(x))",
         lambda p, q, x: x * np.trunc(x * 7) + _wrap(np.trunc(x).astype(np.int64), 8, False)),
    Case("int64_cast", "x * float(ad.int64(x * 3.1) + int(x * 4.3))",
         lambda p, q, x: x * (np.trunc(x * 3.1) + np.trunc(x * 4.3))),
]


def kernel_source(case, out_dtype, ns="ad"):
    expr = case.expr.replace("ad.", f"{ns}.")
    return (f"@{ns}.kernel\n"
            f"def k_{case.name}(a: {ns}.array(dtype=int), b: {ns}.array(dtype=int), "
            f"c: {ns}.array(dtype=float), out: {ns}.array(dtype={out_dtype})):\n"
            f"    i = {ns}.tid()\n    p = a[i]\n    q = b[i]\n    x = c[i]\n"
            f"    out[i] = {expr}\n\n\n")


def load_kernels(tmp_path_factory, stem, int_cases, float_cases):
    """A module of one kernel per row (``k_<name>``): int rows store into an int array,
    float rows into a float array."""
    import importlib.util
    import sys
    path = tmp_path_factory.mktemp(stem) / f"{stem}_kernels.py"
    path.write_text("import adjoint as ad\n\n\n" +
                    "".join(kernel_source(c, "int") for c in int_cases) +
                    "".join(kernel_source(c, "float") for c in float_cases))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return load_kernels(tmp_path_factory, "casts", CAST_INT_CASES, CAST_FLOAT_CASES)


def _device():
    return "cuda" if ad.backend_name() == "cuda" else "cpu"


def _launch(kernel, x, dtype, tape=None, p=P0):
    dev = _device()
    c = ad.array(x, requires_grad=True, device=dev)
    out = ad.zeros(N, dtype=dtype, requires_grad=dtype is float, device=dev)
    args = dict(dim=N, inputs=[ad.array(p, device=dev), ad.array(Q0, device=dev), c],
                outputs=[out])
    if tape is None:
        ad.launch(kernel, **args)
    else:
        with tape:
            ad.launch(kernel, **args)
    return c, out


def check_int_case(kernels, case):
    _, out = _launch(getattr(kernels, "k_" + case.name), X0, int)
    got = out.numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, case.ref(P0, Q0, X0))


def check_float_case(kernels, case):
    kernel = getattr(kernels, "k_" + case.name)
    w = np.linspace(0.5, 1.5, N)
    tape = ad.Tape()
    c, out = _launch(kernel, X1, float, tape, P1)
    np.testing.assert_allclose(out.numpy(), case.ref(P1, Q0, X1), rtol=1e-12, atol=1e-12)
    tape.backward(grads={out: w})

    def loss(x):
        return w @ _launch(kernel, x, float, p=P1)[1].numpy()
    np.testing.assert_allclose(c.grad.numpy(), central_fd(loss, X1), rtol=1e-6, atol=1e-7)
    dev = _device()
    d = np.linspace(-1.0, 1.0, N)
    dots = ad.launch(kernel, N, inputs=[ad.array(P1, device=dev), ad.array(Q0, device=dev),
                                        ad.array(X1, device=dev)],
                     outputs=[ad.zeros(N, device=dev)], tangents={"c": ad.array(d, device=dev)})
    h = 1e-6
    fd = (_launch(kernel, X1 + h * d, float, p=P1)[1].numpy() -
          _launch(kernel, X1 - h * d, float, p=P1)[1].numpy()) / (2 * h)
    np.testing.assert_allclose(dots["out"].numpy(), fd, rtol=1e-6, atol=1e-7)



@pytest.mark.parametrize("case", CAST_INT_CASES, ids=[c.name for c in CAST_INT_CASES])
def test_int_casts_wrap_as_c_converts(backend, kernels, case):
    check_int_case(kernels, case)


@pytest.mark.parametrize("case", CAST_FLOAT_CASES, ids=[c.name for c in CAST_FLOAT_CASES])
def test_casts_pass_or_stop_the_gradient(backend, kernels, case):
    check_float_case(kernels, case)


def test_casts_from_plain_python_are_numpy_types():
    """Outside kernels the names are NumPy's dtypes (a func called from Python)."""
    assert ad.uint8 is np.uint8 and ad.float32 is np.float32 and ad.int8 is np.int8
