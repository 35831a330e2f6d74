"""float16 arrays at a launch: stored as float16, computed in float32 (as Warp does).

A kernel's float16 array parameter is a float32 one (``ArrayType``: runtime/types.py),
since numba computes no float16 on the CPU. ``launch`` finds a float16 array where its
checks expect a float32 one (``_convert`` raises ``Float16Argument``, off the common path)
and hands the launch to ``run``: it runs on a float32 copy of each float16 array (its
*proxy*), then rounds what the kernel wrote back into the float16 array.

On CUDA the proxies are float32 device arrays, widened and rounded back by the
runtime's copy kernel (a cast on the device: ``buffers.copy_into``), as on the CPU by
NumPy: to nearest, ties to even. On a tape the launch's step holds the proxies: the
float32 values its backward reads, which no later write changes. Two functions of the tape (``Tape.record_func``) bracket
the step: before its backward, each float16 gradient is widened into its proxy's float32
gradient; after, the proxy's gradient is rounded back into it (inputs' accumulated into,
outputs' cleared, as the backward left them). Gradients are thus stored as float16
between steps, as Warp stores them. (A capture refuses those functions: runtime/capture.py.)"""
import numpy as np

from ..errors import LaunchError
from . import buffers
from .array import Array
from .tape import active_tape

FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)


class Float16Argument(Exception):
    """A float16 array passed for a float32 array parameter (``launch._convert``)."""


def is_half(value):
    return isinstance(value, (Array, np.ndarray)) and value.dtype == FLOAT16


class _Proxies:
    """The float32 proxy of each float16 argument, one per array (an array passed twice
    has one proxy, so the launch's aliasing checks see what the user passed)."""

    def __init__(self):
        self.pairs = {}         # id(original) -> (original, proxy)

    def widen(self, value):
        if not is_half(value):
            return value
        pair = self.pairs.get(id(value))
        if pair is None:
            if isinstance(value, Array):
                proxy = Array(_wide(value._data), device=value.device, _owned=True)
                proxy.requires_grad = value.grad is not None or value.requires_grad
            else:
                proxy = value.astype(FLOAT32)
            pair = self.pairs[id(value)] = (value, proxy)
        return pair[1]

    def arrays(self):
        """(original, proxy) of the ad.Array arguments (those with gradients)."""
        return [(a, p) for a, p in self.pairs.values() if isinstance(a, Array)]


def _refuse(kernel, why):
    spec = getattr(kernel, "spec", kernel)
    return LaunchError(f"kernel '{spec.name}' ({spec.origin}): {why}")


def run(launch, kernel, spec, dim, inputs, outputs, device, adjoint, adj_inputs, adj_outputs,
        record_tape, tangents):
    """``launch(kernel, ...)`` (runtime/launch.py) with each float16 array argument
    replaced by its float32 proxy, the kernel's writes rounded back (see the module).
    ``inputs`` and ``outputs`` are flat (structs' leaves): they are launched on ``spec``."""
    if tangents is not None:
        raise _refuse(kernel, "forward mode (tangents=) on float16 arrays is not supported: "
                              "store float32")
    tape = active_tape() if record_tape and not adjoint else None
    if tape is not None and not hasattr(tape, "record_func"):
        raise _refuse(kernel, "float16 arrays in a checkpointed segment are not supported: "
                              "store float32")
    proxies = _Proxies()
    ins = [proxies.widen(a) for a in inputs]
    outs = [proxies.widen(a) for a in outputs]
    if adjoint:
        return _adjoint(launch, spec, dim, ins, outs, device, adj_inputs, adj_outputs, proxies)
    if tape is not None:            # (replayed last: the gradients rounded back)
        rounding = _record(tape, lambda: _round_grads(proxies), proxies, "rounding", spec)
    try:
        launch(spec, dim, ins, outs, device=device, record_tape=record_tape)
    except BaseException:
        if tape is not None:        # (a launch that raised leaves no step)
            tape.steps.remove(rounding)
        raise
    args = list(inputs) + list(outputs)
    wide = ins + outs
    for k in spec.written_arrays:
        if is_half(args[k]):
            _store(args[k], wide[k])
    for a, p in proxies.arrays():
        if p.requires_grad and not a.requires_grad:
            a.requires_grad = True
    if tape is not None:            # (replayed first: the gradients widened)
        _record(tape, lambda: _widen_grads(proxies), proxies, "widening", spec)


def _record(tape, fn, proxies, what, spec):
    """``tape.record_func(fn)``, its step labelled (a capture refuses it: it runs Python)."""
    tape.record_func(fn, [a for a, _ in proxies.arrays()])
    step = tape.steps[-1]
    step.label = f"the {what} of float16 gradients of kernel '{spec.name}' ({spec.origin})"
    return step


def _adjoint(launch, kernel, dim, ins, outs, device, adj_inputs, adj_outputs, proxies):
    """``launch(..., adjoint=True)``: the adjoints on float32 proxies too (a float16 array's
    ``.grad`` where its entry is None), rounded back."""
    _widen_grads(proxies)
    grads = _Proxies()
    adj_ins = None if adj_inputs is None else [grads.widen(a) for a in adj_inputs]
    adj_outs = None if adj_outputs is None else [grads.widen(a) for a in adj_outputs]
    launch(kernel, dim, ins, outs, device=device, adjoint=True, adj_inputs=adj_ins,
           adj_outputs=adj_outs)
    _round_grads(proxies)
    for a, p in grads.pairs.values():
        _store(a, p)


def _wide(buf):
    """A float32 copy of float16 buffer ``buf``, on its device."""
    if buffers.on_host(buf):
        return buf.astype(FLOAT32)
    out = buffers.empty(buf.shape, FLOAT32, "cuda")
    buffers.copy_into(out, buf)         # (the copy kernel: a cast on the device)
    return out


def _assign(dst, src):
    """``dst[...] = src``, cast to ``dst``'s dtype (to nearest, ties to even), on either
    device (both buffers on one)."""
    if buffers.on_host(dst):
        dst[...] = src
    else:
        buffers.copy_into(dst, src)


def _store(original, proxy):
    """Round ``proxy`` (float32) into the float16 ``original`` (to nearest, ties to even)."""
    data = proxy._data if isinstance(proxy, Array) else proxy
    if isinstance(original, Array):
        _assign(original.data, data)    # (``.data``: no longer known to hold zeros)
    else:
        original[...] = data


def _widen_grads(proxies):
    """Each float16 gradient into its proxy's float32 gradient."""
    for a, p in proxies.arrays():
        if a.grad is None:
            continue
        if p.grad is None:
            p.requires_grad = True
        _assign(p.grad.data, a.grad._data)


def _round_grads(proxies):
    """Each proxy's float32 gradient rounded back into its float16 gradient."""
    for a, p in proxies.arrays():
        if a.grad is not None and p.grad is not None:
            _store(a.grad, p.grad)
