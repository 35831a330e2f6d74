"""A tape's launch of a kernel with a one-element loss runs its VJP at once (optimize/eager.py).

When a launch is recorded on a tape (CPU, numba backend), its kernel has a
``forward_vjp`` (``KernelSpec``), the output it names (``vjp_seeded``) is an array of
one element that takes part in the gradient, and some input does too, the tape runs
``forward_vjp`` instead of the forward: it writes the outputs as the forward does and,
into a buffer ``J`` per float array parameter, what the backward would add into that
parameter's gradient for a seed of 1 (``buffers``). The step keeps them (in
``memory_report()`` as saved bytes). Its backward (``backward``) reads the output's
gradient ``g`` and adds ``g * J`` into each input's gradient: reverse mode is linear
in the seed. That is the backward's result for ``g == 1`` bit for bit (for another
``g``, up to the rounding of one product per element; an inf or nan ``g``, where
``g * J`` and the replay differ at the elements no thread touched, replays).

A gradient that owes its zero (runtime/owed.py) and ``g == 1`` takes ``J`` itself as
its memory: no copy. The step's ``J`` is then gone, and a second backward of the tape
replays the launch, as it does with ``ADJOINT_EAGER_VJP=0`` (``config.eager_vjp``).
"""
import numpy as np

from . import buffers, config, owed, verify, watch


def buffers_for(spec, args, values, dims):
    """The adjoint buffers ``forward_vjp`` of ``spec`` runs on for this launch on the CPU
    (one per float array parameter: the seeded output's holds 1, the others zeros, or
    nothing where the launch stores into every element), or None: the launch runs its
    forward."""
    kinds = layout(spec, args, values, dims)
    if kinds is None:
        return None
    fills = {"one": np.ones, "zero": np.zeros, "stored": np.empty}
    return [fills[kind](values[k].shape if kind != "one" else 1, values[k].dtype)
            for kind, k in zip(kinds, spec.adjoint_params)]


def layout(spec, args, values, dims):
    """What each buffer of ``buffers_for`` starts as: ``"one"`` (the seeded output's),
    ``"zero"``, or ``"stored"`` (the launch stores into every element: any contents); or
    None: the launch runs its forward."""
    if spec.forward_vjp is None or not config.eager_vjp:
        return None
    k_out = spec.vjp_seeded_param
    out = args[k_out]
    if not getattr(out, "requires_grad", False) or values[k_out].size != 1:
        return None
    if not any(getattr(args[k], "requires_grad", False)
               for k in spec.adjoint_params if k != k_out):
        return None
    scalars = {p.name: v for p, v in zip(spec.params, values) if not p.is_array}
    covered = spec.covered_adjoints
    kinds = []
    for j, k in enumerate(spec.adjoint_params):
        if k == k_out:
            kinds.append("one")
        elif spec.params[k].name in spec.vjp_stored and j in covered and \
                owed.covers(covered[j], values[k].shape, dims, scalars):
            kinds.append("stored")
        else:
            kinds.append("zero")
    return kinds


def backward(step, seeds):
    """The backward of a launch ``step`` that ran ``forward_vjp`` (its ``eager``: the
    buffers, one per float array parameter, None where given away): add ``g * J`` into the
    gradients, ``g`` the seeded output's gradient. Returns False, having written no
    gradient (only the pending seeds of the step's arrays, which the replay would write
    too: runtime/seeds.py), where the launch must replay instead: ``g`` is not finite (or
    the output has no gradient), or a ``J`` a gradient needs was given away."""
    spec, args, kept = step.kernel, step.args, step.eager
    k_out = spec.vjp_seeded_param
    if seeds:
        seeds.write(step.arrays())
    out_grad = getattr(args[k_out], "grad", None)
    if out_grad is None:
        return False
    g = buffers.to_host(out_grad._data).reshape(-1)[0]
    if not np.isfinite(g):
        return False
    owed_by = []
    for j, k in enumerate(spec.adjoint_params):
        grad = getattr(args[k], "grad", None)
        if k == k_out or grad is None:
            continue
        if kept[j] is None:
            return False
        owed_by.append((j, grad))
    writer = f"the backward of {step.label}"
    for j, grad in owed_by:
        J = kept[j]
        take = g == 1 and _takes(grad, J)
        watch.before_write(grad._buf, writer)
        if take:
            grad._data = J          # (all zeros, and nobody else has the old memory)
            kept[j] = None
        elif grad._owed:
            np.multiply(J, g, out=grad._buf)
            grad._owed = False
        elif g == 1:
            grad._buf += J
        else:
            grad._buf += J * g
    if config.verify_fp:
        adjs = [getattr(getattr(args[k], "grad", None), "_buf", None) for k in spec.adjoint_params]
        adjs = [a if a is not None else np.zeros(0) for a in adjs]
        verify.check(spec, "backward", step.values, adjs)
    return True


def _takes(grad, J):
    """Whether ``grad`` may take ``J`` as its memory: it owes its zero, or holds zeros
    (``watch.is_clean``) and nothing but it references its memory (``owed.may_defer``,
    large arrays only: a small one adds for less), and it is adjoint's own host memory
    of ``J``'s shape and dtype (``J`` C-contiguous, as every gradient is)."""
    buf = grad._buf
    if not (buffers.on_host(buf) and not grad._foreign and buf.shape == J.shape and
            buf.dtype == J.dtype and J.flags.c_contiguous):
        return False
    return grad._owed or (watch.is_clean(buf) and owed.may_defer(grad, held=1))

