"""``ad.grad``, ``ad.value_and_grad`` and ``ad.jvp`` of a func that takes arrays, called
from plain Python on numpy arrays.

A func with an array parameter has no compiled function of its own: its calls are
inlined into the caller (pass inline). Called from Python, it runs inside a kernel of
one thread printed for it (``call_kernel``): the arrays are the kernel's, each float
parameter a one-element array (a kernel's scalars have no adjoint), each int or bool a
scalar, and the func's values are stored into ``ret``. The gradient is that kernel's
backward on a tape, seeded with 1 on the value; the JVP, its launch with tangents.
It runs on the CPU, as a func of numbers does, on copies of the arrays: the caller's
are never changed.
"""
import numpy as np

from .api import Kernel
from .errors import AdjointError
from .printed import compile_printed
from .runtime.array import array, zeros
from .runtime.launch import launch
from .runtime.tape import Tape


def takes_arrays(f):
    """Whether func ``f`` has an array parameter."""
    return any(p.is_array for p in f.transformed.pf.params)


def call_kernel(f):
    """The one-thread kernel ``<f>_call(<f's parameters>, ret)`` storing ``f``'s values
    into ``ret`` (see the module docstring); made once per func."""
    cached = f.__dict__.get("_call_kernel")
    if cached is not None:
        return cached
    from .emit.user import annotation     # (the transformer: not imported by a warm start)
    tr = f.transformed
    kinds = [str(k) for k in tr.return_kinds]
    if any(k not in ("float", "int", "bool") for k in kinds):
        raise AdjointError(f"func '{f.name}' returns {', '.join(kinds)}: called from Python "
                           "with arrays, a func returns numbers")
    params, args = [], []
    for p in tr.pf.params:
        if p.is_array or p.kind != "float":
            params.append(f"{p.name}: {annotation(p)}")
            args.append(p.name)
        else:
            params.append(f"{p.name}: ad.array(dtype=ad.{p.type.name})")
            args.append(f"{p.name}[0]")
    names = [f"value{k}" for k in range(len(kinds))]
    name = f"{f.name}_call"
    text = (f"def {name}({', '.join(params)}, ret: ad.array(dtype=ad.float64)):\n"
            f"    i = ad.tid()\n"
            f"    {', '.join(names)} = {f.name}({', '.join(args)})\n" +
            "".join(f"    ret[{k}] = float({v})\n" for k, v in enumerate(names)))
    f.__dict__["_call_kernel"] = Kernel(compile_printed(text, name, {f.name: f}))
    return f.__dict__["_call_kernel"]


def _inputs(f, args, what, requires_grad):
    """The kernel's arguments for the call ``f(*args)``: a copy of each array (checked
    against its parameter), a one-element array per float, an int per int."""
    params = f.transformed.pf.params
    if len(args) != len(params):
        raise TypeError(f"{what} of func '{f.name}' takes {len(params)} arguments "
                        f"({', '.join(p.name for p in params)}), got {len(args)}")
    out = []
    for p, a in zip(params, args):
        if p.is_array:
            data = np.asarray(a.numpy() if hasattr(a, "numpy") else a)
            if data.ndim != p.type.ndim or data.dtype.kind not in "fiub":
                raise TypeError(f"{what} of func '{f.name}': parameter '{p.name}' takes an "
                                f"array of {p.type.ndim} dimension(s), got {data.ndim} "
                                f"({data.dtype})")
            out.append(array(data.astype(p.type.dtype, copy=True), device="cpu",
                             requires_grad=requires_grad and p.kind == "float"))
        elif p.kind == "float":
            out.append(array(np.array([float(a)], p.type), device="cpu",
                             requires_grad=requires_grad))
        else:
            out.append(int(a))
    return out


def _taken(params, k, arr):
    """What the caller gets for parameter ``k`` from its kernel argument's ``arr``: the
    array itself (a numpy copy), or the float of a float parameter."""
    return arr.copy() if params[k].is_array else float(arr[0])


def grad(g, args):
    """``ad.grad(f)(*args)`` (``g``: the ``derivatives.Grad``) of a func taking arrays."""
    f = g.f
    if len(f.return_kinds) != 1:
        raise AdjointError(f"ad.grad needs a func returning one float; '{f.name}' returns "
                           f"{len(f.return_kinds)} value(s)")
    inputs = _inputs(f, args, "ad.grad", requires_grad=True)
    ret = _ret(1)
    with Tape() as tape:
        launch(call_kernel(f), 1, inputs=inputs, outputs=[ret])
    tape.backward(grads={ret: np.ones(1)})
    params = f.transformed.pf.params
    picked = [_taken(params, k, inputs[k].grad.numpy()) for k in g.positions]
    out = tuple(picked) if g.many else picked[0]
    return (float(ret.numpy()[0]), out) if g.with_value else out


def jvp(f, primals, tangents):
    """``ad.jvp(f, primals, tangents)`` of a func taking arrays: ``(value, tangent)``, a
    tangent per array parameter shaped like its array (zeros where left out: ``None``)."""
    inputs = _inputs(f, primals, "ad.jvp", requires_grad=False)
    params = f.transformed.pf.params
    given = {}
    for p, arg, t in zip(params, inputs, tangents):
        if t is None or p.kind != "float":
            continue
        dot = np.asarray(t.numpy() if hasattr(t, "numpy") else t, np.float64)
        if p.is_array and dot.shape != arg.shape:
            raise TypeError(f"ad.jvp of func '{f.name}': the tangent of '{p.name}' has shape "
                            f"{dot.shape}, its array {arg.shape}")
        given[p.name] = array(dot.astype(arg.dtype) if p.is_array else
                              np.array([float(dot)], arg.dtype), device="cpu")
    n = len(f.return_kinds)
    ret = _ret(n)
    dots = launch(call_kernel(f), 1, inputs=inputs, outputs=[ret], tangents=given)
    values, tans = ret.numpy(), dots["ret"].numpy()
    kinds = [str(k) for k in f.return_kinds]
    vals = tuple(float(v) if k == "float" else int(v) for v, k in zip(values, kinds))
    tans = tuple(float(t) for t in tans)
    return (vals[0], tans[0]) if n == 1 else (vals, tans)


def _ret(n):
    return zeros(n, device="cpu", requires_grad=True)
