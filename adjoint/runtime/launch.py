"""``launch``: check arguments against a kernel's signature, run it, record it."""
import math
import numbers

import numpy as np

from ..errors import AdjointError, LaunchError, user_frames
from . import buffers, devices, eager, half, structs, verify, watch
from .array import Array, check_device, default_device, zeros_like
from .jit import cpu_backend_name
from .steps import LaunchStep
from .tape import Tape, active_tape


MAX_THREADS = 2**31 - 1
"""The most threads one launch may have, in all: a thread's flat index fits a signed
32-bit integer on every backend (Warp bounds each ``tid()`` coordinate the same way)."""


def _dims(spec, dim):
    """``dim`` as a tuple of ``spec.dims`` ints in ``[0, MAX_THREADS]`` whose product is at
    most ``MAX_THREADS``; anything else is a ``LaunchError`` naming the kernel."""
    if type(dim) is int and spec.dims == 1 and 0 <= dim <= MAX_THREADS:
        return (dim,)                   # the common case, without the general checks
    if type(dim) is tuple and len(dim) == spec.dims:
        total = 1
        for d in dim:
            if type(d) is not int or not 0 <= d <= MAX_THREADS:
                break
            total *= d
        else:
            if total <= MAX_THREADS:
                return dim
    where = f"kernel '{spec.name}' ({spec.origin})"
    if isinstance(dim, numbers.Integral) and not isinstance(dim, bool):
        dims = (dim,)
    elif isinstance(dim, (tuple, list)) or (isinstance(dim, np.ndarray) and dim.ndim == 1):
        dims = tuple(dim)
    else:
        raise LaunchError(f"{where}: dim must be an int or a tuple of ints (the kernel is "
                          f"{spec.dims}-D), not {type(dim).__name__} {dim!r}")
    bad = [d for d in dims if not isinstance(d, numbers.Integral) or isinstance(d, bool)]
    if bad:
        raise LaunchError(f"{where}: dim={dim!r} holds {type(bad[0]).__name__} {bad[0]!r}; "
                          "every entry must be an int (e.g. int(n))")
    if len(dims) != spec.dims:
        raise LaunchError(f"{where} is {spec.dims}-D (it unpacks {spec.dims} index(es) from "
                          f"ad.tid()), but dim={dim!r} has {len(dims)} entr"
                          f"{'y' if len(dims) == 1 else 'ies'}")
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims):
        raise LaunchError(f"{where}: dim={dim!r} is negative; a launch has 0 or more threads "
                          "along each dimension")
    if math.prod(dims) > MAX_THREADS or max(dims) > MAX_THREADS:
        raise LaunchError(f"{where}: dim={dim!r} is too large: a launch has at most "
                          f"2**31 - 1 = {MAX_THREADS} threads, in all and along each dimension")
    return dims


def _device_of(buffer):
    """The name of the device holding ``buffer`` (None: no device holds it)."""
    try:
        return devices.of(buffer).name
    except TypeError:
        return None


def _describe(value):
    if isinstance(value, (Array, np.ndarray)) or hasattr(value, "__cuda_array_interface__"):
        return f"array(dtype={value.dtype}, ndim={value.ndim})"
    return type(value).__name__


def _convert(spec, param, value, device):
    if type(value) is Array and param.is_array and value.device == device:   # common case
        data = value._data
        if data.ndim == param.ndim and data.dtype == param.np_dtype:
            return data
    elif type(value) in param.plain:
        return param.to_scalar(value)   # the other common case, without the checks below
    where = f"kernel '{spec.name}' ({spec.origin}), parameter '{param.name}'"
    if param.is_array:
        if isinstance(value, Array):
            if value.device != device:
                raise LaunchError(f"{where}: array is on {value.device!r}, launch is on {device!r}")
            data = value._data
        elif isinstance(value, np.ndarray) and device == "cpu":
            data = value
        elif isinstance(value, np.ndarray):     # (ad.vec3(...) is one, for a vector too)
            raise LaunchError(f"{where}: a numpy array cannot be passed to a launch on "
                              f"{device!r}: pass ad.array(value, device={device!r})")
        else:
            raise LaunchError(f"{where}: expects {param.describe()}, got {_describe(value)}")
        if data.ndim != param.ndim or data.dtype != param.np_dtype:
            if data.dtype == half.FLOAT16 and param.np_dtype == half.FLOAT32 and \
                    data.ndim == param.ndim:
                raise half.Float16Argument()    # (launch hands it to half.run)
            raise LaunchError(f"{where}: expects {param.describe()}, got {_describe(data)}")
        return data
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        raise LaunchError(f"{where}: expects a real {param.dtype}, got the complex {value!r} "
                          "(complex numbers are not supported: pass real and imaginary parts)")
    if isinstance(value, (Array, np.ndarray)) or not isinstance(value, numbers.Number):
        raise LaunchError(f"{where}: expects a scalar {param.dtype}, got {_describe(value)}")
    if param.np_dtype.kind in "iu" and not isinstance(value, numbers.Integral):
        raise LaunchError(f"{where}: expects an integer, got {value!r}")
    return param.to_scalar(value)


@user_frames
def launch(kernel, dim, inputs=(), outputs=(), device=None, adjoint=False,
           adj_inputs=None, adj_outputs=None, record_tape=True, tangents=None):
    """Run ``kernel`` over a grid of ``dim`` threads (an int, or a 2-/3-tuple of ints;
    at most ``MAX_THREADS`` = 2**31 - 1 threads in all). A launch that writes an array
    a tape's launch read first lets that tape keep a copy (``watch``), recorded or not.

    On the CPU a fault a thread finds (an index out of bounds: ``BoundsError``) is
    raised by the launch. On CUDA the launch returns before the kernel has run (forward,
    backward or JVP alike): such a fault, or a loop past ``loop_capacity``, is raised
    where the host next waits for the GPU -- ``Array.numpy()`` of any array, the end of
    ``Tape.backward``, ``ad.synchronize()`` (runtime/pending.py) -- naming this launch.
    The checks made once per launch (``dim`` against the shapes) raise here on both.

    ``inputs + outputs`` are the kernel's arguments in order. With
    ``adjoint=True`` the backward runs instead: ``adj_inputs``/``adj_outputs``
    give an adjoint array (or ``None``) per argument; input adjoints are
    accumulated into, and the output adjoint of every element the kernel
    stores is handed back and then cleared (``+=`` and atomics leave it).
    ``None`` for an array means its ``.grad`` (as in Warp), or no adjoint when it
    has none; for a scalar, no adjoint. Leaving a list out is all ``None``.

    With ``tangents`` (forward mode) the kernel's JVP runs instead of its forward: it
    writes the outputs as the forward does and, into a tangent array per float array
    parameter, their directional derivatives along the tangents given for the inputs.
    ``tangents`` maps an argument (an ``ad.Array``: numpy arrays are not hashable) or a
    parameter name to its tangent array, of the argument's shape, dtype and device;
    a parameter left out gets a zeroed one (one the kernel only reads is held constant:
    its terms are left out, api.Kernel.with_zero_tangents). A tangent array holds the
    tangent of its array's contents: those of an output are read where the kernel reads
    the output (``+=``) and written where it writes it. Returns ``{parameter name:
    tangent array}`` for every float array parameter.
    """
    try:
        inputs, outputs, adj_inputs, adj_outputs = structs.flatten_args(
            kernel, list(inputs), list(outputs), adj_inputs, adj_outputs)
    except TypeError as exc:
        raise LaunchError(f"launch of {exc}") from None
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
    try:
        values = [_convert(spec, p, a, device) for p, a in zip(spec.params, args)]
    except half.Float16Argument:        # (run on float32 copies, rounded back)
        return half.run(launch, kernel, spec, dims, inputs, outputs, device, adjoint,
                        adj_inputs, adj_outputs, record_tape, tangents)
    if adjoint:
        _check_aliasing(spec, values)
        if tangents is not None:
            raise LaunchError(f"kernel '{spec.name}': a launch runs the backward "
                              "(adjoint=True) or the JVP (tangents=...), not both")
        return _launch_adjoint(spec, dims, values, args, inputs, outputs, adj_inputs, adj_outputs)
    jvp_spec = spec
    if tangents is None:
        _check_aliasing(spec, values)
        dots = None
    else:
        dots, given, untangented = _tangents(spec, args, values, tangents)   # (checks aliasing)
        if untangented and hasattr(kernel, "with_zero_tangents"):
            # the arrays given no tangent that the kernel only reads: their terms are
            # dropped, not computed as zeros (api.Kernel.with_zero_tangents: a variant
            # with its JVP alone; a tape records the kernel's own spec, for its backward)
            jvp_spec = kernel.with_zero_tangents(untangented).spec_for(device)
    tape = active_tape() if record_tape else None

    def label():
        return (f"launch #{len(tape.steps)}" if tape is not None else "unrecorded launch") + \
            f" of kernel '{spec.name}' ({spec.origin})"
    for k in spec.written_arrays:
        watch.before_write(values[k], label, tape)   # tapes that read it keep its values
    if tape is not None:
        _propagate_requires_grad(spec, args)
    saved = ()
    vjp = None
    if dots is not None:
        for data in dots:
            watch.mark_dirty(data)          # (a tangent is written: never a clean gradient)
        verify.run(jvp_spec, "jvp", dims, values, dots)
    elif tape is not None and getattr(spec, "saved", ()) and spec.backward is not None:
        # the store policy (optimize/store.py): the forward keeps, per thread, what the
        # backward would otherwise replay loops to recompute
        saved = tuple(buffers.empty(dims, dtype, device) for _, dtype in spec.saved)
        verify.run(spec, "forward_save", dims, [*values, *saved])
    elif getattr(spec, "forward_vjp", None) is not None and isinstance(tape, Tape) and \
            tape.max_bytes is None and device == "cpu" and cpu_backend_name() == "numba" and \
            (vjp := eager.buffers_for(spec, args, values, dims)):
        # a one-element loss (optimize/eager.py): its VJP too, the loss's adjoint read as 1
        # (not on a tape with a memory budget, whose buffers would count against it, nor on
        # a checkpointed segment's first run, which keeps no step: checkpoint.Scout)
        verify.run(spec, "forward_vjp", dims, [*values, *vjp])
    else:
        verify.run(spec, "forward", dims, values)
    if tape is not None:
        tape.record(LaunchStep(spec, dims, args, values, label(), saved, vjp or None,
                               kernel if hasattr(kernel, "spec_for") else None))
    if dots is not None:
        return given


def _tangents(spec, args, values, tangents):
    """``(buffers, given, untangented)``: the tangent buffer of every float array parameter,
    in order, ``{parameter name: tangent as given or allocated}`` and the names of those
    allocated (zeros: no tangent was given for them), from ``tangents`` (see
    ``launch``); a ``LaunchError`` for a key that names no float array argument, a tangent
    of the wrong shape, dtype or device, two arrays of the launch sharing memory (as
    ``_check_aliasing``), or a tangent sharing memory with another array of the launch."""
    if getattr(spec, "jvp", None) is None:
        raise LaunchError(f"kernel '{spec.name}' ({spec.origin}) was generated without a JVP "
                          "(by an older adjoint): regenerate it")
    if not hasattr(tangents, "items"):
        raise LaunchError(f"kernel '{spec.name}': tangents must be a dict from arguments or "
                          f"parameter names to tangent arrays, not {type(tangents).__name__}")
    by_param = {}
    for key, tangent in tangents.items():
        if type(key) is str:
            found = [k for k, p in enumerate(spec.params) if p.name == key]
        else:
            found = [k for k, a in enumerate(args) if a is key]
        if not found:
            raise LaunchError(f"kernel '{spec.name}' ({spec.origin}): a tangent is given for "
                              f"{key!r}, which is not one of its parameters' names or arguments")
        for k in found:                 # (one array passed for several parameters)
            if not spec.params[k].has_adjoint:
                raise LaunchError(f"kernel '{spec.name}', parameter '{spec.params[k].name}' "
                                  "is not a float array: it has no tangent")
            by_param[k] = tangent
    bufs, given, untangented = [], {}, []
    for k in spec.adjoint_params:
        p, v, tangent = spec.params[k], values[k], by_param.get(k)
        if tangent is None:
            untangented.append(p.name)
            arg = args[k]
            tangent = zeros_like(arg) if isinstance(arg, Array) else np.zeros_like(v)
        data = tangent._data if type(tangent) is Array else tangent
        if type(data) is np.ndarray and type(v) is np.ndarray:     # the common case
            if data.shape != v.shape or data.dtype != v.dtype:
                raise _bad_tangent(spec, p, v, tangent)
        elif not hasattr(data, "shape") or tuple(data.shape) != tuple(v.shape) or \
                data.dtype != v.dtype or _device_of(data) != _device_of(v):
            raise _bad_tangent(spec, p, v, tangent)
        bufs.append(data)
        given[p.name] = tangent
    # A tangent never shares memory with an array, nor with another tangent unless both
    # parameters are only read (one array passed for two read parameters has one tangent).
    primals = [values[k] for k in spec.array_params]
    if not buffers.shared(primals + bufs):
        return bufs, given, frozenset(untangented)     # (the common case: no two share memory)
    _check_aliasing(spec, values)
    names = [spec.params[k].name for k in spec.adjoint_params]
    for j, (name, data) in enumerate(zip(names, bufs)):
        shared = [other for other in primals if buffers.may_alias(data, other)]
        shared += [o for m, (other_name, o) in enumerate(zip(names, bufs)) if m != j and
                   buffers.may_alias(data, o) and (name in spec.writes or
                                                   other_name in spec.writes)]
        if shared:
            raise LaunchError(f"kernel '{spec.name}' ({spec.origin}): the tangent of "
                              f"'{name}' shares memory with another array of the launch; "
                              "pass a separate array")
    return bufs, given, frozenset(untangented)


def _bad_tangent(spec, p, v, given):
    return LaunchError(f"kernel '{spec.name}', tangent of parameter '{p.name}' must be "
                       f"an array of shape {tuple(v.shape)} and dtype {v.dtype} on the "
                       f"launch's device, got {_describe(given)}")


def _check_aliasing(spec, values):
    """One buffer (or two overlapping views of one) bound to a parameter the kernel reads
    and to one it writes would make the kernel read what it overwrites (the backward
    would replay the wrong values)."""
    alias = buffers.shared([values[k] for k in spec.array_params])
    if not alias:
        return                      # (the common case: no two share memory)
    arrays = [(spec.params[k], values[k]) for k in spec.array_params]
    for k, (p, v) in enumerate(arrays):
        if k not in alias:
            continue
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
    for k in spec.read_floats:
        if isinstance(args[k], Array) and args[k].requires_grad:
            for j in spec.written_floats:
                if isinstance(args[j], Array):
                    args[j].requires_grad = True
            return


def _launch_adjoint(spec, dims, values, args, inputs, outputs, adj_inputs, adj_outputs):
    if spec.backward is None:
        raise LaunchError(f"kernel '{spec.name}' was compiled with enable_backward=False")
    if hasattr(spec.backward, "unavailable"):
        raise LaunchError(spec.backward.unavailable)
    adj_inputs = [None] * len(inputs) if adj_inputs is None else list(adj_inputs)
    adj_outputs = [None] * len(outputs) if adj_outputs is None else list(adj_outputs)
    if len(adj_inputs) != len(inputs) or len(adj_outputs) != len(outputs):
        raise LaunchError(f"kernel '{spec.name}': adj_inputs/adj_outputs must have one entry "
                          f"per input/output ({len(inputs)}/{len(outputs)}), got "
                          f"{len(adj_inputs)}/{len(adj_outputs)}")
    adjs, written = [], []
    for p, v, arg, a in zip(spec.params, values, args, adj_inputs + adj_outputs):
        if not p.has_adjoint:
            if a is not None:
                raise LaunchError(f"kernel '{spec.name}', parameter '{p.name}' has no adjoint; "
                                  "pass None for it")
            continue
        if a is None:
            a = getattr(arg, "grad", None)       # as in Warp: the array's own gradient
        if a is None:
            adjs.append(buffers.zeros(v.shape, v.dtype, _device_of(v)))   # scratch: unwatched
            continue
        data = a._data if isinstance(a, Array) else a
        if not hasattr(data, "shape") or tuple(data.shape) != tuple(v.shape) or data.dtype != v.dtype:
            raise LaunchError(f"kernel '{spec.name}', adjoint of parameter '{p.name}' must be an "
                              f"array of shape {v.shape} and dtype {v.dtype}, got {_describe(a)}")
        adjs.append(data)
        written.append(len(adjs) - 1)
    # the storing backward (optimize/once.py) where the buffers it stores into hold zeros
    clean = bool(spec.clean_adjoints) and all(k not in written or watch.is_clean(adjs[k])
                                              for k in spec.clean_adjoints)
    for k in written:
        watch.before_write(adjs[k], f"adjoint launch of kernel '{spec.name}' ({spec.origin})")
    verify.run(spec, "backward_clean" if clean else "backward", dims, values, adjs)
