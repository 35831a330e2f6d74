"""``ad.simulate(..., capture=True)``: the steps its backward runs again, replayed by
captures of one step each (runtime/capture.py) instead of launch by launch.

A capture binds what a step launched: its kernels, grids, scalars and the arrays other
than the state. It may replay step ``t`` only if step ``t`` launches the same, so the
forward (which runs every step from Python once, as without capture) names each step's
launches and copies by role (``signature``: an argument is ``src[i]``, ``dst[i]``, the
same array object as in step 0, or a scalar's bytes) and refuses with a
``CaptureError`` the first step that differs from step 0: a scalar that changes with
``t`` (``dt * t``), an array made anew each step, a launch made every tenth step. The
backward then makes a capture per pair of buffer roles (``states``, ``a``, ``b``,
``out``, a slot) the first time it runs a step on them, from a private tape that
records that step, checks that the step still launches what the forward did, and
replays it for every later step on those roles.

What a capture cannot see, the caller must not do (docs/tape.md): write arrays from
Python (``.numpy()[...] =``) or launch with ``record_tape=False`` inside the step.
"""
import numpy as np

from .checkpoint import Scout
from ..runtime import buffers
from ..runtime.capture import CaptureError
from ..runtime.steps import CopyStep, LaunchStep
from ..runtime.tape import Tape, quiet, recording_on


def _role(roles, a):
    """A state array by its place; another by its id and whether it has a gradient (a
    state's gradients are the loop's to give: ``Replays`` keys captures by them)."""
    hit = roles.get(id(a))
    return hit if hit is not None else ("array", id(a), getattr(a, "grad", None) is not None)


def _value(x):
    x = np.asarray(x)
    return ("value", x.dtype.str, x.shape, x.tobytes())


def signature(steps, src, dst):
    """``(key, keep)``: one entry per recorded step in ``key``, its arrays named by role;
    ``keep`` holds the objects whose ids ``key`` names (alive, so no other takes an id)."""
    roles = {}
    for name, group in (("src", src), ("dst", dst)):
        for i, a in enumerate(group):
            roles.setdefault(id(a), (name, i))
    key, keep = [], []
    for s in steps:
        if isinstance(s, LaunchStep):
            args = tuple(_role(roles, arg) if p.is_array else _value(value)
                         for p, arg, value in zip(s.kernel.params, s.args, s.values))
            key.append(("launch", id(s.owner), id(s.kernel), tuple(s.dims), args))
            keep += [s.owner, s.kernel] + list(s.args)
        elif isinstance(s, CopyStep):
            source = _role(roles, s.src) if hasattr(s.src, "_region_set") else _value(s.src)
            key.append(("copy", _role(roles, s.dest), source, s.dest_offset, s.src_offset,
                        s.count))
            keep += [s.dest, s.src]
        else:
            raise CaptureError(f"ad.simulate(capture=True): the step recorded {s.label}, a "
                               f"{type(s).__name__}: a capture replays launches and copies "
                               "only (ad.checkpoint, record_func and nested simulations "
                               "are not captured); pass capture=False")
    return key, keep


def difference(ref, key, labels):
    """Why ``key`` (a step's signature, its steps' ``labels``) is not ``ref``."""
    if len(ref) != len(key):
        return f"it recorded {len(key)} launches and copies, step 0 {len(ref)}"
    for n, (a, b) in enumerate(zip(ref, key)):
        if a == b:
            continue
        if a[:4] != b[:4] or a[0] != "launch":
            return f"{labels[n]} differs (another kernel, grid, array or copy)"
        for k, (x, y) in enumerate(zip(a[4], b[4])):
            if x != y:
                what = "a scalar of another value" if x[0] == "value" else \
                    "another array (one made in the step? make it once, outside)" \
                    if x[0] == "array" or y[0] == "array" else "another state array"
                return f"argument {k} of {labels[n]} is {what} than in step 0"
    return "its launches differ"


class Signer(Scout):
    """The ``Scout`` of a simulation's forward with ``capture=True``: also checks, as the
    forward runs them, that every step records what step 0 did."""

    def __init__(self, parent, label):
        super().__init__(parent, label)
        self.recent = []            # the steps recorded since the last check
        self.ref = None             # (key, keep) of step 0

    def record(self, step):
        super().record(step)
        self.recent.append(step)

    def check(self, src, dst, t):
        steps, self.recent = self.recent, []
        key, keep = signature(steps, src, dst)
        if self.ref is None:
            if not key:
                raise CaptureError("ad.simulate(capture=True): step 0 recorded no launch")
            self.ref = (key, keep)
        elif key != self.ref[0]:
            why = difference(self.ref[0], key, [s.label for s in steps])
            raise CaptureError(f"ad.simulate(capture=True): step {t} does not launch what "
                               f"step 0 did: {why}; a capture replays step 0's launches "
                               "for every step (docs/tape.md): pass capture=False")


class Replays:
    """The captures of one ``SimulateStep.backward``: ``forward(src, dst, t)`` runs a step
    untaped, ``reverse(src, dst, t)`` runs one and reverses it. Captures bind the loop's
    own buffers (``a``, ``b``, ``out``): a step from the user's state or a slot (the first
    of each run of steps) runs from a copy of it in ``b`` (its gradient buffers lent to
    ``b``), the same values, rather than from a capture per slot (each costs more to make
    than the steps it would replay)."""

    def __init__(self, sim):
        self.sim, self.loop, self.ref = sim, sim.loop, sim.signature[0]
        self.caps = {}              # (mode, src, dst, their gradients) -> Capture

    def _key(self, mode, src, dst):
        """The capture's key. (Which gradient buffers the arrays hold is part of it: a
        capture reads the current ones, but makes its arguments again when they change;
        the loop swaps two sets.)"""
        return (mode, id(src), id(dst),
                tuple(0 if a.grad is None else id(a.grad) for a in list(src) + list(dst)))

    def _record(self, key, src, dst, t):
        """Run step ``t`` on a private tape, check it launches what the forward's did,
        and keep its capture; returns the tape (the caller releases it)."""
        loop, private = self.loop, Tape(parent=self.sim.owner)
        with quiet(self.sim.owner), recording_on(private):
            loop.step(loop.pack(src), loop.pack(dst), t)
        try:
            got, _ = signature(private.steps, src, dst)
            if got != self.ref:
                why = difference(self.ref, got, [s.label for s in private.steps])
                raise CaptureError(f"ad.simulate(capture=True): step {t}, run again in the "
                                   f"backward, does not launch what it did in the forward "
                                   f"({why}): did Python state it reads change?")
            self.caps[key] = private.capture()
        except BaseException:
            private.release()
            raise
        return private

    def _lend(self, src, dst, grads):
        """``src`` if it is ``a`` or ``b``, else ``b`` holding a copy of it (and, with
        ``grads``, its gradient buffers; ``dst`` is then ``a`` or ``out``); and ``b``'s
        gradients before."""
        loop = self.loop
        if src is loop.a or src is loop.b:
            return src, None
        assert dst is not loop.b
        before = [x.grad for x in loop.b]
        for x, s in zip(loop.b, src):
            buffers.copy_into(x.data, s.data)
            if grads:
                x.grad = s.grad
        return loop.b, before

    def forward(self, src, dst, t):
        src, before = self._lend(src, dst, False)
        self._forward(src, dst, t)
        if before is not None:
            _give_back(self.loop.b, before)

    def _forward(self, src, dst, t):
        key = self._key("forward", src, dst)
        if key not in self.caps:
            self._record(key, src, dst, t).release()
        else:
            with quiet(self.sim.owner):
                self.caps[key].forward()
            self.sim.replayed += 1

    def reverse(self, src, dst, t):
        src, before = self._lend(src, dst, True)
        try:
            self._reverse(src, dst, t)
        finally:
            if before is not None:
                _give_back(self.loop.b, before)

    def _reverse(self, src, dst, t):
        key = self._key("reverse", src, dst)
        if key not in self.caps:
            private = self._record(key, src, dst, t)
            try:
                private.backward()
            finally:
                private.release()
        else:
            with quiet(self.sim.owner):
                self.caps[key].forward()
            self.caps[key].backward()
            self.sim.replayed += 1


def _give_back(bufs, grads):
    for x, g in zip(bufs, grads):
        x.grad = g
