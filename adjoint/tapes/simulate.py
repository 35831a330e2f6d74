"""``ad.simulate``: a time loop ``state_{t+1} = step(state_t)`` whose gradient takes
memory for ``k`` states, not ``n_steps``, by binomial (revolve) checkpointing.

``step(src, dst, t)`` writes the state after step ``t`` into ``dst`` from ``src`` (an
``ad.Array`` each, or tuples of them shaped like ``state``), by launches and copies.
It must write every element of ``dst`` with stores (not ``+=``: ``dst`` holds an
older state), and compute the same values from the same ``src``, ``t`` and the
arrays it reads but does not write (parameters): it runs again in the backward.
Scratch arrays it writes and reads within one step (forces) are fine.

Memory: the loop runs in two ping-pong buffers and writes the last state into new
arrays it returns; the user's ``state`` is only read. While a tape records, the
forward stores ``k`` states in preallocated slots, and the tape gets one
``SimulateStep`` holding them. Its backward reverses the steps last to first: a
step is reversed by running it again on a private tape from its state and running
that tape's backward; its state comes from the nearest stored one by untaped steps
(``advance``). Where the stored states go is the binomial schedule of Griewank and
Walther's revolve (``split``): with ``k`` slots and ``r`` the least number such
that ``C(k + 1 + r, r) >= n``, no step runs forward (untaped) more than ``r`` times
in the backward, and the number of forward steps is the least ``k`` slots allow.

The adjoint of the state being reversed lives in two state-sized gradient buffers
that swap roles each step; the user's ``state`` and the returned arrays have their
own ``.grad`` (seeded and accumulated as with any array). The gradient is the plain
tape's (of the same ping-pong loop), bit for bit.

``capture=True``: the backward replays each step it runs again with a capture of one
step (one compiled call instead of its launches' Python), after the forward checked that
every step launches what step 0 did (simulate_capture.py; docs/tape.md).
"""
import math
import weakref

from .checkpoint import Scout, describe
from ..errors import TapeError
from ..runtime import buffers, watch
from ..runtime.array import zeros_like
from ..runtime.memory import nbytes
from ..runtime.tape import Tape, active_tape, quiet, recording_on
from .simulate_capture import Replays, Signer


def beta(c, r):
    """``C(c + r, c)``: with ``c - 1`` free slots, the most steps reversed with no step
    run forward (untaped) more than ``r`` times."""
    return math.comb(c + r, c)


def split(m, c):
    """Where to store the next state when reversing ``m >= 2`` steps with ``c >= 1`` free
    slots: the number of steps before it. ``r`` is the least repetition number that
    reaches ``m``; the left part then takes at least ``beta(c + 1, r - 2)`` steps and
    leaves the right part what ``c - 1`` slots reverse in ``r`` repetitions. This gives
    the least total number of forward steps (``tests/tapes/test_simulate.py`` compares it
    with a dynamic program)."""
    r = 0
    while beta(c + 1, r) < m:
        r += 1
    j = max(1, m - beta(c, r), beta(c + 1, r - 2) if r >= 2 else 1)
    return min(j, m - 1)


def simulate(step, state, n_steps, checkpoints="auto", max_bytes=None, capture=False):
    """Run ``step(src, dst, t)`` for ``t`` in ``range(n_steps)`` from ``state``; return
    the final state in new arrays. Recorded on a tape as one ``SimulateStep`` keeping
    ``checkpoints`` states: an int, or ``"auto"``: what ``max_bytes`` (the memory the
    loop may own: its two buffers, two gradient buffers and the slots) allows, else
    what the recording tape's ``max_bytes`` leaves, else about ``sqrt(n_steps)``.
    ``capture=True``: the backward's steps are captured replays (module docstring); a
    step that launches other kernels, scalars or arrays than step 0 is a CaptureError.
    Without a tape it changes nothing (no step runs twice)."""
    single = hasattr(state, "numpy")
    states = [state] if single else list(state)
    n = int(n_steps)
    if n < 1:
        raise ValueError(f"ad.simulate: n_steps must be at least 1, not {n_steps!r}")
    loop = Loop(step, states, n, single)
    tape = active_tape()
    if tape is None:
        loop.advance(loop.states, 0, n)
    else:
        loop.slots_for(_slots(checkpoints, max_bytes, loop, n, tape))
        SimulateStep.record(tape, loop, capture)
    return loop.pack(loop.out)


def _slots(checkpoints, max_bytes, loop, n, tape):
    if checkpoints != "auto":
        k = int(checkpoints)
        if k < 0:
            raise ValueError(f"ad.simulate: checkpoints must be 'auto' or >= 0, not {k}")
        return min(k, n - 1)
    if max_bytes is None and tape.max_bytes is not None:
        # what the tape has left, less the state and output arrays it will refer to and
        # one state's worth for the parameters the steps read (unknown before they run)
        max_bytes = tape.max_bytes - tape.memory_report()["total_bytes"] - 3 * loop.state_bytes
    if max_bytes is None:
        return min(n - 1, math.isqrt(n - 1) + 1)
    fixed = 4 * loop.state_bytes
    if max_bytes < fixed:
        raise TapeError(f"ad.simulate: max_bytes={max_bytes} is less than the {fixed} bytes "
                        f"the loop needs at least (two buffers and two gradient buffers of "
                        f"{loop.state_bytes} bytes)")
    return min(n - 1, (max_bytes - fixed) // loop.state_bytes)


class Loop:
    """The buffers of one ``simulate`` call and the forward steps over them."""

    def __init__(self, step, states, n, single):
        self.step, self.states, self.n, self.single = step, states, n, single
        self.a = [zeros_like(s, requires_grad=_float(s)) for s in states]
        self.b = [zeros_like(s, requires_grad=_float(s)) for s in states]
        self.out = [zeros_like(s, requires_grad=_float(s)) for s in states]
        self.slots = []
        self.state_bytes = sum(nbytes(s.data) for s in states)
        self.forward_steps = 0              # steps run forward (untaped), for measurements
        self.run = self.plain               # how advance runs a step (or a Replays' forward)

    def slots_for(self, k):
        self.slots = [[zeros_like(s, requires_grad=False) for s in self.states]
                      for _ in range(k)]

    def pack(self, bufs):
        return bufs[0] if self.single else tuple(bufs)

    def next_buffer(self, cur, t):
        if t == self.n - 1:
            return self.out
        return self.b if cur is self.a else self.a

    def advance(self, src, t0, t1):
        """Run steps ``t0 .. t1-1`` from the state in ``src``; the buffers holding state ``t1``."""
        cur = src
        for t in range(t0, t1):
            nxt = self.next_buffer(cur, t)
            self.run(cur, nxt, t)
            cur = nxt
        self.forward_steps += t1 - t0
        return cur

    def plain(self, src, dst, t):
        self.step(self.pack(src), self.pack(dst), t)

    def internal(self):
        return [a.data for group in [self.a, self.b, self.out] + self.slots for a in group]


def _float(a):
    return a.dtype.kind == "f"


class SimulateStep:
    """``ad.simulate`` recorded on a tape (see the module docstring)."""

    def __init__(self, tape, loop, label):
        self.owner, self.loop, self.label = tape, loop, label
        self.inputs, self.values, self.touched, self.written = [], [], [], []
        self.stored = {}                    # depth -> step whose state slot[depth] holds
        self.recomputed = 0                 # steps run on a private tape (measurements)
        self.replayed = 0                   # steps a capture replayed (measurements)
        self.signature = self.replays = None    # capture=True: simulate_capture.py

    @classmethod
    def record(cls, tape, loop, capture=False):
        label = (f"simulate #{len(tape.steps)} of {describe(loop.step)} ({loop.n} steps, "
                 f"{len(loop.slots)} checkpoints)")
        self = cls(tape, loop, label)
        scout, written = (Signer if capture else Scout)(tape, label), {}
        if capture:
            def run(src, dst, t):
                loop.plain(src, dst, t)
                scout.check(src, dst, t)
            loop.run = run
        internal = {watch.memory_key(b) for b in loop.internal()}

        def note(buf, writer):
            if watch.memory_key(buf) not in internal:
                written.setdefault(id(buf), weakref.ref(buf))
        try:
            with watch.observe_writes(note), recording_on(scout):
                self._forward()
        finally:
            loop.run = loop.plain
        if capture:
            self.signature = scout.ref      # (step 0's launches: what the captures replay)
        self.written = [ref for ref in written.values()]
        self.inputs = [(obj, buf) for obj, buf in scout.reads.values()
                       if watch.memory_key(buf) not in internal]
        self.values = [buf for _, buf in self.inputs]
        self.touched = list(scout.touched.values())
        tape.record(self)

    def _forward(self):
        """Steps ``0 .. n-1``, storing the states the first reversals start from."""
        loop, start, cur, depth = self.loop, 0, self.loop.states, 0
        while loop.n - start > 1 and depth < len(loop.slots):
            mid = start + split(loop.n - start, len(loop.slots) - depth)
            cur = loop.advance(cur, start, mid)
            _store(loop.slots[depth], cur)
            self.stored[depth], start, cur, depth = mid, mid, loop.slots[depth], depth + 1
        loop.advance(cur, start, loop.n)

    # -- what the tape sees --------------------------------------------------------
    def reads(self):
        return [(k, obj) for k, (obj, _) in enumerate(self.inputs)]

    def read_name(self, k):
        return "an input of the simulation"

    def forward_reads(self):
        return [(obj, value) for (obj, _), value in zip(self.inputs, self.values)]

    def writes(self):
        return list(self.loop.out)

    def arrays(self):
        alive = [a for a in (ref() for ref in self.touched) if a is not None]
        return alive + list(self.loop.states) + list(self.loop.out)

    def referenced(self):
        return [s.data for s in self.loop.states + self.loop.out] + [b for _, b in self.inputs]

    @property
    def owned_bytes(self):
        loop = self.loop
        grads = sum(nbytes(a.grad.data) for a in loop.a + loop.b if a.grad is not None)
        return (2 + len(loop.slots)) * loop.state_bytes + grads

    # -- the backward ----------------------------------------------------------------
    def backward(self):
        loop, saved = self.loop, []
        where = f"the recomputation of {self.label}"
        with quiet(self.owner):
            for buf in [r() for r in self.written] + \
                    [buf for (_, buf), value in zip(self.inputs, self.values) if value is not buf]:
                if buf is not None:
                    saved.append((buf, buffers.clone(buf)))
            for (_, buf), value in zip(self.inputs, self.values):
                if value is not buf:
                    watch.before_write(buf, where, self.owner)
                    buffers.copy_into(buf, value)
        self.g0, self.g1 = [a.grad for a in loop.a], [b.grad for b in loop.b]
        self.carry = [o.grad for o in loop.out]     # the adjoint of the state after the step
        stored, self.stored = self.stored, {}
        if self.signature is not None:
            self.replays = Replays(self)
            loop.run = self.replays.forward
        try:
            self._reverse(0, loop.n, 0, loop.states, stored)
        finally:
            with quiet(self.owner):
                for buf, value in reversed(saved):
                    watch.before_write(buf, where, self.owner)
                    buffers.copy_into(buf, value)
            for a, g in zip(loop.a + loop.b, self.g0 + self.g1):
                a.grad = g
            for slot in loop.slots:
                for s in slot:
                    s.grad = None
            loop.run, self.replays = loop.plain, None   # (the captures go with it)

    def _reverse(self, start, end, depth, src, stored):
        """Reverse steps ``start .. end-1``; ``src`` holds state ``start`` and is only read.
        A part after a stored state is reversed before the part that leads to it (a stack,
        not recursion: ``k`` may be in the thousands)."""
        loop, todo = self.loop, [(start, end, depth, src)]
        while todo:
            start, end, depth, src = todo.pop()
            free = len(loop.slots) - depth
            if end - start == 1 or free == 0:
                for j in range(end - 1, start - 1, -1):
                    with quiet(self.owner):
                        cur = loop.advance(src, start, j)
                    self._reverse_step(j, cur)
                continue
            mid = start + split(end - start, free)
            if stored.pop(depth, None) != mid:
                with quiet(self.owner):
                    _store(loop.slots[depth], loop.advance(src, start, mid))
            todo.append((start, mid, depth, src))
            todo.append((mid, end, depth + 1, loop.slots[depth]))

    def _reverse_step(self, j, src):
        """Run step ``j`` from ``src`` on a private tape and reverse it: the adjoint of
        state ``j + 1`` (``carry``) flows into that of state ``j``."""
        loop = self.loop
        dst = loop.next_buffer(src, j)
        if dst is not loop.out:
            _give_grads(dst, self.carry)
        fresh = self.g1 if self.carry is self.g0 else self.g0
        if src is not loop.states:
            for g in fresh:
                if g is not None:
                    g.zero_()
            _give_grads(src, fresh)
        if self.replays is not None:
            self.replays.reverse(src, dst, j)
        else:
            private = Tape(parent=self.owner)
            try:
                with quiet(self.owner), recording_on(private):
                    loop.step(loop.pack(src), loop.pack(dst), j)
                private.backward()
            finally:
                private.release()
        self.recomputed += 1
        if src is not loop.states:
            self.carry = fresh


def _give_grads(bufs, grads):
    for a, g in zip(bufs, grads):
        if g is not None:
            a.grad = g


def _store(slot, cur):
    for s, c in zip(slot, cur):
        buffers.copy_into(s.data, c.data)
