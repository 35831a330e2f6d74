"""Seeds of ``tape.backward`` written into their gradients only when needed.

``tape.backward(grads={out: seed})`` sets ``out.grad`` to ``seed`` (a copy: the
caller's array is never aliased, never written). A seed given as a host array of the
gradient's shape, dtype and layout is *pending* instead: it is copied in just before
the first step of the backward that touches ``out`` (``write``), or at the end if none
does -- unless that step is a launch whose backward hands ``out``'s adjoint on
(optimize/zeroed.py ``handed``: it reads each element at the thread's own index and
would clear it). That launch reads the seed where it is, writes nothing into it, and
leaves ``out.grad`` zero (an owed zero: runtime/owed.py): the 16 MB seed of a 4M-element
output is neither copied nor cleared (runtime/steps.py ``handing``).

A pending seed must stay what it was when ``backward`` was called, so it is kept
pending only while nothing the backward writes can share its memory: it must not be
(a view of) a gradient of an array the tape touched.
"""
import numpy as np

from . import buffers, owed, watch


class Seeds:
    """The pending seeds of one ``tape.backward``: ``{id(array): (array, seed)}``."""

    def __init__(self):
        self.pending = {}

    def __bool__(self):
        return bool(self.pending)

    def add(self, arr, seed, touched=list):
        """Keep ``seed`` of ``arr`` pending if it may (see the module docstring), else
        write it now. ``touched()``: the arrays of the tape (their gradients may be written
        before the seed is read)."""
        grad = arr.grad
        if self._may_wait(grad, seed, touched):
            self.pending[id(arr)] = (arr, seed)
        else:
            self.pending.pop(id(arr), None)     # (a later seed of one array replaces it)
            _write(arr, seed)

    @staticmethod
    def _may_wait(grad, seed, touched):
        # (a seed smaller than an owed zero is copied: runtime/steps.py ``handing``)
        if type(seed) is not np.ndarray or grad.device != "cpu" or grad._foreign or \
                seed.nbytes < owed.DEFER_BYTES or seed.shape != grad._buf.shape or \
                seed.dtype != grad._buf.dtype:
            return False
        flags = seed.flags
        # the layout, alignment and writability numba compiled the backward for
        if not (flags.c_contiguous and flags.aligned and flags.writeable):
            return False
        return not any(getattr(a, "grad", None) is not None and
                       buffers.on_host(a.grad._buf) and buffers.may_alias(seed, a.grad._buf)
                       for a in touched())

    def get(self, arr):
        """The pending seed of ``arr``, or None."""
        entry = self.pending.get(id(arr))
        return None if entry is None else entry[1]

    def take(self, arr):
        """Forget ``arr``'s pending seed: a backward read it in place."""
        del self.pending[id(arr)]

    def write(self, arrays=None):
        """Copy the pending seeds of ``arrays`` (all, when None) into their gradients."""
        for key in list(self.pending) if arrays is None else [id(a) for a in arrays]:
            entry = self.pending.pop(key, None)
            if entry is not None:
                _write(*entry)


def _write(arr, seed):
    """``arr.grad = seed``, copied."""
    watch.before_write(arr.grad.data, "a seed of tape.backward")
    arr.grad._region_set(0, seed)
