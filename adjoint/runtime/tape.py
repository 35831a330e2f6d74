"""``Tape``: records launches and copies, replays their backward in reverse.

Overwrite safety: a recorded step keeps references to the arrays its backward
reads. Before a later recorded step overwrites one of them, the tape copies it
(``overwrite="copy"``, the default; ``memory_report()`` tells how much it
kept) or refuses with an error naming both steps (``overwrite="error"``).
"""
from dataclasses import dataclass, field

import numpy as np

from ..errors import TapeError
from . import buffers
from .array import Array

_ACTIVE = []


def active_tape():
    return _ACTIVE[-1] if _ACTIVE else None


@dataclass
class LaunchStep:
    """One recorded kernel launch; ``values`` are the buffers its backward reads."""
    kernel: object
    dims: tuple
    args: list
    values: list
    label: str

    def arrays(self):
        return [a for a in self.args if hasattr(a, "numpy")]

    def reads(self):
        """(argument index, argument) of every array the backward reads (Array or ndarray)."""
        return [(k, a) for k, (p, a) in enumerate(zip(self.kernel.params, self.args))
                if p.is_array and p.name in self.kernel.reads]

    def writes(self):
        return [a for p, a in zip(self.kernel.params, self.args)
                if p.is_array and p.name in self.kernel.writes and hasattr(a, "numpy")]

    def backward(self):
        if self.kernel.backward is None:
            raise TapeError(f"{self.label}: kernel '{self.kernel.name}' was compiled with "
                            "enable_backward=False")
        adjs = [adjoint_buffer(a) for p, a in zip(self.kernel.params, self.args) if p.has_adjoint]
        buffers.call_unaliased(self.kernel.backward, (*self.dims, *self.values), adjs)


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


@dataclass(frozen=True)
class KeptCopy:
    """A buffer the tape copied because ``writer`` overwrote what ``reader`` read."""
    reader: str
    writer: str
    shape: tuple
    nbytes: int


def adjoint_buffer(a):
    """The buffer a backward pass accumulates into for ``a`` (scratch when it has no grad)."""
    if hasattr(a, "grad") and a.grad is not None:
        return a.grad.data
    if hasattr(a, "_snapshot"):
        return a.zeros_buffer()
    return np.zeros_like(np.asarray(a))


@dataclass
class Tape:
    """Records launches and copies made inside ``with tape:``."""
    overwrite: str = "copy"
    steps: list = field(default_factory=list)
    seeded: list = field(default_factory=list)
    kept: list = field(default_factory=list)
    # id(live buffer) -> [(step, argument index)] of recorded reads, so that a write
    # finds its readers without scanning the whole tape
    _readers: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.overwrite not in ("copy", "error"):
            raise ValueError("overwrite must be 'copy' or 'error'")

    def __enter__(self):
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        return False

    # -- recording -------------------------------------------------------------
    def before_write(self, array, label):
        """Keep what earlier steps read from ``array`` before ``label`` overwrites it.

        Only steps that still hold the live buffer need it; after one copy they
        all share the kept buffer, so an array is kept at most once per overwrite."""
        buffer = array.data if hasattr(array, "data") and hasattr(array, "_snapshot") else array
        readers = [(s, k) for s, k in self._readers.pop(id(buffer), []) if s.values[k] is buffer]
        if not readers:
            return
        if self.overwrite == "error":
            step, k = readers[0]
            others = "".join(f"\n  also read by {s.label} (parameter '{s.kernel.params[j].name}')"
                             for s, j in readers[1:])
            raise TapeError(f"{label} overwrites an array of shape {tuple(array.shape)} that "
                            f"{step.label} read as parameter '{step.kernel.params[k].name}'; "
                            f"the backward of that launch would see the new values.{others}\n"
                            "Write to a new array, or record with ad.Tape(overwrite='copy') "
                            "(the default), which keeps a copy of the values read")
        kept = array._snapshot() if buffer is not array else buffer.copy()
        self.kept.append(KeptCopy(readers[0][0].label, label, tuple(array.shape), kept.nbytes))
        for s, k in readers:
            s.values[k] = kept

    @property
    def kept_bytes(self):
        return sum(k.nbytes for k in self.kept)

    @property
    def kept_arrays(self):
        return len(self.kept)

    def record(self, step):
        self.steps.append(step)
        for k, _ in step.reads():
            self._readers.setdefault(id(step.values[k]), []).append((step, k))

    def record_func(self, fn, arrays=()):
        """Run ``fn()`` at this point of the backward pass; ``arrays`` are zeroed by ``zero()``."""
        self.steps.append(FuncStep(fn, list(arrays), f"record_func #{len(self.steps)}"))

    def memory_report(self):
        """What copy-on-write kept: ``{"kept_arrays", "kept_bytes", "steps", "kept"}``,
        ``kept`` listing one ``KeptCopy`` (reader, writer, shape, nbytes) per copy."""
        return {"kept_arrays": self.kept_arrays, "kept_bytes": self.kept_bytes,
                "steps": len(self.steps), "kept": list(self.kept)}

    # -- replay ------------------------------------------------------------------
    def backward(self, loss=None, grads=None):
        """Seed ``loss.grad = 1`` and/or copy each seed of ``grads`` into ``.grad``, then
        run every recorded step's backward in reverse order."""
        if loss is not None:
            if loss.size != 1:
                raise TapeError(f"loss must have one element, not shape {loss.shape}")
            self._seed(loss, 1.0)
        for arr, seed in (grads or {}).items():
            self._seed(arr, seed)
        for step in reversed(self.steps):
            step.backward()

    def _seed(self, arr, seed):
        """Copy ``seed`` into ``arr.grad`` (never aliasing the caller's seed array)."""
        if not isinstance(arr, Array):
            raise TapeError(f"tape.backward: loss and the keys of grads= must be ad.Array (the "
                            f"array whose .grad is seeded), not {type(arr).__module__}."
                            f"{type(arr).__qualname__}; e.g. grads={{out: np.ones(out.shape)}}")
        if arr.grad is None:
            arr.requires_grad = True
        if hasattr(seed, "numpy") and tuple(seed.shape) == tuple(arr.shape):
            arr.grad._region_set(0, seed)      # an Array: device to device on cuda
        else:
            value = np.asarray(seed.numpy() if hasattr(seed, "numpy") else seed)
            try:
                arr.grad._region_set(0, np.broadcast_to(value, arr.shape))
            except ValueError:
                raise TapeError(f"seed of shape {value.shape} does not fit an array of shape "
                                f"{tuple(arr.shape)}") from None
        if not any(a is arr for a in self.seeded):
            self.seeded.append(arr)

    def zero(self):
        """Zero the gradient of every array the tape touched, seeded ones included."""
        for a in self._touched():
            if a.grad is not None:
                a.grad.zero_()

    def reset(self):
        """``zero()``, then forget every recorded step."""
        self.zero()
        self.steps.clear()
        self.seeded.clear()
        self.kept.clear()
        self._readers.clear()

    def _touched(self):
        seen, out = set(), []
        for a in [a for s in self.steps for a in s.arrays()] + self.seeded:
            if id(a) not in seen:
                seen.add(id(a))
                out.append(a)
        return out

    def visualize(self, path):
        """Write a Graphviz ``.dot`` file of the recorded steps and arrays."""
        from .graph import tape_to_dot
        text = tape_to_dot(self)
        with open(path, "w") as fh:
            fh.write(text)
        return text


def record_copy(dest, src, dest_offset=0, src_offset=0, count=None, kind="copy"):
    """``dest[dest_offset:+count] = src[src_offset:+count]`` over flattened arrays,
    recorded on the active tape as a ``CopyStep`` (``kind`` names it: copy/clone/assign).

    Without offsets and count the sizes must match; with an offset, ``count``
    defaults to what fits in both arrays."""
    src_data = src.data if hasattr(src, "numpy") else np.asarray(src, dtype=dest.dtype)
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
    label = f"{kind} #{len(tape.steps) if tape else 0} into an array of shape {tuple(dest.shape)}"
    if tape is not None:
        tape.before_write(dest, label)
        if getattr(src, "requires_grad", False) and not dest.requires_grad:
            dest.requires_grad = True
    values = buffers.flat(src_data, src_offset, count)
    if src is dest:
        values = buffers.clone(values)    # overlapping regions of one buffer
    dest._region_set(dest_offset, values)
    if tape is not None:
        tape.record(CopyStep(dest, src, dest_offset, src_offset, count, label))
