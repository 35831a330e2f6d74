"""``ad.grad``, ``ad.value_and_grad`` and ``ad.jvp`` of a func that takes arrays or
vectors, called from plain Python on numpy arrays.

Such a func has no compiled function Python can call with its arguments: a call of a
func taking arrays is inlined into its caller (pass inline), and a vector is passed
as its components (pass scalarize). Called from Python, it runs inside a kernel of one
thread printed for it (``call_kernel``), one parameter per parameter of the func (a
``Slot``): an array is the kernel's array, a vector or a float a one-element array of
it (a kernel's scalars have no adjoint), an int or a bool a scalar; the func's values
are stored into ``ret``. The gradient is that kernel's backward on a tape, seeded with
1 on the value; the JVP, its launch with tangents. It runs on the CPU, as a func of
numbers does, on copies of the arrays: the caller's are never changed.
"""
import inspect
from dataclasses import dataclass

import numpy as np

from ..api import Kernel
from ..errors import AdjointError
from .printed import compile_printed
from ..runtime.array import array, zeros
from ..runtime.launch import launch
from ..runtime.structs import is_struct
from ..runtime.tape import Tape
from ..runtime.types import ArrayType, scalar_dtype
from ..runtime.vectypes import VectorType


@dataclass(frozen=True)
class Slot:
    """One parameter of a func as its call kernel takes it. ``kind``: "array",
    "vector", "float" (both passed as a one-element array: ``annotation``, the kernel
    parameter's) or "int" (an int or a bool, passed as it is)."""
    name: str
    kind: str
    annotation: object

    @property
    def dtype(self):
        """What ``ad.array`` makes the argument of: the vector type, or the dtype."""
        return self.annotation.vtype or self.annotation.dtype

    @property
    def differentiable(self):
        return self.kind in ("vector", "float") or (
            self.kind == "array" and np.dtype(self.annotation.dtype).kind == "f")


def slots(f):
    """The ``Slot`` of each parameter of func ``f``, from its signature."""
    out = []
    for p in inspect.signature(f.pyfunc).parameters.values():
        a = p.annotation
        if isinstance(a, ArrayType):
            out.append(Slot(p.name, "array", a))
        elif isinstance(a, VectorType):
            out.append(Slot(p.name, "vector", array(dtype=a)))
        elif is_struct(a):
            raise AdjointError(f"func '{f.name}' takes a struct ('{p.name}'): called from "
                               "Python, a func takes numbers, vectors and arrays")
        else:
            dt = np.dtype(np.float64) if a is inspect.Parameter.empty else scalar_dtype(a)
            out.append(Slot(p.name, "float", array(dtype=dt)) if dt.kind == "f" else
                       Slot(p.name, "int", a))
    return out


def via_kernel(f):
    """Whether ``f`` is called from Python through its call kernel (it takes an array or
    a vector), not through its own compiled adjoint and JVP (a struct: ``slots`` refuses
    it by name)."""
    return any(isinstance(p.annotation, (ArrayType, VectorType)) or is_struct(p.annotation)
               for p in inspect.signature(f.pyfunc).parameters.values())


def argnum_positions(f, argnums, what, names, differentiable, why):
    """``(positions, many)``: ``argnums`` (a position, or a tuple of them) as positions
    among ``f``'s parameters ``names``, each of which must be ``differentiable`` (else a
    ValueError saying ``why``); ``many``: whether a tuple was given."""
    many = isinstance(argnums, (tuple, list))
    nums = tuple(argnums) if many else (argnums,)
    for k in nums:
        if not isinstance(k, int) or not -len(names) <= k < len(names):
            raise ValueError(f"{what}: argnums {argnums!r} is not a parameter position of "
                             f"func '{f.name}' ({len(names)} parameters)")
        if not differentiable[k]:
            raise ValueError(f"{what}: parameter '{names[k]}' of func '{f.name}' {why}")
    return [k % len(names) for k in nums], many


def positions(f, argnums, what):
    """``argnum_positions`` among ``f``'s own parameters, arrays and vectors included."""
    ss = slots(f)
    return argnum_positions(f, argnums, what, [s.name for s in ss],
                            [s.differentiable for s in ss],
                            "has no derivative (an int, a bool or an array of them)")


def call_kernel(f):
    """The one-thread kernel ``<f>_call(<f's parameters>, ret)`` storing ``f``'s values
    into ``ret`` (see the module docstring); made once per func."""
    cached = f.built.get("call_kernel")
    if cached is not None:
        return cached
    kinds = [str(k) for k in f.return_kinds]
    if any(k not in ("float", "int", "bool") for k in kinds):
        raise AdjointError(f"func '{f.name}' returns {', '.join(kinds)}: called from Python "
                           "with arrays or vectors, a func returns numbers")
    ss = slots(f)
    scope = {f.name: f, "ret_type": array(dtype=np.float64)}
    scope.update({f"type{k}": s.annotation for k, s in enumerate(ss)})
    params = [f"{s.name}: type{k}" for k, s in enumerate(ss)]
    args = [f"{s.name}[0]" if s.kind in ("vector", "float") else s.name for s in ss]
    names = [f"value{k}" for k in range(len(kinds))]
    name = f"{f.name}_call"
    text = (f"def {name}({', '.join(params)}, ret: ret_type):\n"
            f"    i = ad.tid()\n"
            f"    {', '.join(names)} = {f.name}({', '.join(args)})\n" +
            "".join(f"    ret[{k}] = float({v})\n" for k, v in enumerate(names)))
    f.built["call_kernel"] = Kernel(compile_printed(text, name, scope))
    return f.built["call_kernel"]


def _inputs(f, args, what, requires_grad):
    """The kernel's arguments for the call ``f(*args)``: a copy of each array and vector
    (checked against its parameter), a one-element array per float, an int per int."""
    ss = slots(f)
    left = list(inspect.signature(f.pyfunc).parameters.values())[len(args):]
    if left and all(p.default is not inspect.Parameter.empty for p in left):
        args = (*args, *(p.default for p in left))      # (the defaults of those left out)
    if len(args) != len(ss):
        raise TypeError(f"{what} of func '{f.name}' takes {len(ss)} arguments "
                        f"({', '.join(s.name for s in ss)}), got {len(args)}")
    out = []
    for s, a in zip(ss, args):
        if s.kind == "int":
            out.append(int(a))
            continue
        grad = requires_grad and s.differentiable
        if s.kind == "float":
            out.append(array(np.array([float(a)], s.annotation.dtype), device="cpu",
                             requires_grad=grad))
            continue
        data = np.asarray(a.numpy() if hasattr(a, "numpy") else a)
        want = _shape(s)
        if data.ndim != len(want) or any(w is not None and w != n for w, n in
                                         zip(want, data.shape)) or data.dtype.kind not in "fiub":
            raise TypeError(f"{what} of func '{f.name}': parameter '{s.name}' takes "
                            f"{_describe(s)}, got an array of shape {data.shape} "
                            f"({data.dtype})")
        if s.kind == "vector":
            data = data.reshape((1,) + data.shape)
        out.append(array(data, dtype=s.dtype, device="cpu", requires_grad=grad))
    return out


def _shape(s):
    """The shape an argument for slot ``s`` has (None: any length)."""
    vshape = tuple(s.annotation.vtype.shape) if s.annotation.vtype else ()
    return vshape if s.kind == "vector" else (None,) * s.annotation.ndim + vshape


def _describe(s):
    if s.kind == "vector":
        return f"an {s.dtype} (an array of shape {_shape(s)})"
    return f"an array of {s.annotation.ndim} index dimension(s) of {s.dtype}"


def _taken(s, buf):
    """What the caller gets for slot ``s`` from its kernel argument's buffer ``buf``: an
    array's copy, a vector's components, a float."""
    if s.kind == "array":
        return buf.copy()
    return buf[0].copy() if s.kind == "vector" else float(buf[0])


def grad(g, args):
    """``ad.grad(f)(*args)`` (``g``: the ``derivatives.Grad``) through the call kernel."""
    f = g.f
    if len(f.return_kinds) != 1:
        raise AdjointError(f"ad.grad needs a func returning one float; '{f.name}' returns "
                           f"{len(f.return_kinds)} value(s)")
    inputs = _inputs(f, args, "ad.grad", requires_grad=True)
    ret = _ret(1)
    with Tape() as tape:
        launch(call_kernel(f), 1, inputs=inputs, outputs=[ret])
    tape.backward(grads={ret: np.ones(1)})
    ss = slots(f)
    picked = [_taken(ss[k], inputs[k].grad.numpy()) for k in g.positions]
    out = tuple(picked) if g.many else picked[0]
    return (float(ret.numpy()[0]), out) if g.with_value else out


def jvp(f, primals, tangents):
    """``ad.jvp(f, primals, tangents)`` through the call kernel: ``(value, tangent)``; a
    tangent per array or vector shaped like it (``None``: zeros)."""
    inputs = _inputs(f, primals, "ad.jvp", requires_grad=False)
    tangents = (*tangents, *(None,) * (len(inputs) - len(tangents)))
    given = {}
    for s, arg, t in zip(slots(f), inputs, tangents):
        if t is None or not s.differentiable:
            continue
        dot = np.asarray(t.numpy() if hasattr(t, "numpy") else t, np.float64)
        shape = tuple(arg.shape[1:]) if s.kind == "vector" else tuple(arg.shape)
        if s.kind != "float" and dot.shape != shape:
            raise TypeError(f"ad.jvp of func '{f.name}': the tangent of '{s.name}' has shape "
                            f"{dot.shape}, its argument {shape}")
        dot = dot.reshape(arg.shape) if s.kind != "float" else np.array([float(dot)])
        given[s.name] = array(dot, dtype=s.dtype, device="cpu")
    n = len(f.return_kinds)
    ret = _ret(n)
    dots = launch(call_kernel(f), 1, inputs=inputs, outputs=[ret], tangents=given)
    values, tans = ret.numpy(), dots["ret"].numpy()
    kinds = [str(k) for k in f.return_kinds]
    vals = tuple(float(v) if k == "float" else int(v) for v, k in zip(values, kinds))
    tans = tuple(float(t) for t in tans)
    return (vals[0], tans[0]) if n == 1 else (vals, tans)


def hessian(f, positions, many, args, mode):
    """``ad.hessian(f, argnums)(*args)`` through the call kernel: a Hessian-vector product
    of the kernel (``ad.autograd.hvp``) per component of each parameter in
    ``positions``. A block is shaped as its two parameters side by side (``(3, 3)`` for
    two vec3, ``(n,)`` for an array of n and a float); a float's is a float."""
    from .autograd import CHUNK, hvp
    if len(f.return_kinds) != 1:
        raise AdjointError(f"ad.hessian needs a func returning one float; '{f.name}' returns "
                           f"{len(f.return_kinds)} value(s)")
    inputs, ss = _inputs(f, args, "ad.hessian", requires_grad=False), slots(f)
    shapes = {k: () if ss[k].kind == "float" else tuple(inputs[k].shape[1:])
              if ss[k].kind == "vector" else tuple(inputs[k].shape) for k in positions}
    blocks = {}
    for j in positions:
        columns = {i: [] for i in positions}
        size = int(np.prod(shapes[j], dtype=int))
        step = CHUNK if mode == "fwd-rev" else 1     # CHUNK columns per vector-mode launch
        for start in range(0, size, step):
            k = min(step, size - start)
            e = np.zeros((k,) + tuple(inputs[j].shape))
            e.reshape(k, -1)[np.arange(k), start + np.arange(k)] = 1.0
            v = [e if m == j else None for m in range(len(inputs))]
            if mode == "fwd-rev":
                products = hvp(call_kernel(f), 1, inputs, [_ret(1)], v, mode=mode, k=k)
            else:
                products = [None if p is None else p[None]
                            for p in hvp(call_kernel(f), 1, inputs, [_ret(1)], [
                                None if x is None else x[0] for x in v], mode=mode)]
            for i in positions:
                columns[i].extend(np.asarray(products[i], np.float64).reshape(k, -1))
        for i in positions:
            block = np.stack(columns[i], axis=-1).reshape(shapes[i] + shapes[j])
            blocks[i, j] = float(block) if block.ndim == 0 else block
    if many:
        return tuple(tuple(blocks[i, j] for j in positions) for i in positions)
    return blocks[positions[0], positions[0]]


def _ret(n):
    return zeros(n, device="cpu", requires_grad=True)
