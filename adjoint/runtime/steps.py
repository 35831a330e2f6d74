"""What a tape records: a launch, a copy, a function (``Tape.record_func``), and the
backward each runs when the tape replays it (``runtime/tape.py``).

A launch's backward finds a buffer per float array parameter to accumulate into
(``adjoint_buffers``: the arguments' gradients, or zeroed scratch), runs the kernel's
backward on them and notes which gradients it left all zero (``mark_zeroed``).
"""
from dataclasses import dataclass

import numpy as np

from ..errors import LaunchError, TapeError
from . import buffers, eager, owed, verify, watch


@dataclass
class LaunchStep:
    """One recorded kernel launch; ``values`` are the buffers its backward reads."""
    kernel: object
    dims: tuple
    args: list
    values: list
    label: str
    saved: tuple = ()       # what the forward saved for the backward (KernelSpec.saved)
    eager: list = None      # what forward_vjp computed for a seed of 1 (runtime/eager.py)
    owner: object = None    # the Kernel launched (a capture checks it is still current)

    def arrays(self):
        return [a for a in self.args if hasattr(a, "numpy")]

    def reads(self):
        """(argument index, argument) of every array the backward reads (Array or ndarray)."""
        return [(k, self.args[k]) for k in self.kernel.read_arrays]

    def read_name(self, k):
        return f"parameter '{self.kernel.params[k].name}'"

    def writes(self):
        return [a for p, a in zip(self.kernel.params, self.args)
                if p.is_array and p.name in self.kernel.writes and hasattr(a, "numpy")]

    def refuse_backward(self):
        """Raise if the kernel has no backward: made with enable_backward=False, or one
        pass reverse refused (``rt.unavailable``: the refusal names the user's line),
        before anything of this step's backward is done."""
        if self.kernel.backward is None:
            raise TapeError(f"{self.label}: kernel '{self.kernel.name}' was compiled with "
                            "enable_backward=False")
        why = getattr(self.kernel.backward, "unavailable", None)
        if why is not None:
            raise LaunchError(f"{self.label}: {why}")

    def backward(self, seeds=None):
        """Run the launch's backward; ``seeds``: the tape's ``Seeds`` not yet written into
        their gradients (runtime/seeds.py) -- it may read those of its handed arrays
        where they are, and writes the others of its arrays first."""
        self.refuse_backward()
        if self.eager is not None and eager.backward(self, seeds):
            return
        taken = handing(self.kernel, self.args, self.dims, seeds)
        if seeds:
            seeds.write(self.arrays())
        adjs, clean, stored, alias = adjoint_buffers(self.kernel, self.args,
                                                     f"the backward of {self.label}", self.dims,
                                                     taken or {})
        part = "backward_saved" if self.saved else "backward"
        cleared = None if self.saved else owed.rest_owed(self.kernel, self.args, self.dims,
                                                         adjs, alias)
        if cleared is not None:
            part = "backward_norest"
        run = (self.kernel, part + ("_clean" if clean else ""), self.dims,
               [*self.values, *self.saved], adjs, alias, taken is None)
        if stored:
            with owed.stored(stored):
                verify.run(*run)
        else:
            verify.run(*run)
        for grad in cleared or ():
            grad._owed = True       # (noted clean by mark_zeroed)
        if taken is not None:       # the clears the backward skipped: owed, if it may be
            for _, k in self.kernel.handed_adjoints:
                grad = getattr(self.args[k], "grad", None)
                if grad is not None:
                    grad.zero_()
        mark_zeroed(self.kernel, self.args, self.dims, adjs, alias)


@dataclass
class CopyStep:
    """``dest[dest_offset:+count] = src[src_offset:+count]`` (flattened)."""
    dest: object
    src: object
    dest_offset: int
    src_offset: int
    count: int
    label: str

    def arrays(self):
        return [a for a in (self.dest, self.src) if hasattr(a, "numpy")]

    def reads(self):
        return []

    def writes(self):
        return [self.dest]

    def backward(self):
        """``adj_src += adj_dest`` over the copied region, then ``adj_dest = 0`` there.

        The destination's adjoint is taken and cleared *before* it is added, so a
        copy within one array (overlapping regions, or ``copy(a, a)``) is exact."""
        if self.dest.grad is None:
            return
        for a in (self.dest, self.src):
            if getattr(a, "grad", None) is not None:
                watch.before_write(a.grad.data, f"the backward of {self.label}")
        region = self.dest.grad._flat(self.dest_offset, self.count)
        g = buffers.clone(region)
        buffers.fill(region, 0)
        if hasattr(self.src, "numpy") and self.src.grad is not None:
            self.src.grad._region_add(self.src_offset, g)


@dataclass
class FuncStep:
    """A Python function run during the backward pass (``Tape.record_func``)."""
    fn: object
    arrays_: list
    label: str

    def arrays(self):
        return list(self.arrays_)

    def reads(self):
        return []

    def writes(self):
        return []

    def backward(self):
        self.fn()


def handing(kernel, args, dims, seeds=None):
    """Whether ``kernel``'s backward on ``args`` over the grid ``dims`` may skip the
    clears of its handed adjoints (optimize/zeroed.py ``handed``), and the seeds it
    then reads in place: None (it must clear them), or ``{position among the adjoint
    arguments: seed}``, the seeds taken from ``seeds`` (runtime/seeds.py).

    The clears may be skipped when each handed array's gradient (if it has one) is
    adjoint's own host memory, shaped as the grid (every element is some thread's, which
    reads it before it would clear it), large enough for its zero to be owed
    (``owed.DEFER_BYTES``: a small one is cleared in the kernel for less than a
    ``zero_()`` costs) and no other adjoint buffer's: the caller then zeroes it
    afterwards (``zero_()``: owed, runtime/owed.py). A pending seed of a handed array is
    read in place of its gradient when the array is passed to no other parameter and
    the seed shares memory with no other adjoint buffer of the launch (nor with a seed
    taken before it: ``buffers.call_unaliased`` would give the second one a zeroed
    scratch buffer)."""
    if not kernel.handed_arrays:
        return None
    for _, k in kernel.handed_adjoints:
        grad = getattr(args[k], "grad", None)
        if grad is None:
            continue                # zeroed scratch, dropped after the launch
        buf = grad._buf
        if grad._foreign or not buffers.on_host(buf) or buf.nbytes < owed.DEFER_BYTES or \
                tuple(buf.shape) != tuple(dims):
            return None
    bufs = [getattr(getattr(args[k], "grad", None), "_buf", None) for k in kernel.adjoint_params]
    taken = {}
    for j, k in kernel.handed_adjoints:
        if bufs[j] is None:
            continue
        if _shares(bufs[j], bufs, j):
            return None
        seed = seeds.get(args[k]) if seeds else None
        if seed is not None and sum(a is args[k] for a in args) == 1 and \
                not _shares(seed, bufs + list(taken.values()), j):
            taken[j] = seed     # (one seed memory read for two arrays: the second is copied)
    for j, k in kernel.handed_adjoints:
        if j in taken:
            seeds.take(args[k])
    return taken


def _shares(buf, bufs, j):
    """Whether ``buf`` may share memory with a buffer of ``bufs`` other than the ``j``-th."""
    return any(b is not None and m != j and buffers.may_alias(buf, b) for m, b in enumerate(bufs))


def adjoint_buffers(kernel, args, writer, dims, taken=None):
    """(buffers, clean, stored, alias) for the backward of ``kernel`` on ``args`` over the
    grid ``dims``, which ``writer`` runs: a buffer per float array parameter to accumulate
    into -- its argument's gradient, or zeroed scratch when it has none; ``taken``
    (``handing``): {position: seed} read in place of those gradients -- whether the
    ``_clean`` backward may run (the buffers of ``kernel.clean_arrays`` all hold zeros:
    optimize/once.py), the gradients whose deferred zero that backward makes
    unneeded (runtime/owed.py: run it inside ``owed.stored(stored)``), and the
    positions of the buffers sharing memory with another (``buffers.shared``). Each
    gradient is announced to ``watch`` (after it was asked whether it is clean: it no
    longer is)."""
    adjs, grads, owing = [], [], []
    for k in kernel.adjoint_params:
        a = args[k]
        grad = getattr(a, "grad", None)
        if taken and len(adjs) in taken:
            adjs.append(taken[len(adjs)])   # a seed, only read: its gradient is zeroed after
        elif grad is not None:
            if grad._owed:
                owing.append((len(adjs), grad))
            grads.append(len(adjs))
            adjs.append(grad._buf)      # its deferred zero, if any, is settled below
        elif hasattr(a, "_snapshot"):
            adjs.append(a.zeros_buffer())
        else:
            adjs.append(np.zeros_like(np.asarray(a)))
    alias = buffers.shared(adjs)
    if alias:
        _refuse_shared_gradient(kernel, args, adjs, grads, alias, writer)
    clean = bool(kernel.clean_adjoints)
    for k in kernel.clean_adjoints:     # (a loop: every backward step asks)
        if k in grads and not watch.is_clean(adjs[k]):
            clean = False
            break
    stored = owed.settle(kernel, args, dims, adjs, owing, clean, alias)
    for k in grads:
        watch.before_write(adjs[k], writer)
    return adjs, clean, stored, alias


def _refuse_shared_gradient(kernel, args, adjs, grads, alias, writer):
    """Refuse two different arrays of one launch whose gradients share memory (one's
    ``.grad`` assigned to the other) when the kernel writes either: the backward reads
    and clears an output's gradient, and an alias of it is run on zeroed scratch
    (``buffers.call_unaliased``), so the seed would be missed. One array passed twice,
    or read-only arrays sharing one gradient (their sums add up), stay allowed.
    ``grads``: the positions of ``adjs`` that are gradients; ``alias``: those sharing
    memory with another buffer."""
    params = [kernel.params[k] for k in kernel.adjoint_params]
    arrays = [args[k] for k in kernel.adjoint_params]
    shared = [j for j in grads if j in alias]
    for n, j in enumerate(shared):
        for i in shared[:n]:
            p, q = params[j], params[i]
            if arrays[j] is arrays[i] or not buffers.may_alias(adjs[j], adjs[i]) or \
                    not {p.name, q.name} & set(kernel.writes):
                continue
            raise TapeError(f"{writer}: parameters '{q.name}' and '{p.name}' are different arrays "
                            "whose gradients share memory (was one's .grad assigned to the "
                            "other's?), and the kernel writes one of them, so its gradient is "
                            "read as a seed: give each array its own gradient")


def mark_zeroed(kernel, args, dims, adjs, alias=None):
    """After ``kernel``'s backward ran on ``adjs`` (from ``adjoint_buffers``): note clean
    (``watch.mark_clean``) each gradient it left all zero -- of ``kernel.zeroed_arrays``
    (optimize/zeroed.py), when the array's shape is the launch's grid ``dims`` and no
    other adjoint buffer of the launch shares its memory (``buffers.call_unaliased``
    would add a scratch copy into it afterwards; ``alias``: ``buffers.shared(adjs)``),
    and it is adjoint's own memory."""
    if alias is None:
        alias = buffers.shared(adjs)
    for j, k in kernel.zeroed_adjoints:
        grad = getattr(args[k], "grad", None)
        if grad is None or j in alias or grad._buf is not adjs[j] or grad._foreign or \
                tuple(adjs[j].shape) != tuple(dims):
            continue
        watch.mark_clean(adjs[j])
