"""Kernels with many parameters (Warp's physics kernels take 15-20 arrays).

A thread function's parameters are the kernel's, its adjoints or tangents, the thread
indices and the status array: 15 float arrays make a backward thread function of 32
parameters (the JVP's: the same, with tangents). CPython passes the arguments of a
call with more than 30 of them as one tuple, and numba refused to inline such a call
("Calling a closure with *args"): from 15 float arrays on, the backward and the JVP
did not compile on numba. Found by the fuzzer's Hessian-vector products (the JVP of a
backward has about four times the kernel's parameters).
Thread functions with more than 30 parameters are now called, not inlined
(emit/module.py ``MAX_INLINED_PARAMS``).
"""
import re

import numpy as np

import adjoint as ad
from adjoint.emit.module import MAX_INLINED_PARAMS

N_ARRAYS = 16


def _wide_source(n):
    params = ", ".join(f"x{k}: ad.array(dtype=float)" for k in range(n))
    total = " + ".join(f"{0.1 * (k + 1):.1f} * x{k}[i] * x{k}[i]" for k in range(n))
    return f'''
@ad.kernel
def wide({params}, out: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    s = {total}
    out[i] = ad.sin(s) * x0[i]
    ad.atomic_add(loss, 0, s * x1[i])
'''


def _inputs(n, size):
    rng = np.random.default_rng(3)
    return [rng.uniform(-1.0, 1.0, size) for _ in range(n)]


def _loss(xs, w):
    """The float64 reference: sum(w * out) + loss."""
    s = sum(0.1 * (k + 1) * x * x for k, x in enumerate(xs))
    return float(np.sum(w * np.sin(s) * xs[0]) + np.sum(s * xs[1]))


def test_a_kernel_of_many_arrays_differentiates_on_every_backend(backend, kernel_module):
    m = kernel_module(_wide_source(N_ARRAYS))
    size = 3000 if backend == "numba" else 7         # numba: the parallel plan too
    device = "cuda" if backend == "cuda" else "cpu"
    xs = _inputs(N_ARRAYS, size)
    w = np.random.default_rng(4).uniform(0.5, 1.5, size)
    arrays = [ad.array(x, requires_grad=True, device=device) for x in xs]
    out = ad.zeros(size, requires_grad=True, device=device)
    loss = ad.zeros(1, requires_grad=True, device=device)
    with ad.Tape() as tape:
        ad.launch(m.wide, dim=size, inputs=arrays, outputs=[out, loss])
    tape.backward(grads={out: w, loss: np.ones(1)})
    h = 1e-6
    for k in (0, 1, N_ARRAYS - 1):
        e = size // 2
        plus = [x.copy() for x in xs]
        minus = [x.copy() for x in xs]
        plus[k][e] += h
        minus[k][e] -= h
        fd = (_loss(plus, w) - _loss(minus, w)) / (2 * h)
        np.testing.assert_allclose(arrays[k].grad.numpy()[e], fd, rtol=1e-6, atol=1e-8)
    # forward mode along one array
    v = np.random.default_rng(5).uniform(-1.0, 1.0, size)
    arrays = [ad.array(x, device=device) for x in xs]
    out2 = ad.zeros(size, device=device)
    loss2 = ad.zeros(1, device=device)
    dots = ad.launch(m.wide, dim=size, inputs=arrays, outputs=[out2, loss2],
                     tangents={"x2": ad.array(v, device=device)})
    plus, minus = [x.copy() for x in xs], [x.copy() for x in xs]
    plus[2] += h * v
    minus[2] -= h * v
    fd = (_loss(plus, w) - _loss(minus, w)) / (2 * h)
    got = float(np.sum(w * dots["out"].numpy()) + dots["loss"].numpy()[0])
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


def test_thread_functions_over_the_limit_are_called_not_inlined(kernel_module):
    """The decorator of each thread function follows its number of parameters."""
    m = kernel_module(_wide_source(N_ARRAYS) + _wide_source(3).replace("def wide(", "def narrow("))
    text = ad.generate(m.__file__)
    decorators = {n: d for d, n in re.findall(r"(@rt\.\w+)\ndef (\w+_thread)\(", text)}
    params = {n: len(p.split(",")) for n, p in re.findall(r"def (\w+_thread)\(([^)]*)\)", text)}
    wide = [n for n in decorators if n.startswith("wide_")]
    narrow = [n for n in decorators if n.startswith("narrow_")]
    assert wide and narrow
    for n in wide + narrow:
        inline = params[n] <= MAX_INLINED_PARAMS
        assert decorators[n] == ("@rt.jit_inline" if inline else "@rt.jit"), (n, params[n])
    assert all(params[n] > MAX_INLINED_PARAMS for n in wide if "backward" in n or "jvp" in n)
    assert all(decorators[n] == "@rt.jit_inline" for n in narrow)
