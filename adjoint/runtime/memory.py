"""What a tape holds in memory, per step and in all, and its budget (``Tape(max_bytes=)``).

A tape holds four kinds of memory:

* **referenced**: the arrays its steps refer to (a launch's arguments, a copy's
  source and destination). They are the user's arrays, but the tape keeps them
  alive until ``reset()``; each allocation is counted once.
* **kept**: the copies copy-on-write made of arrays a later write overwrote
  (``Tape.kept``, one ``KeptCopy`` each).
* **checkpoint**: what a checkpointed step owns: the inputs ``ad.checkpoint`` kept
  and the states and buffers of ``ad.simulate``.

* **saved**: what a recorded launch's forward saved for its backward, one value
  per thread for each loop the store policy stores (``KernelSpec.saved``, see
  docs/semantics.md, store or recompute), instead of replaying the loop; and what
  a launch adding into a one-element loss computed of its gradient when it ran
  (runtime/eager.py), one array per float array parameter.

Loop stacks of a backward live only while that launch's backward runs and are
never held by the tape.

A step says what it refers to with ``referenced()`` (raw buffers) and what it owns
with ``owned_bytes``; launches, copies and ``record_func`` steps are read from their
fields.
"""
from dataclasses import dataclass

import numpy as np

from ..errors import TapeError
from . import watch


def nbytes(buf):
    """The size of a raw buffer (numpy or device array) in bytes."""
    return int(np.prod(buf.shape)) * np.dtype(buf.dtype).itemsize


def referenced(step):
    """The raw buffers ``step`` refers to (its arrays' memory, not kept copies)."""
    own = getattr(step, "referenced", None)
    if own is not None:
        return own()
    if hasattr(step, "kernel"):
        return [a.data if hasattr(a, "numpy") else a
                for p, a in zip(step.kernel.params, step.args) if p.is_array]
    return [a.data for a in step.arrays()]


@dataclass(frozen=True)
class StepMemory:
    """One step's share: bytes of arrays it refers to, of copies kept for it, owned."""
    index: int
    label: str
    referenced_bytes: int
    kept_bytes: int
    checkpoint_bytes: int
    saved_bytes: int = 0


class MemoryReport(dict):
    """``Tape.memory_report()``: a dict, whose ``str()`` is a short table."""

    def __str__(self):
        rows = sorted(self["per_step"],
                      key=lambda s: -(s.kept_bytes + s.checkpoint_bytes + s.saved_bytes))
        lines = [f"tape of {self['steps']} steps holds {_size(self['total_bytes'])}: "
                 f"{_size(self['referenced_bytes'])} in arrays its steps refer to, "
                 f"{_size(self['kept_bytes'])} in {self['kept_arrays']} kept copies of "
                 f"overwritten arrays, {_size(self['checkpoint_bytes'])} in checkpoints, "
                 f"{_size(self['saved_bytes'])} in loop values and gradients saved for backwards"]
        if rows:
            lines.append("  step: referenced, kept, checkpoint, saved (largest first)")
        for s in rows[:10]:
            lines.append(f"  {s.label}: {_size(s.referenced_bytes)}, {_size(s.kept_bytes)}, "
                         f"{_size(s.checkpoint_bytes)}, {_size(s.saved_bytes)}")
        if len(rows) > 10:
            lines.append(f"  ... {len(rows) - 10} more steps")
        return "\n".join(lines)


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def report(tape):
    """The ``MemoryReport`` of ``tape`` (see ``Tape.memory_report``)."""
    kept_by = {}
    for k in tape.kept:
        kept_by[k.reader] = kept_by.get(k.reader, 0) + k.nbytes
    held, per_step = Held(), []
    for i, step in enumerate(tape.steps):
        bufs = referenced(step)
        held.add(step)
        per_step.append(StepMemory(i, step.label, sum(nbytes(b) for b in bufs),
                                   kept_by.get(step.label, 0), getattr(step, "owned_bytes", 0),
                                   saved_bytes(step)))
    return MemoryReport(steps=len(tape.steps), kept_arrays=tape.kept_arrays,
                        kept_bytes=tape.kept_bytes, kept=list(tape.kept),
                        referenced_bytes=held.referenced, checkpoint_bytes=held.owned,
                        saved_bytes=held.saved,
                        total_bytes=held.referenced + held.owned + held.saved + tape.kept_bytes,
                        per_step=per_step)


def saved_bytes(step):
    """Bytes of the values a launch step's forward saved for its backward, and of what its
    ``forward_vjp`` computed (runtime/eager.py)."""
    return sum(nbytes(b) for b in getattr(step, "saved", ())) + \
        sum(nbytes(b) for b in (getattr(step, "eager", None) or ()) if b is not None)


class Held:
    """Running totals of referenced allocations (each once) and owned bytes."""

    def __init__(self, steps=()):
        self.keys = {}
        self.referenced = 0
        self.owned = 0
        self.saved = 0
        for step in steps:
            self.add(step)

    def new_bytes(self, step):
        """Bytes ``step`` would add: allocations not yet held, and what it owns."""
        seen, extra = set(), getattr(step, "owned_bytes", 0) + saved_bytes(step)
        for buf in referenced(step):
            key = watch.memory_key(buf)
            if key not in self.keys and key not in seen:
                seen.add(key)
                extra += nbytes(buf)
        return extra

    def add(self, step):
        for buf in referenced(step):
            key = watch.memory_key(buf)
            if key not in self.keys:
                self.keys[key] = nbytes(buf)
                self.referenced += self.keys[key]
        self.owned += getattr(step, "owned_bytes", 0)
        self.saved += saved_bytes(step)


def check_budget(tape, what, step=None, copies=()):
    """Refuse (``TapeError``) to let ``tape`` hold more than ``tape.max_bytes`` by
    recording ``step`` or keeping ``copies``; else count them as held."""
    held = tape._held
    if step is not None:
        extra = held.new_bytes(step)
    else:
        extra = sum(nbytes(c) for c in {id(c): c for c in copies}.values())
    total = held.referenced + held.owned + held.saved + tape.kept_bytes
    if total + extra > tape.max_bytes:
        action = f"recording {what}" if step is not None else \
            f"keeping a copy of an array {what} overwrites"
        raise TapeError(
            f"tape memory budget: {action} would make the tape hold {total + extra} bytes, over "
            f"its max_bytes={tape.max_bytes} (it holds {held.referenced} bytes in arrays its "
            f"{len(tape.steps)} steps refer to, {tape.kept_bytes} in {tape.kept_arrays} kept "
            f"copies of overwritten arrays, {held.owned} in checkpoints, {held.saved} in loop "
            f"values saved for backwards; this adds {extra}). "
            "Record the repeated part with ad.checkpoint(fn) (the tape keeps only each "
            "segment's inputs and recomputes it in the backward), or a time loop with "
            "ad.simulate(step, state, n_steps, checkpoints='auto', max_bytes=...); "
            "tape.memory_report() shows what each step holds")
    if step is not None:
        held.add(step)
