"""A kernel or func sees what its names refer to at launch (adjoint/build/bindings.py).

A script or a notebook that redefines an ``@ad.func`` (or a number a kernel reads, or a
func's hand-written gradient) and launches a kernel it did not redefine gets the new
definition, as Python (and Warp, which rebuilds the module) would: the kernel's module
is rebuilt, never kept stale (issue 37, item 2). Also through a func calling a func, a
kernel sharing the func with another, the backward on a tape, the JVP, and
``ad.grad``/``ad.jvp``/``ad.hessian`` of a func called from Python. A func redefined
with a signature its callers cannot call is an error naming the caller's line.

A redefinition runs from a file of its own into the module's globals, as a notebook
cell runs in the notebook's globals.
"""
import itertools
import textwrap

import numpy as np
import pytest

import adjoint as ad
from adjoint.errors import TransformError

_cells = itertools.count()

SRC = '''
    SCALE = 1.0

    @ad.func
    def inner(x: float) -> float:
        return x * 10.0

    @ad.func
    def outer(x: float) -> float:
        return inner(x) * SCALE

    @ad.kernel
    def direct(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = inner(x[i]) * x[i]

    @ad.kernel
    def nested(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = outer(x[i]) * x[i]
'''

X0 = np.array([0.5, -1.5, 2.0])


@pytest.fixture
def cell(tmp_path):
    """``cell(module, source)``: run ``source`` in ``module``'s globals from a file of its
    own (a notebook cell)."""
    def run(module, source):
        path = tmp_path / f"cell_{next(_cells)}.py"
        path.write_text(textwrap.dedent(source))
        exec(compile(path.read_text(), str(path), "exec"), vars(module))   # noqa: S102
    return run


def _device(backend):
    return "cuda" if backend == "cuda" else "cpu"


def _run(kernel, backend, x0=X0):
    """(y, dy/dx seeded with ones, the JVP along ones) of ``kernel`` at ``x0``."""
    dev = _device(backend)
    x = ad.array(x0, device=dev, requires_grad=True)
    y = ad.zeros(len(x0), device=dev, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(kernel, dim=len(x0), inputs=[x], outputs=[y])
    tape.backward(grads={y: np.ones(len(x0))})
    dots = ad.launch(kernel, dim=len(x0), inputs=[ad.array(x0, device=dev)],
                     outputs=[ad.zeros(len(x0), device=dev)],
                     tangents={"x": ad.array(np.ones(len(x0)), device=dev)})
    return y.numpy(), x.grad.numpy(), dots["y"].numpy()


def _expect(got, c):
    """y = c x^2: its value, gradient and tangent."""
    y, g, t = got
    np.testing.assert_allclose(y, c * X0 ** 2, rtol=1e-14)
    np.testing.assert_allclose(g, 2 * c * X0, rtol=1e-14)
    np.testing.assert_allclose(t, 2 * c * X0, rtol=1e-14)


SCOPES = '''
    class cfg:
        scale = 1.0

    @ad.kernel
    def configured(x: ad.array(dtype=float), y: ad.array(dtype=float)):
        i = ad.tid()
        y[i] = inner(x[i]) * x[i] * cfg.scale

    def enclosing():
        h = inner

        @ad.kernel
        def enclosed(x: ad.array(dtype=float), y: ad.array(dtype=float)):
            i = ad.tid()
            y[i] = h(x[i]) * x[i]

        def rebind(f):
            nonlocal h
            h = f
        return enclosed, rebind
'''

REDEFINE_INNER = '''
    @ad.func
    def inner(x: float) -> float:
        return x * 100.0
'''


def test_a_redefined_func_is_seen_by_the_kernel_calling_it(backend, kernel_module, cell):
    m = kernel_module(SRC)
    _expect(_run(m.direct, backend), 10.0)
    cell(m, REDEFINE_INNER)
    _expect(_run(m.direct, backend), 100.0)
    cell(m, REDEFINE_INNER.replace("100.0", "-3.0"))
    _expect(_run(m.direct, backend), -3.0)


def test_a_func_calling_a_redefined_func(backend, kernel_module, cell):
    """Transitively: the kernel calls ``outer``, which is not redefined, and ``outer`` calls
    ``inner``, which is; a second kernel sharing ``outer`` sees it too."""
    m = kernel_module(SRC)
    _expect(_run(m.nested, backend), 10.0)
    _expect(_run(m.direct, backend), 10.0)
    cell(m, REDEFINE_INNER)
    _expect(_run(m.nested, backend), 100.0)
    _expect(_run(m.direct, backend), 100.0)
    cell(m, REDEFINE_INNER.replace("100.0", "7.0"))
    _expect(_run(m.direct, backend), 7.0)       # (this one first now)
    _expect(_run(m.nested, backend), 7.0)


def test_a_rebound_number_is_seen(backend, kernel_module, cell):
    m = kernel_module(SRC)
    _expect(_run(m.nested, backend), 10.0)
    cell(m, "SCALE = 0.5\n")
    _expect(_run(m.nested, backend), 5.0)


def test_a_class_attribute_and_a_closure_cell(backend, kernel_module, cell):
    """A class attribute set, a closure's cell rebound; a global of the closure's name
    rebound changes nothing (Python reads the cell)."""
    m = kernel_module(SRC + SCOPES)
    _expect(_run(m.configured, backend), 10.0)
    m.cfg.scale = 2.0
    _expect(_run(m.configured, backend), 20.0)
    enclosed, rebind = m.enclosing()
    _expect(_run(enclosed, backend), 10.0)
    cell(m, REDEFINE_INNER)
    _expect(_run(enclosed, backend), 10.0)
    _expect(_run(m.configured, backend), 200.0)
    rebind(m.inner)
    _expect(_run(enclosed, backend), 100.0)


def test_a_gradient_given_after_a_launch_is_used(backend, kernel_module, cell):
    m = kernel_module(SRC)
    _expect(_run(m.direct, backend), 10.0)
    cell(m, '''
        @ad.func_grad(inner)
        def inner_grad(x: float, adj_ret: float) -> float:
            return adj_ret * 1000.0
    ''')
    dev = _device(backend)
    x = ad.array(X0, device=dev, requires_grad=True)
    y = ad.zeros(len(X0), device=dev, requires_grad=True)
    with ad.Tape() as tape:
        ad.launch(m.direct, dim=len(X0), inputs=[x], outputs=[y])
    tape.backward(grads={y: np.ones(len(X0))})
    np.testing.assert_allclose(x.grad.numpy(), 1000.0 * X0 + 10.0 * X0, rtol=1e-14)


def test_nothing_is_rebuilt_when_nothing_changed(backend, kernel_module, cell):
    m = kernel_module(SRC)
    _run(m.nested, backend)
    tree, spec = m.nested.transformed, m.nested.spec_for(_device(backend))
    cell(m, "UNRELATED = 3.0\nSCALE = 1.0\n")     # (an equal number: the same tree)
    _run(m.nested, backend)
    assert m.nested.transformed is tree and m.nested.spec_for(_device(backend)) is spec


def test_a_redefinition_with_another_signature(backend, kernel_module, cell):
    m = kernel_module(SRC)
    _expect(_run(m.direct, backend), 10.0)
    cell(m, '''
        @ad.func
        def inner(x: float, k: float = 4.0) -> float:
            return x * k
    ''')
    _expect(_run(m.direct, backend), 4.0)
    cell(m, '''
        @ad.func
        def inner(x: float, k: float) -> float:
            return x * k
    ''')
    with pytest.raises(TransformError) as err:
        _run(m.direct, backend)
    msg = str(err.value)
    assert "func 'inner' (x, k): parameter 'k' is not given" in msg, msg
    assert f"{m.__file__}:" in msg and "y[i] = inner(x[i]) * x[i]" in msg, msg


@pytest.fixture(params=["python", "numba"])
def cpu(request):
    """Funcs called from plain Python run on the CPU backends."""
    with ad.backend_scope(request.param):
        yield request.param


def test_derivatives_from_python_see_a_redefined_func(cpu, kernel_module, cell):
    m = kernel_module(SRC)
    outer = m.outer
    assert ad.grad(outer)(2.0) == 10.0 and ad.jvp(outer, (2.0,), (1.0,)) == (20.0, 10.0)
    dd = ad.grad(ad.grad(outer))
    assert dd(2.0) == 0.0 and ad.hessian(outer)(2.0) == 0.0
    cell(m, REDEFINE_INNER.replace("x * 100.0", "x * x * 100.0"))
    assert outer(2.0) == 400.0            # (plain Python)
    assert ad.grad(outer)(2.0) == 400.0
    assert ad.jvp(outer, (2.0,), (1.0,)) == (400.0, 400.0)
    assert dd(2.0) == 200.0
    for mode in ("fwd-rev", "rev-fwd"):
        assert ad.hessian(outer, mode=mode)(2.0) == 200.0


def test_a_kernel_hvp_sees_a_redefined_func(cpu, kernel_module, cell):
    m = kernel_module(SRC)
    args = dict(dim=len(X0), inputs=[ad.array(X0)], outputs=[ad.zeros(len(X0))],
                v=[np.ones(len(X0))])
    np.testing.assert_allclose(ad.autograd.hvp(m.nested, **args)[0], 20.0, rtol=1e-14)
    cell(m, REDEFINE_INNER)
    for mode in ("fwd-rev", "rev-fwd"):
        np.testing.assert_allclose(ad.autograd.hvp(m.nested, mode=mode, **args)[0], 200.0,
                                   rtol=1e-14)
