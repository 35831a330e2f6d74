"""Calling a kernel's compiled forward or backward, and the opt-in ``verify_fp`` check.

``run`` is the one place a launch calls generated code (``launch`` and the
tape's backward both go through it). Generated code follows IEEE arithmetic:
inf and nan, never an exception (runtime/ieee.py); ``run`` turns NumPy's
floating-point warnings off while plain-Python generated code runs (the Python
backend computes on numpy scalars, which warn about the infs and nans they
make; numba-compiled code never warns and runs as it is).

With ``adjoint.config.verify_fp`` on (or ``ADJOINT_VERIFY_FP=1``), ``run`` then
checks, as ``warp.config.verify_fp`` does, every float array the launch wrote:
after a forward, the arrays the kernel stores into; after a backward, the
adjoint arrays; after a JVP, the stored arrays and their tangents. The first one holding an inf or a nan raises ``NonFiniteError``
naming the kernel (name and file:line), the launch (forward or backward), the
array and its first non-finite element (index and value, in C order).
"""
import types

import numpy as np

from ..errors import NonFiniteError
from . import buffers, config


def run(spec, part, dims, values, adjoints=(), alias=None, clear=True):
    """Run ``spec``'s ``part`` ("forward", "backward", "jvp", or the store policy's
    "forward_save" and "backward_saved") on ``(*dims, *values, *adjoints)``: ``values``
    one per parameter (then, for the last two, the saved arrays), ``adjoints`` (or
    tangents, for "jvp") one per parameter that has an adjoint (a float array), in order;
    ``alias``: ``buffers.shared(adjoints)``, if the caller has it. A backward of a kernel
    with ``handed_arrays`` also takes ``clear`` (its ``rt_clear``): false, it leaves
    their adjoints as it found them, and the caller zeroes them (runtime/steps.py)."""
    run_part = spec.quieted.get(part)
    if run_part is None:
        run_part = spec.quieted[part] = _quiet(getattr(spec, part))
    if part == "jvp" or not adjoints:   # (launch refuses aliasing tangent buffers)
        run_part(*dims, *values, *adjoints)
    else:
        tail = (bool(clear),) if spec.handed_arrays else ()
        buffers.call_unaliased(run_part, (*dims, *values), adjoints, alias, tail)
    if config.verify_fp:
        # (the handed adjoints a backward did not clear hold what it read: maybe a seed)
        check(spec, part.split("_")[0], values, adjoints,
              skip=() if clear else {j for j, _ in spec.handed_adjoints})


def _quiet(fn):
    """``fn`` with numpy's floating-point warnings off: plain Python computes with numpy
    scalars (or it is a launcher); what numba compiled warns of nothing, also behind
    Python wrappers that only check bounds or pick a variant by the launch's size
    (``__wrapped__``: runtime/bounds.py, helpers.by_size) and behind a generated
    launcher whose module binds ``rt`` to the numba backend (it only picks the grid)."""
    inner = fn
    while isinstance(inner, types.FunctionType) and hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    if not isinstance(inner, types.FunctionType) or \
            getattr(inner.__globals__.get("rt"), "NAME", None) == "numba":
        return fn       # (a generated launcher of numba-compiled functions)

    def quiet(*args):
        with np.errstate(all="ignore"):
            fn(*args)
    return quiet


def check(spec, part, values, adjoints=(), skip=()):
    """Raise ``NonFiniteError`` for the first written float array holding an inf or a nan;
    ``skip``: positions among ``adjoints`` not to check."""
    if part in ("forward", "jvp"):
        written = [(p.name, v) for p, v in zip(spec.params, values)
                   if p.is_array and p.name in spec.writes]
    if part == "jvp":
        written += [(f"dot_{p.name}", a) for p, a in
                    zip([p for p in spec.params if p.has_adjoint], adjoints)
                    if p.name in spec.writes]
    elif part == "backward":
        written = [(f"adj_{p.name}", a) for j, (p, a) in
                   enumerate(zip([p for p in spec.params if p.has_adjoint], adjoints))
                   if j not in skip]
    for label, buf in written:
        if np.dtype(buf.dtype).kind != "f":
            continue
        data = buffers.to_host(buf)
        finite = np.isfinite(data)
        if finite.all():
            continue
        where = np.unravel_index(int(np.argmin(finite.reshape(-1))), data.shape)
        index = ", ".join(str(int(k)) for k in where)
        count = int(data.size - np.count_nonzero(finite))
        what = {"backward": "gradient", "forward": "output", "jvp": "output or tangent"}[part]
        raise NonFiniteError(
            f"kernel '{spec.name}' ({spec.origin}), {part} launch: {what} array "
            f"'{label}' holds a non-finite value: {label}[{index}] = {float(data[where])!r}"
            f" (the first of {count}; verify_fp is on)")
