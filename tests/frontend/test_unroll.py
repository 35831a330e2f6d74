"""Pass unroll: a small constant-range loop whose variable indexes vector or matrix
components is written out before scalarize (adjoint/frontend/unroll.py).

Which loops it writes out is read from the tree the pass makes; that the written-out
kernel computes what the loop did is checked on every backend: values, gradients and
JVPs the same bit for bit with the pass on and off (``ADJOINT_OPTIMIZE=-unroll``), and
the gradient against float64 central differences.
"""
import inspect

import gast
import numpy as np
import pytest

import adjoint as ad
from adjoint.build import passes, pipeline
from adjoint.frontend.parse import parse, transforming
from adjoint.frontend.unroll import MAX_TRIPS, unroll
from tests.conftest import central_fd

CHOICES = '''
@ad.kernel
def choices(v: ad.array(dtype=ad.vec3), a: ad.array(dtype=float, ndim=2), n: int,
            out: ad.array(dtype=float)):
    i = ad.tid()
    w = v[i]
    s = 0.0
    for k in range(3):              # written out: w[k]
        s += w[k]
    for k in range(n):              # stays: a run-time range
        s += w[k]
    for k in range(3):              # stays: only an array parameter's index
        s += a[i, k]
    for k in range(3):              # stays: a break of its own
        s += w[k]
        if s > 1.0:
            break
    for k in range(%d):             # stays: more iterations than MAX_TRIPS
        s += w[k %% 3]
    for k in range(3):              # stays: assigns its variable
        s += w[k]
        k = 1
    for k in range(4 - 1):          # written out: a range of constants folded
        s -= w[k] * 0.5
    for k in range(2, -1, -1):      # written out as 2, 1, 0 (k read after it)
        s = s * w[k]
    out[i] = s + k
''' % (MAX_TRIPS + 1)


def test_only_the_loops_it_proves_are_written_out(kernel_module):
    k = kernel_module(CHOICES).choices
    lines, start = inspect.getsourcelines(k.pyfunc)
    stays = [start + n for n, line in enumerate(lines) if "# stays" in line]
    with transforming(k.pyfunc):
        pf = parse(k.pyfunc, "kernel")
        done = unroll(pf)
    assert len(stays) == 5
    assert sorted(n.lineno for n in gast.walk(done.node) if isinstance(n, gast.For)) == stays
    assert len([n for n in gast.walk(pf.node) if isinstance(n, gast.For)]) == 8  # (as it was)
    text = pipeline.after_source(k.pyfunc, "kernel", "unroll")
    assert "k = 0" in text          # the value the written-out loop leaves, read after it
    assert "s = s * w[2]" in text and "s = s * w[0]" in text
    assert "s -= w[2] * 0.5" in text


def test_a_kernel_with_no_such_loop_is_left_as_it_is(kernel_module):
    mod = kernel_module('''
        @ad.kernel
        def plain(a: ad.array(dtype=float, ndim=2), out: ad.array(dtype=float)):
            i = ad.tid()
            s = 0.0
            for k in range(3):
                s += a[i, k]
            out[i] = s
        ''')
    with transforming(mod.plain.pyfunc):
        pf = parse(mod.plain.pyfunc, "kernel")
        assert unroll(pf) is pf
    assert "unroll" not in mod.plain.transformed.applied


LOOPS = '''
@ad.kernel
def loops(v: ad.array(dtype=ad.vec3), a: ad.array(dtype=ad.mat33),
          y: ad.array(dtype=ad.vec3), s: ad.array(dtype=float)):
    i = ad.tid()
    w = v[i]
    m = a[i]
    for k in range(3):
        w[k] = w[k] * m[k, 2 - k] + w[2 - k]
    t = 0.0
    for k in range(2, 0, -1):
        for j in range(k, 3):
            t += w[j] * w[k]
    y[i] = w
    s[i] = t * float(k)
'''


@pytest.mark.parametrize("opt", ["all", "-unroll"])
def test_a_read_only_the_written_out_loop_assigns_is_refused_as_without_it(kernel_module,
                                                                           opt):
    mod = kernel_module(LOOPS.replace("float(k)", "float(k + j)"))
    with passes.optimizing(True if opt == "all" else opt), \
            pytest.raises(ad.TransformError, match="'j' may be used before it is assigned"):
        mod.loops.transformed


def _run(kernel, v, a, seeds, dirs):
    arrays = [ad.array(v, dtype=ad.vec3, requires_grad=True),
              ad.array(a, dtype=ad.mat33, requires_grad=True)]
    outs = [ad.zeros(len(v), dtype=ad.vec3, requires_grad=True),
            ad.zeros(len(v), requires_grad=True)]
    with ad.Tape() as tape:
        ad.launch(kernel, len(v), inputs=arrays, outputs=outs)
    tape.backward(grads=dict(zip(outs, seeds)))
    got = [x.numpy().copy() for x in outs] + [x.grad.numpy().copy() for x in arrays]
    ins = [ad.array(v, dtype=ad.vec3), ad.array(a, dtype=ad.mat33)]
    jvp = ad.launch(kernel, len(v), inputs=ins,
                    outputs=[ad.zeros(len(v), dtype=ad.vec3), ad.zeros(len(v))],
                    tangents={x: ad.array(d, dtype=x.dtype) for x, d in zip(ins, dirs)})
    return got + [jvp[name].numpy().copy() for name in ("y", "s")]


def test_written_out_loops_give_the_same_values_gradients_and_tangents(backend,
                                                                        kernel_module):
    k = kernel_module(LOOPS).loops
    rng = np.random.default_rng(3)
    n = 40
    v, a = rng.normal(size=(n, 3)), rng.normal(size=(n, 3, 3))
    seeds = [rng.normal(size=(n, 3)), rng.normal(size=n)]
    dirs = [rng.normal(size=(n, 3)), rng.normal(size=(n, 3, 3))]
    with passes.optimizing("0,+unroll"):      # (the other passes round otherwise on loops)
        assert k.transformed.applied == ("unroll",)
        on = _run(k, v, a, seeds, dirs)
    with passes.optimizing("0"):
        off = _run(k, v, a, seeds, dirs)
    for x, y in zip(on, off):
        np.testing.assert_array_equal(x, y)
    every = _run(k, v, a, seeds, dirs)
    assert "unroll" in k.transformed.applied
    for x, y in zip(every, off):
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-13)

    def loss(vv):
        outs = [ad.zeros(n, dtype=ad.vec3), ad.zeros(n)]
        ad.launch(k, n, inputs=[ad.array(vv, dtype=ad.vec3), ad.array(a, dtype=ad.mat33)],
                  outputs=outs)
        return sum(float(np.sum(s * o.numpy())) for s, o in zip(seeds, outs))
    np.testing.assert_allclose(every[2], central_fd(loss, v), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("opt", ["all", "-unroll"])
def test_the_value_a_written_out_loop_leaves_is_python_s(kernel_module, opt):
    mod = kernel_module(CHOICES)
    rng = np.random.default_rng(0)
    v, a = rng.uniform(0.1, 0.3, size=(5, 3)), rng.normal(size=(5, 3))
    out = ad.zeros(5)
    with passes.optimizing(True if opt == "all" else opt):
        ad.launch(mod.choices, 5, inputs=[ad.array(v, dtype=ad.vec3), ad.array(a), 2],
                  outputs=[out])
    want = []
    for i in range(5):
        w, s = v[i], 0.0
        for k in range(3):
            s += w[k]
        for k in range(2):
            s += w[k]
        for k in range(3):
            s += a[i, k]
        for k in range(3):
            s += w[k]
            if s > 1.0:
                break
        for k in range(MAX_TRIPS + 1):
            s += w[k % 3]
        for k in range(3):
            s += w[k]
            k = 1
        for k in range(3):
            s -= w[k] * 0.5
        for k in range(2, -1, -1):
            s = s * w[k]
        want.append(s + k)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-14)
