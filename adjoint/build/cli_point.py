"""The point ``adjoint trace`` and ``adjoint transpose`` evaluate at, read from the command
line: a func's numbers (``--args``, ``--tangent``, ``--seed``), or a kernel's launch
(``--dim``, ``--inputs``, ``--outputs``, ``--thread``, ``--tangent NAME=EXPR``, ``--seed``).

Each ``--inputs``/``--outputs`` item is a Python expression evaluated with ``np``
(numpy), ``math`` and ``ad`` (adjoint) in scope, one per kernel parameter in order: a
scalar parameter takes a number (``5``, ``0.5``); an array parameter takes its values
(``np.linspace(0, 1, 8)``, ``[1, 2, 3]``, ``np.ones((4, 3))``), or a size or shape
(``8``, ``(4, 3)``) that gives an array of zeros. ``--tangent NAME=EXPR`` gives the
JVP's direction for input array NAME (EXPR broadcast to its shape: ``w=1`` is ones); by
default it is ones for the first float array input. ``--seed S`` fills each float
output's adjoint with S (default 1). The arrays take the parameter's dtype.
"""
import math
from dataclasses import dataclass, field

import numpy as np

import adjoint
from ..api import Kernel
from ..errors import AdjointError
from ..runtime.array import array, zeros

FUNC_ONLY = ("args",)
KERNEL_ONLY = ("dim", "inputs", "outputs", "thread")


class PointError(AdjointError):
    """A command line whose point does not fit the kernel or func it names."""


@dataclass
class Point:
    """What ``ad.evaluation_trace``/``ad.transpose_view`` take after the kernel or func."""
    args: tuple
    options: dict = field(default_factory=dict)


def point(obj, ns):
    """The ``Point`` the parsed command line ``ns`` gives for ``obj`` (a Func or Kernel)."""
    if isinstance(obj, Kernel):
        wrong = [o for o in FUNC_ONLY if getattr(ns, o, None) is not None]
        if wrong:
            raise PointError(f"{obj.name} is a kernel: give --dim N and its arguments with "
                             "--inputs EXPR ... --outputs EXPR ... (not --args)")
        return _kernel_point(obj, ns)
    wrong = [o for o in KERNEL_ONLY if getattr(ns, o, None) is not None]
    if wrong:
        raise PointError(f"{obj.name} is a func: --{wrong[0]} is for kernels; give its "
                         "arguments with --args X ...")
    if ns.args is None:
        raise PointError(f"{obj.name} is a func: give its arguments with --args X ...")
    options = {"seed": ns.seed}
    if getattr(ns, "tangent", None) is not None:
        options["tangent"] = tuple(_number(t, "--tangent") for t in ns.tangent)
    return Point(tuple(ns.args), options)


def _number(text, option):
    try:
        return float(text)
    except ValueError:
        raise PointError(f"{option} takes numbers for a func, got {text!r}") from None


def evaluate(text, option):
    """The value of the expression ``text`` given to ``option``."""
    scope = {"np": np, "math": math, "ad": adjoint}
    try:
        return eval(text, scope)        # the user's own expression, as their module is run
    except Exception as e:              # noqa: BLE001 -- any failure is a usage error
        raise PointError(f"{option} {text!r}: {type(e).__name__}: {e}") from None


def _kernel_point(kernel, ns):
    if ns.dim is None:
        raise PointError(f"{kernel.name} is a kernel: give the launch's size with --dim N "
                         "(N M for a 2-D launch)")
    pf = kernel.transformed.pf
    if pf.structs.params:
        raise PointError(f"kernel '{kernel.name}' takes a struct, which the command line "
                         "cannot give: use ad.evaluation_trace(kernel, dim, inputs=, outputs=)")
    params = pf.params
    texts_in, texts_out = list(ns.inputs or ()), list(ns.outputs or ())
    if len(texts_in) + len(texts_out) != len(params):
        names = ", ".join(p.name for p in params)
        raise PointError(f"kernel '{kernel.name}' takes {len(params)} arguments ({names}), "
                         f"got {len(texts_in)} --inputs + {len(texts_out)} --outputs")
    values = [_argument(p, evaluate(t, option), t, option)
              for p, (t, option) in zip(params, [(t, "--inputs") for t in texts_in]
                                        + [(t, "--outputs") for t in texts_out])]
    dim = ns.dim[0] if len(ns.dim) == 1 else tuple(ns.dim)
    thread = ns.thread if ns.thread is not None else [0] * len(ns.dim)
    if len(thread) != len(ns.dim) or any(not 0 <= t < d for t, d in zip(thread, ns.dim)):
        raise PointError(f"--thread {' '.join(map(str, thread))} is not a thread of a launch "
                         f"over --dim {' '.join(map(str, ns.dim))}")
    inputs, outputs = values[:len(texts_in)], values[len(texts_in):]
    options = {"inputs": inputs, "outputs": outputs,
               "thread": thread[0] if len(thread) == 1 else tuple(thread)}
    if ns.seed != 1.0:
        options["seed"] = {a: array(np.full_like(a.numpy(), ns.seed), dtype=a.dtype)
                           for p, a in zip(params[len(inputs):], outputs)
                           if p.is_array and p.kind == "float"}
    if getattr(ns, "tangent", None) is not None:
        options["tangent"] = _tangents(kernel, params, inputs, ns.tangent)
    return Point((dim,), options)


def _argument(p, value, text, option):
    """Parameter ``p``'s argument from ``value``, the expression ``text`` evaluated."""
    if not p.is_array:
        if isinstance(value, (list, tuple, np.ndarray)):
            raise PointError(f"{option} {text!r}: parameter '{p.name}' is a number, "
                             f"not an array")
        return value
    dtype = p.type.vtype or p.type.storage
    if isinstance(value, (int, np.integer)) or (
            isinstance(value, tuple) and value and
            all(isinstance(v, (int, np.integer)) for v in value)):
        return zeros(value, dtype=dtype)        # a size or shape
    try:
        return array(np.asarray(value), dtype=dtype)
    except (TypeError, ValueError) as e:
        raise PointError(f"{option} {text!r}: not an array for parameter '{p.name}': "
                         f"{e}") from None


def _tangents(kernel, params, inputs, given):
    """{input array: tangent array} from ``NAME=EXPR`` items."""
    arrays = {p.name: a for p, a in zip(params, inputs)
              if p.is_array and p.kind == "float"}
    out = {}
    for item in given:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in arrays:
            raise PointError(f"--tangent {item!r}: a kernel's tangent is NAME=EXPR for a float "
                             f"array input of '{kernel.name}' "
                             f"({', '.join(arrays) or 'it has none'})")
        a = arrays[name]
        value = np.asarray(evaluate(text, "--tangent"), dtype=float)
        try:
            data = np.broadcast_to(value, a.numpy().shape)
        except ValueError:
            raise PointError(f"--tangent {item!r}: shape {value.shape} does not fit "
                             f"'{name}' (shape {a.numpy().shape})") from None
        out[a] = array(np.array(data), dtype=a.dtype)
    return out
