"""Owed zeros: ``zero_()`` of a large gradient on the CPU writes nothing until it is looked at.

``Array.zero_()`` of an array adjoint alone holds (``may_defer``) notes the zero as
*owed* instead of writing it: the array is clean (runtime/watch.py) at once, and the
memory is zeroed the first time anything asks for the buffer (``Array._data``:
``numpy()``, ``.data``, a launch, a copy, a seed, ``repr``). The one reader that
does not ask is a backward that stores into every element before reading any
(optimize/cover.py): ``settle`` hands it the raw memory, and once it ran the zero is
no longer owed -- nothing was ever written twice. The tanh layer's weight gradient
(16.8 MB) was zeroed every round before its backward overwrote all of it.

Deferring is safe only while nothing outside the ``Array`` can see the memory: a
numpy array the user kept (``g = w.grad.numpy()``), a view of it, a tensor sharing
it, another ``Array`` on it all hold a reference, and such a zero is written at
once (``may_defer`` counts the references). Device arrays and small arrays are
always zeroed at once.
"""
import sys

DEFER_BYTES = 1 << 16     # smaller arrays are zeroed at once: the write costs less than a check


def may_defer(arr, held=0):
    """Whether ``arr.zero_()`` may owe its zero: a CPU array of adjoint's own memory, large,
    whose buffer nothing but ``arr`` (and ``held`` references the caller knows of)
    references."""
    buf = arr._buf
    # references: arr's attribute, ``buf`` here, getrefcount's argument
    return arr.device == "cpu" and not arr._foreign and buf.nbytes >= DEFER_BYTES and \
        buf.base is None and sys.getrefcount(buf) <= 3 + held


def rest_owed(kernel, args, dims, adjs, alias):
    """Before ``kernel``'s backward on ``adjs`` over the grid ``dims``: the gradients whose
    zeros may be owed instead of written by the gathered backward's last pass, which only
    clears them (``KernelSpec.rest_clears``: optimize/zeroed.py ``rest_clears``) -- then
    run ``backward_norest`` and owe them afterwards -- or None: run the whole backward.
    Each must be its array's gradient, shaped like the grid (the rest clears every
    element), its memory no other adjoint buffer's (``alias``: ``buffers.shared(adjs)``),
    and deferrable (``may_defer``); a scratch buffer (no gradient) is dropped after the
    launch and needs no zeros."""
    if not kernel.rest_clears or kernel.backward_norest is None:
        return None
    owing = []
    for j, k in kernel.rest_clear_adjoints:
        grad = getattr(args[k], "grad", None)
        if grad is None:
            continue
        if grad._buf is not adjs[j] or j in alias or tuple(adjs[j].shape) != tuple(dims) or \
                not may_defer(grad, held=1):     # (held: the reference in ``adjs``)
            return None
        owing.append(grad)
    return owing


def covers(extents, shape, dims, values):
    """Whether a store with ``extents`` (optimize/cover.py) writes every element of an
    array of ``shape`` in a launch of grid ``dims`` with scalar arguments ``values``
    (``{name: value}``)."""
    if len(extents) != len(shape):
        return False
    for (what, e), n in zip(extents, shape):
        size = dims[e] if what == "dim" else values[e] if what == "param" else e
        if int(size) != n:
            return False
    return True


def settle(kernel, args, dims, adjs, owing, clean, alias):
    """Before ``kernel``'s backward on ``adjs`` (runtime/steps.py ``adjoint_buffers``):
    ``owing`` lists ``(j, grad)``, the gradients among ``adjs`` (``adjs[j]`` is
    ``grad._buf``) that owe their zero. Zero each now unless the storing backward runs
    (``clean``) and covers it whole, its memory no other adjoint buffer of the launch
    (``alias``: ``buffers.shared(adjs)``); return the gradients left owing: the backward
    writes all of them (``stored``)."""
    if not owing:
        return ()
    if not clean or not kernel.covered_arrays:
        for _, grad in owing:
            grad._settle()
        return ()
    whole = kernel.covered_adjoints
    values = None
    left = []
    for j, grad in owing:
        extents = whole.get(j)
        if extents is not None and j not in alias:
            if values is None:
                values = {p.name: a for p, a in zip(kernel.params, args) if not p.is_array}
            if covers(extents, grad._buf.shape, dims, values):
                left.append(grad)
                continue
        grad._settle()
    return tuple(left)


class stored:
    """``with stored(grads):`` runs a backward that writes every element of ``grads``
    (from ``settle``): afterwards their zero is no longer owed; if it raises, they are
    zeroed (never left holding an earlier round's values)."""

    def __init__(self, grads):
        self.grads = grads

    def __enter__(self):
        return self

    def __exit__(self, kind, *exc):
        for grad in self.grads:
            if kind is None:
                grad._owed = False
            else:
                grad._settle()
        return False
