"""``ad.checkpoint(fn)``: record a segment of launches as one step that keeps only its
inputs, and recompute it in the backward.

Called while a tape records, the wrapped ``fn`` runs once, forward only: its
launches and copies are not kept. The tape gets one ``CheckpointStep`` holding

* the arrays the segment read and did not write (watched by the tape like any
  launch's inputs: a later overwrite makes the tape keep a copy), and
* a copy of the values each array the segment wrote held *before* its first write
  (taken just before that write, ``watch.observe_writes``): an input the segment
  updates in place, an accumulator, a ping-pong buffer.

Its backward puts those values back, runs ``fn`` again on a private tape, runs that
tape's backward, and puts back what the arrays held before (the recomputation
writes nothing the user can see, and the tape it belongs to ignores those writes:
``quiet``). The gradient is that of the plain tape, bit for bit, when ``fn`` computes
the same values from the same inputs.

What ``fn`` must do: be a deterministic function of the contents of the arrays it
reads (it runs twice: Python state it changes, a random draw, changes twice); return
nothing, an ``ad.Array``, or a tuple/list of them (a new array it returns is matched
with the one the recomputation returns, so gradients seeded into it flow). Arrays it
creates and keeps elsewhere (a global list) are not matched.
"""
import functools
import weakref
from dataclasses import dataclass, field

from ..errors import TapeError
from ..runtime import buffers, watch
from ..runtime.memory import nbytes
from ..runtime.tape import Tape, active_tape, quiet, recording_on


def checkpoint(fn):
    """``fn`` wrapped: called while a tape records, its launches become one
    ``CheckpointStep`` (see the module docstring); otherwise it just runs ``fn``."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        tape = active_tape()
        if tape is None:
            return fn(*args, **kwargs)
        return record_segment(tape, fn, args, kwargs)
    return run


def forward_reads(step):
    """[(array object, raw buffer)] a recorded step's forward reads."""
    if hasattr(step, "forward_reads"):
        return step.forward_reads()
    if hasattr(step, "kernel"):
        return [(a, step.values[k]) for k, a in step.reads()]
    src = getattr(step, "src", None)
    if src is not None and hasattr(src, "numpy"):
        return [(src, src.data)]
    return []


class Scout:
    """The tape a segment records on while it first runs: it notes what the segment's
    steps read and the arrays they touch, and keeps nothing else. Writes it records
    count as ``parent``'s own (``Tape._records_for``)."""
    overwrite = "copy"

    def __init__(self, parent, label):
        self.parent = parent
        self.steps = []             # labels only: launches number themselves from its length
        self.reads = {}             # id(buffer) -> (array object, buffer), in order
        self.touched = {}           # id(array) -> weakref to every array a step touched
        self._entered_at = f"{label}, a checkpointed segment"

    def record(self, step):
        self.steps.append(step.label)
        for obj, buf in forward_reads(step):
            self.reads.setdefault(id(buf), (obj, buf))
        for a in step.arrays():
            self.touched.setdefault(id(a), weakref.ref(a))


class EntryKeeper:
    """Told of every write made while a segment runs: keeps the values each buffer held
    before its first write (a buffer that dies before the segment ends is dropped)."""

    def __init__(self):
        self.entries = {}           # id(buffer) -> (weakref to buffer, copy of its values)
        self.written = set()        # memory keys written

    def __call__(self, buf, writer):
        hit = self.entries.get(id(buf))
        if hit is None or hit[0]() is not buf:
            self.entries[id(buf)] = (weakref.ref(buf), buffers.clone(buf))
            self.written.add(watch.memory_key(buf))

    def alive(self):
        return [(ref(), copy) for ref, copy in self.entries.values() if ref() is not None]


def _arrays_in(result):
    if hasattr(result, "numpy"):
        return [result]
    if isinstance(result, (tuple, list)):
        return [a for a in result if hasattr(a, "numpy")]
    return []


def describe(fn):
    """``fn``'s name and where it is defined, for labels."""
    code = getattr(fn, "__code__", None)
    name = getattr(fn, "__qualname__", type(fn).__name__)
    return f"'{name}' ({code.co_filename}:{code.co_firstlineno})" if code else f"'{name}'"


@dataclass
class CheckpointStep:
    """A segment recorded by ``ad.checkpoint``: ``fn(*args, **kwargs)`` is run again
    in the backward from ``entries`` (buffer, values before the segment wrote it) and
    ``inputs`` (array, buffer it read); ``values`` are the buffers the backward reads
    for them (the tape replaces one with a copy when a later write overwrites it)."""
    fn: object
    args: tuple
    kwargs: dict
    label: str
    owner: object
    entries: list
    inputs: list
    values: list
    result: object
    touched: list = field(default_factory=list)

    def reads(self):
        return [(k, obj) for k, (obj, _) in enumerate(self.inputs)]

    def read_name(self, k):
        return "an input of the segment"

    def forward_reads(self):
        return [(obj, value) for (obj, _), value in zip(self.inputs, self.values)]

    def writes(self):
        return []

    def arrays(self):
        return [a for a in (ref() for ref in self.touched) if a is not None]

    def referenced(self):
        args = [a.data for a in list(self.args) + list(self.kwargs.values()) if hasattr(a, "numpy")]
        return args + [buf for buf, _ in self.entries] + [buf for _, buf in self.inputs]

    @property
    def owned_bytes(self):
        return sum(nbytes(copy) for _, copy in self.entries)

    def backward(self):
        saved = []                  # (buffer, what it holds now): put back at the end
        where = f"the recomputation of {self.label}"
        with quiet(self.owner):
            for buf, value in self.entries + [(buf, value) for (_, buf), value in
                                              zip(self.inputs, self.values) if value is not buf]:
                watch.before_write(buf, where, self.owner)
                saved.append((buf, buffers.clone(buf)))
                buffers.copy_into(buf, value)
            private = Tape(parent=self.owner)
            try:
                with recording_on(private):
                    result = self.fn(*self.args, **self.kwargs)
            except BaseException:
                self._put_back(saved, where)
                private.release()
                raise
        try:
            first, again = _arrays_in(self.result), _arrays_in(result)
            if len(first) != len(again):
                raise TapeError(f"{where}: the segment returned {len(again)} arrays, not "
                                f"{len(first)} as when it was recorded")
            for a, b in zip(first, again):
                if b is not a and a.grad is not None:
                    b.grad = a.grad             # its gradient flows into the recorded array's
            private.backward()
        finally:
            self._put_back(saved, where)
            private.release()

    def _put_back(self, saved, where):
        with quiet(self.owner):
            for buf, value in reversed(saved):
                watch.before_write(buf, where, self.owner)
                buffers.copy_into(buf, value)


def record_segment(tape, fn, args, kwargs):
    """Run ``fn`` forward on a ``Scout`` and record it on ``tape`` as a ``CheckpointStep``."""
    label = f"checkpoint #{len(tape.steps)} of {describe(fn)}"
    scout, keeper = Scout(tape, label), EntryKeeper()
    with watch.observe_writes(keeper), recording_on(scout):
        result = fn(*args, **kwargs)
    entries = keeper.alive()
    inputs = [(obj, buf) for obj, buf in scout.reads.values()
              if watch.memory_key(buf) not in keeper.written]
    step = CheckpointStep(fn, tuple(args), dict(kwargs), label, tape, entries, inputs,
                          [buf for _, buf in inputs], result, list(scout.touched.values()))
    tape.record(step)
    return result
