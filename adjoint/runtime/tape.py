"""``Tape``: records launches and copies, replays their backward in reverse (the steps
it records, and what each one's backward does: ``steps.py``).

The tape recording on a thread is that thread's own (``active_tape``); tapes
do not nest.

Overwrite safety: a recorded step keeps references to the arrays its backward
reads, and the tape watches their memory (``watch``). Before anything adjoint
does overwrites one of them -- a later step of this tape, a launch or copy on
another tape or on none, ``fill_``/``zero_``, another backward writing
gradients -- the tape copies it (``overwrite="copy"``, the default;
``memory_report()`` tells how much it kept). With ``overwrite="error"`` a write
this tape records is refused on the spot, and any other makes ``backward``
refuse; both errors name the array and both steps.

Memory: ``memory_report()`` (``memory.py``) says what the tape holds, per step and in
all; ``Tape(max_bytes=N)`` refuses, with a ``TapeError`` naming the fix
(``ad.checkpoint``, ``ad.simulate``), a step or copy that would make it hold more.

Private tapes: a checkpointed segment (``adjoint/tapes/checkpoint.py``) records on a tape
whose ``parent`` is the tape the segment is recorded on (``recording_on``); writes it
records count as the parent's own, and while a segment is recomputed (values it then
puts back) its ancestors ignore the writes (``quiet``).
"""
import contextlib
import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import TapeError, user_frames
from . import buffers, memory, pending, watch
from .seeds import Seeds
from .steps import CopyStep, FuncStep, LaunchStep



class _Recording(threading.local):
    tape = None         # the tape recording on this thread


_recording = _Recording()


def active_tape():
    """The tape recording launches made on the calling thread, or ``None``."""
    return _recording.tape


@dataclass(frozen=True)
class KeptCopy:
    """A buffer the tape copied because ``writer`` overwrote what ``reader`` read."""
    reader: str
    writer: str
    shape: tuple
    nbytes: int


def _overwrite_message(readers, writer, verb="overwrites"):
    """The array, the step that read it (kernel, file:line, parameter) and its writer."""
    step, k = readers[0]
    others = "".join(f"\n  also read by {s.label} ({s.read_name(j)})" for s, j in readers[1:])
    return (f"{writer} {verb} an array of shape {tuple(step.values[k].shape)} that {step.label} "
            f"read as {step.read_name(k)}; the backward of that launch "
            f"would see the new values.{others}\nWrite to a new array, or record with "
            "ad.Tape(overwrite='copy') (the default), which keeps a copy of the values read")


@dataclass
class Tape:
    """Records launches and copies made inside ``with tape:``. ``max_bytes``: the most
    memory the tape may hold (``memory_report()["total_bytes"]``), or ``None``."""
    overwrite: str = "copy"
    max_bytes: int = None
    steps: list = field(default_factory=list)
    seeded: list = field(default_factory=list)
    kept: list = field(default_factory=list)
    # memory key (watch.memory_key) -> [(step, argument index)] of the recorded reads of
    # live memory, so that a write finds its readers without scanning the whole tape
    _readers: dict = field(default_factory=dict, repr=False)
    _overwritten: list = field(default_factory=list, repr=False)  # refusals backward raises
    _entered_at: str = field(default="", repr=False)    # where __enter__ ran, while recording
    parent: object = field(default=None, repr=False)    # the tape a private tape records for
    _quiet: int = field(default=0, repr=False)          # > 0: ignore writes (see ``quiet``)
    _held: object = field(default=None, repr=False)     # memory.Held, with max_bytes

    def __post_init__(self):
        if self.overwrite not in ("copy", "error"):
            raise ValueError("overwrite must be 'copy' or 'error'")

    def __enter__(self):
        """Record on this thread until ``__exit__``. One tape records per thread at a time:
        a nested ``with ad.Tape():``, or a tape entered twice, is a ``TapeError``."""
        caller = sys._getframe(1)
        here = (f"{caller.f_code.co_filename}:{caller.f_lineno}, "
                f"thread {threading.current_thread().name!r}")
        outer = active_tape()
        if outer is not None or self._entered_at:
            which = "this tape is" if outer is self or outer is None else "another tape is"
            raise TapeError(f"cannot start recording at {here}: {which} already recording "
                            f"(entered at {(outer or self)._entered_at}). Tapes do not nest (as "
                            "in Warp): record everything on the outer tape, or leave its "
                            "'with' block first")
        self._entered_at = here
        _recording.tape = self
        return self

    def __exit__(self, *exc):
        _recording.tape = None
        self._entered_at = ""
        return False

    # -- recording -------------------------------------------------------------
    def before_write(self, key, writer, by):
        """``writer`` is about to write memory ``key`` that recorded steps read (``watch``
        calls this; ``by`` is the tape recording the write, if any). Keep a copy of what
        they read, or (``overwrite="error"``) refuse: on the spot when this tape records
        the write, else when ``backward`` runs. Memory is kept at most once per overwrite:
        the steps then read the copy, which nothing writes."""
        readers = self._readers.get(key)
        if not readers or self._quiet:
            return
        mine = self._records_for(by)
        if by is not None and not mine:
            writer = f"{writer}, recorded on another tape"
        if self.overwrite == "error" and mine:
            raise TapeError(_overwrite_message(readers, writer))
        if self.overwrite == "error":
            self._overwritten.append(_overwrite_message(readers, writer, "overwrote"))
        else:
            self._keep(readers, writer)
        del self._readers[key]
        watch.unwatch(key, self)

    def _records_for(self, by):
        """Whether a write recorded on ``by`` is this tape's own (``by`` is this tape, or a
        private tape of one of its checkpointed segments)."""
        while by is not None:
            if by is self:
                return True
            by = by.parent
        return False

    def _keep(self, readers, writer):
        if self._held is not None:
            memory.check_budget(self, writer, copies=[s.values[k] for s, k in readers])
        copies = {}
        for step, k in readers:
            buf = step.values[k]
            if id(buf) not in copies:
                copies[id(buf)] = buffers.clone(buf)
                self.kept.append(KeptCopy(step.label, writer, tuple(buf.shape), buf.nbytes))
            step.values[k] = copies[id(buf)]

    @property
    def kept_bytes(self):
        return sum(k.nbytes for k in self.kept)

    @property
    def kept_arrays(self):
        return len(self.kept)

    def record(self, step):
        if self.max_bytes is not None:
            if self._held is None:
                self._held = memory.Held(self.steps)
            memory.check_budget(self, step.label, step=step)
        with watch.LOCK:
            self.steps.append(step)
            for k, _ in step.reads():
                key = watch.watch(step.values[k], self)
                self._readers.setdefault(key, []).append((step, k))

    def record_func(self, fn, arrays=()):
        """Run ``fn()`` at this point of the backward pass; ``arrays`` are zeroed by ``zero()``."""
        self.steps.append(FuncStep(fn, list(arrays), f"record_func #{len(self.steps)}"))

    def memory_report(self):
        """What the tape holds (``memory.report``): ``steps``, ``kept_arrays``,
        ``kept_bytes`` and ``kept`` (one ``KeptCopy`` per copy-on-write copy),
        ``referenced_bytes`` (the arrays its steps refer to, each allocation once),
        ``checkpoint_bytes`` (inputs kept by checkpointed steps), ``saved_bytes`` (loop
        values launches saved for their backward: the store policy; gradients a loss's
        launch computed as it ran: runtime/eager.py), ``total_bytes`` and
        ``per_step`` (one ``memory.StepMemory`` per step). ``str()`` of it is a table."""
        return memory.report(self)

    # -- replay ------------------------------------------------------------------
    @user_frames
    def backward(self, loss=None, grads=None):
        """Seed ``loss.grad = 1`` and/or copy each seed of ``grads`` into ``.grad``, then
        run every recorded step's backward in reverse order. On CUDA it then waits for the
        GPU if a checked launch (of its steps or any other) is pending, and raises the
        first one's fault (runtime/pending.py): a gradient is never left to be read from
        a faulted launch."""
        self._refuse_overwritten()
        seeds = self._seed_all(loss, grads)
        try:
            for step in reversed(self.steps):
                self._refuse_overwritten()      # this backward may write what a step read
                if isinstance(step, LaunchStep):
                    step.backward(seeds)        # (may read a seed in place: runtime/seeds.py)
                else:
                    seeds.write()               # (a function may read any gradient)
                    step.backward()
        finally:
            seeds.write()                       # (also when a step raised: as if copied first)
        pending.check("the end of Tape.backward")

    def _refuse_overwritten(self):
        """``overwrite="error"``: a write the tape did not record changed what a step read."""
        if self._overwritten:
            more = len(self._overwritten) - 1
            raise TapeError(self._overwritten[0] + (f"\n({more} more overwrite(s) like it)"
                                                    if more else ""))

    def _seed_all(self, loss, grads):
        """The ``Seeds`` of a backward: each written into its gradient, or pending."""
        seeds = Seeds()
        if loss is not None:
            if loss.size != 1:
                raise TapeError(f"loss must have one element, not shape {loss.shape}")
            self._seed(loss, 1.0, seeds)
        for arr, seed in (grads or {}).items():
            self._seed(arr, seed, seeds)
        return seeds

    def _seed(self, arr, seed, seeds):
        """Copy ``seed`` into ``arr.grad`` (never aliasing the caller's seed array), now or
        when the backward first needs it (``seeds``: runtime/seeds.py)."""
        if not (hasattr(arr, "grad") and hasattr(arr, "_region_set")):   # not an ad.Array
            raise TapeError(f"tape.backward: loss and the keys of grads= must be ad.Array (the "
                            f"array whose .grad is seeded), not {type(arr).__module__}."
                            f"{type(arr).__qualname__}; e.g. grads={{out: np.ones(out.shape)}}")
        if arr.grad is None:
            arr.requires_grad = True
        # an Array, or a numpy array, of the array's shape: copied as it is (no broadcast)
        if hasattr(seed, "numpy") and tuple(seed.shape) == tuple(arr.shape) or \
                type(seed) is np.ndarray and seed.shape == arr.shape:
            seeds.add(arr, seed, self._touched)     # (an Array: device to device on cuda)
        else:
            value = np.asarray(seed.numpy() if hasattr(seed, "numpy") else seed)
            try:
                value = np.broadcast_to(value, arr.shape)
            except ValueError:
                raise TapeError(f"seed of shape {value.shape} does not fit an array of shape "
                                f"{tuple(arr.shape)}") from None
            seeds.add(arr, value)                   # (a broadcast view: written now)
        if not any(a is arr for a in self.seeded):
            self.seeded.append(arr)

    @property
    def gradients(self):
        """``{array: array.grad}`` of every array the tape touched that has a gradient
        (Warp's ``Tape.gradients``: after ``backward``, ``tape.gradients[x]`` is x's)."""
        return {a: a.grad for a in self._touched() if a.grad is not None}

    def zero(self):
        """Zero the gradient of every array the tape touched, seeded ones included."""
        for a in self._touched():
            if a.grad is not None:
                a.grad.zero_()

    def reset(self):
        """``zero()``, then forget every recorded step."""
        self.zero()
        self.seeded.clear()
        self.release()

    def release(self):
        """Forget the recorded steps and kept copies, and stop watching; gradients stay."""
        self.steps.clear()
        self.kept.clear()
        self._held = None
        with watch.LOCK:                    # another thread's write may be telling this tape
            for key in self._readers:
                watch.unwatch(key, self)
            self._readers.clear()
            self._overwritten.clear()

    def _touched(self):
        seen, out = set(), []
        for a in [a for s in self.steps for a in s.arrays()] + self.seeded:
            if id(a) not in seen:
                seen.add(id(a))
                out.append(a)
        return out

    def capture(self):
        """The recorded steps replayed as one generated function each way, compiled on
        the numba backend (``Capture``: runtime/capture.py)."""
        from .capture import Capture
        return Capture(self)

    def visualize(self, path):
        """Write a Graphviz ``.dot`` file of the recorded steps and arrays."""
        from .graph import tape_to_dot
        text = tape_to_dot(self)
        with open(path, "w") as fh:
            fh.write(text)
        return text


def capture(fn, *args, **kwargs):
    """Record ``fn(*args, **kwargs)`` on a new tape and capture it (``Tape.capture``): the
    launches run once, as they are recorded."""
    tape = Tape()
    with tape:
        fn(*args, **kwargs)
    try:
        return tape.capture()
    finally:
        tape.release()      # (the capture keeps what it needs; the tape stops watching)


@contextlib.contextmanager
def recording_on(tape):
    """Record this thread's launches on ``tape`` (or on none) inside the block, without
    the checks of ``with tape:`` (a private tape of a checkpointed segment)."""
    previous = active_tape()
    _recording.tape = tape
    try:
        yield tape
    finally:
        _recording.tape = previous


@contextlib.contextmanager
def quiet(tape):
    """Inside the block, ``tape`` and its ancestors ignore writes: the caller puts back
    the values it changes before they can be read (a segment's recomputation)."""
    chain = []
    while tape is not None:
        chain.append(tape)
        tape = tape.parent
    for t in chain:
        t._quiet += 1
    try:
        yield
    finally:
        for t in chain:
            t._quiet -= 1


def record_copy(dest, src, dest_offset=0, src_offset=0, count=None, kind="copy"):
    """``dest[dest_offset:+count] = src[src_offset:+count]`` over flattened arrays,
    recorded on the active tape as a ``CopyStep`` (``kind`` names it: copy/clone/assign).

    Without offsets and count the sizes must match; with an offset, ``count``
    defaults to what fits in both arrays."""
    if hasattr(src, "numpy"):
        src_data = src.data
    else:
        src_data = np.asarray(buffers.refuse_complex(src, kind), dtype=dest.dtype)
    if dest_offset < 0 or src_offset < 0 or (count is not None and count < 0):
        raise ValueError(f"{kind}: offsets and count must not be negative")
    if count is None:
        if not (dest_offset or src_offset) and src_data.size != dest.size:
            raise ValueError(f"{kind}: source has {src_data.size} elements, destination {dest.size}")
        count = min(dest.size - dest_offset, src_data.size - src_offset)
    if dest_offset + count > dest.size or src_offset + count > src_data.size:
        raise ValueError(f"{kind}: dest_offset={dest_offset}, src_offset={src_offset}, count={count} "
                         f"run past the end of an array (sizes {dest.size} and {src_data.size})")
    tape = active_tape()
    label = f"{kind} #{len(tape.steps)}" if tape is not None else f"unrecorded {kind}"
    label += f" into an array of shape {tuple(dest.shape)}"
    watch.before_write(dest.data, label, tape)
    if tape is not None:
        if getattr(src, "requires_grad", False) and not dest.requires_grad:
            dest.requires_grad = True
    values = buffers.flat(src_data, src_offset, count)
    if src is dest:
        values = buffers.clone(values)    # overlapping regions of one buffer
    dest._region_set(dest_offset, values)
    if tape is not None:
        tape.record(CopyStep(dest, src, dest_offset, src_offset, count, label))
