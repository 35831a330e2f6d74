"""``Tape``: records launches and copies, replays their backward in reverse.

Overwrite safety: a recorded step keeps references to the arrays its backward
reads. Before a later recorded step overwrites one of them, the tape copies it
(``overwrite="copy"``, the default; ``memory_report()`` tells how much it
kept) or refuses with an error naming both steps (``overwrite="error"``).
"""
from dataclasses import dataclass, field

import numpy as np

from ..errors import TapeError

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
        return [(k, a) for k, (p, a) in enumerate(zip(self.kernel.params, self.args))
                if p.is_array and p.name in self.kernel.reads and hasattr(a, "numpy")]

    def writes(self):
        return [a for p, a in zip(self.kernel.params, self.args)
                if p.is_array and p.name in self.kernel.writes and hasattr(a, "numpy")]

    def backward(self):
        if self.kernel.backward is None:
            raise TapeError(f"{self.label}: kernel '{self.kernel.name}' was compiled with "
                            "enable_backward=False")
        adjs = [adjoint_buffer(a) for p, a in zip(self.kernel.params, self.args) if p.has_adjoint]
        self.kernel.backward(*self.dims, *self.values, *adjs)


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
        if self.dest.grad is None:
            return
        g = self.dest.grad.numpy().reshape(-1)[self.dest_offset:self.dest_offset + self.count]
        if hasattr(self.src, "numpy") and self.src.grad is not None:
            s = self.src.grad.numpy().reshape(-1)[self.src_offset:self.src_offset + self.count]
            s += g
        g[...] = 0


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


def adjoint_buffer(a):
    """The buffer a backward pass accumulates into for ``a`` (scratch when it has no grad)."""
    if hasattr(a, "grad") and a.grad is not None:
        return a.grad.numpy()
    return np.zeros_like(np.asarray(a))


@dataclass
class Tape:
    """Records launches and copies made inside ``with tape:``."""
    overwrite: str = "copy"
    steps: list = field(default_factory=list)
    seeded: list = field(default_factory=list)
    kept_bytes: int = 0
    kept_arrays: int = 0

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
        """Keep what earlier steps read from ``array`` before ``label`` overwrites it."""
        readers = [(s, k) for s in self.steps for k, a in s.reads()
                   if a is array and s.values[k] is array.numpy()]
        if not readers:
            return
        if self.overwrite == "error":
            first = readers[0][0]
            raise TapeError(f"{label} overwrites array '{first.kernel.params[readers[0][1]].name}' "
                            f"that {first.label} read; its backward would see the new values. "
                            "Write to a new array, or use Tape(overwrite='copy')")
        kept = array.numpy().copy()
        self.kept_bytes += kept.nbytes
        self.kept_arrays += 1
        for s, k in readers:
            s.values[k] = kept

    def record(self, step):
        self.steps.append(step)

    def record_func(self, fn, arrays=()):
        """Run ``fn()`` at this point of the backward pass; ``arrays`` are zeroed by ``zero()``."""
        self.steps.append(FuncStep(fn, list(arrays), f"record_func #{len(self.steps)}"))

    def memory_report(self):
        return {"kept_arrays": self.kept_arrays, "kept_bytes": self.kept_bytes,
                "steps": len(self.steps)}

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
        if arr.grad is None:
            arr.requires_grad = True
        arr.grad.numpy()[...] = np.asarray(seed.numpy() if hasattr(seed, "numpy") else seed)
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
        self.kept_bytes = self.kept_arrays = 0

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


def record_copy(dest, src, dest_offset=0, src_offset=0, count=None):
    """Copy ``src`` into ``dest`` (flattened, with offsets); recorded on the active tape."""
    src_data = src.numpy() if hasattr(src, "numpy") else np.asarray(src, dtype=dest.dtype)
    if count is None:
        count = min(dest.size - dest_offset, src_data.size - src_offset) if (dest_offset or src_offset) \
            else dest.size
        if not (dest_offset or src_offset) and src_data.size != dest.size:
            raise ValueError(f"copy: source has {src_data.size} elements, destination {dest.size}")
    if dest_offset + count > dest.size or src_offset + count > src_data.size:
        raise ValueError("copy: offsets and count run past the end of an array")
    tape = active_tape()
    label = f"copy #{len(tape.steps)} into an array of shape {dest.shape}" if tape else "copy"
    if tape is not None:
        tape.before_write(dest, label)
        if hasattr(src, "requires_grad") and src.requires_grad and not dest.requires_grad:
            dest.requires_grad = True
    dest.numpy().reshape(-1)[dest_offset:dest_offset + count] = \
        src_data.reshape(-1)[src_offset:src_offset + count]
    if tape is not None:
        tape.record(CopyStep(dest, src, dest_offset, src_offset, count, label))
