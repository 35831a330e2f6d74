"""``launch``: check arguments against a kernel's signature, run it, record it."""
import numbers

import numpy as np

from ..errors import AdjointError, LaunchError, user_frames
from . import buffers
from .array import Array, check_device, default_device
from .tape import LaunchStep, active_tape


def _dims(spec, dim):
    dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
    if len(dims) != spec.dims or not all(isinstance(d, numbers.Integral) and d >= 0 for d in dims):
        raise LaunchError(f"kernel '{spec.name}' ({spec.origin}) is {spec.dims}-D "
                          f"(it unpacks {spec.dims} index(es) from ad.tid()), but dim={dim!r}")
    return tuple(int(d) for d in dims)


def _device_of(buffer):
    return "cpu" if isinstance(buffer, np.ndarray) else "cuda"


def _describe(value):
    if isinstance(value, (Array, np.ndarray)) or hasattr(value, "__cuda_array_interface__"):
        return f"array(dtype={value.dtype}, ndim={value.ndim})"
    return type(value).__name__


def _convert(spec, param, value, device):
    where = f"kernel '{spec.name}' ({spec.origin}), parameter '{param.name}'"
    if param.is_array:
        if isinstance(value, Array):
            if value.device != device:
                raise LaunchError(f"{where}: array is on {value.device!r}, launch is on {device!r}")
            data = value.data
        elif isinstance(value, np.ndarray) and device == "cpu":
            data = value
        else:
            raise LaunchError(f"{where}: expects {param.describe()}, got {_describe(value)}")
        if data.ndim != param.ndim or data.dtype != param.np_dtype:
            raise LaunchError(f"{where}: expects {param.describe()}, got {_describe(data)}")
        return data
    if isinstance(value, (Array, np.ndarray)) or not isinstance(value, numbers.Number):
        raise LaunchError(f"{where}: expects a scalar {param.dtype}, got {_describe(value)}")
    if param.np_dtype.kind in "iu" and not isinstance(value, numbers.Integral):
        raise LaunchError(f"{where}: expects an integer, got {value!r}")
    return param.np_dtype.type(value).item() if param.np_dtype == np.float64 or \
        param.np_dtype == np.int64 else param.np_dtype.type(value)


@user_frames
def launch(kernel, dim, inputs=(), outputs=(), device=None, adjoint=False,
           adj_inputs=None, adj_outputs=None, record_tape=True):
    """Run ``kernel`` over a grid of ``dim`` threads (an int, or a 2-/3-tuple).

    ``inputs + outputs`` are the kernel's arguments in order. With
    ``adjoint=True`` the backward runs instead: ``adj_inputs``/``adj_outputs``
    give an adjoint array (or ``None``) per argument; input adjoints are
    accumulated into, and the output adjoint of every element the kernel
    stores is handed back and then cleared (``+=`` and atomics leave it).
    """
    args = list(inputs) + list(outputs)
    try:
        device = _launch_device(device, args)
    except (ValueError, AdjointError) as exc:
        name = getattr(kernel, "name", "?")
        raise LaunchError(f"launch of kernel '{name}': {exc}") from None
    spec = kernel.spec_for(device) if hasattr(kernel, "spec_for") else kernel.spec
    if getattr(spec, "target", "cpu") != device:
        raise LaunchError(f"kernel '{spec.name}' ({spec.origin}) was generated for "
                          f"device={spec.target!r}, not {device!r}")
    if len(args) != len(spec.params):
        names = ", ".join(p.name for p in spec.params)
        raise LaunchError(f"kernel '{spec.name}' ({spec.origin}) takes {len(spec.params)} "
                          f"arguments ({names}), got {len(args)} "
                          f"({len(inputs)} inputs + {len(outputs)} outputs)")
    dims = _dims(spec, dim)
    values = [_convert(spec, p, a, device) for p, a in zip(spec.params, args)]
    _check_aliasing(spec, values)
    if adjoint:
        return _launch_adjoint(spec, dims, values, args, inputs, outputs, adj_inputs, adj_outputs)
    tape = active_tape() if record_tape else None
    label = f"launch #{len(tape.steps) if tape else 0} of kernel '{spec.name}' ({spec.origin})"
    if tape is not None:
        _propagate_requires_grad(spec, args)
        for p, a in zip(spec.params, args):
            if p.is_array and p.name in spec.writes:
                tape.before_write(a, label)
    spec.forward(*dims, *values)
    if tape is not None:
        tape.record(LaunchStep(spec, dims, args, values, label))


def _check_aliasing(spec, values):
    """One buffer (or two overlapping views of one) bound to a parameter the kernel reads
    and to one it writes would make the kernel read what it overwrites (the backward
    would replay the wrong values)."""
    arrays = [(p, v) for p, v in zip(spec.params, values) if p.is_array]
    for k, (p, v) in enumerate(arrays):
        for other, w in arrays[:k]:
            if (p.name in spec.writes or other.name in spec.writes) and buffers.may_alias(v, w):
                raise LaunchError(f"kernel '{spec.name}' ({spec.origin}): the same array (or "
                                  f"overlapping views of one) is passed as '{other.name}' and "
                                  f"'{p.name}', and the kernel writes one of them; pass a "
                                  "separate array (e.g. ad.clone)")


def _launch_device(device, args):
    """The launch's device: as given, else the first array argument's, else the default."""
    if device is not None:
        return check_device(device)
    for a in args:
        if isinstance(a, Array):
            return a.device
    return check_device(default_device())


def _propagate_requires_grad(spec, args):
    """Outputs of a recorded launch that reads a requires_grad array require grad too."""
    if any(isinstance(a, Array) and a.requires_grad for p, a in zip(spec.params, args)
           if p.has_adjoint and p.name in spec.reads):
        for p, a in zip(spec.params, args):
            if p.has_adjoint and p.name in spec.writes and isinstance(a, Array):
                a.requires_grad = True


def _launch_adjoint(spec, dims, values, args, inputs, outputs, adj_inputs, adj_outputs):
    if spec.backward is None:
        raise LaunchError(f"kernel '{spec.name}' was compiled with enable_backward=False")
    adj_inputs = [None] * len(inputs) if adj_inputs is None else list(adj_inputs)
    adj_outputs = [None] * len(outputs) if adj_outputs is None else list(adj_outputs)
    if len(adj_inputs) != len(inputs) or len(adj_outputs) != len(outputs):
        raise LaunchError(f"kernel '{spec.name}': adj_inputs/adj_outputs must have one entry "
                          f"per input/output ({len(inputs)}/{len(outputs)}), got "
                          f"{len(adj_inputs)}/{len(adj_outputs)}")
    adjs = []
    for p, v, a in zip(spec.params, values, adj_inputs + adj_outputs):
        if not p.has_adjoint:
            if a is not None:
                raise LaunchError(f"kernel '{spec.name}', parameter '{p.name}' has no adjoint; "
                                  "pass None for it")
            continue
        if a is None:
            adjs.append(buffers.zeros(v.shape, v.dtype, _device_of(v)))
            continue
        data = a.data if isinstance(a, Array) else a
        if not hasattr(data, "shape") or tuple(data.shape) != tuple(v.shape) or data.dtype != v.dtype:
            raise LaunchError(f"kernel '{spec.name}', adjoint of parameter '{p.name}' must be an "
                              f"array of shape {v.shape} and dtype {v.dtype}, got {_describe(a)}")
        adjs.append(data)
    buffers.call_unaliased(spec.backward, (*dims, *values), adjs)
