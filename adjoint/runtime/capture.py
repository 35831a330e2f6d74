"""``Capture``: a tape's recorded steps replayed as one generated function each way.

``tape.capture()`` (``ad.capture(fn, *args)`` records ``fn(*args)`` first) writes the
source of ``captured_forward`` (every launch and copy again, in order) and
``captured_backward`` (their backwards in reverse, as ``Tape.backward`` runs them):
runtime/capture_code.py. On numba each is one compiled function, so a replay pays none
of a launch's Python checks and bookkeeping again. ``str(capture)`` is the source.

Bound at capture: the arrays (a replay reads their current values; ``rebind`` swaps
one for another of the same shape, dtype and device), the scalars, each kernel's
generated code and which arrays have gradients. A replay checks them and refuses with
a ``CaptureError`` naming what changed (a redefined kernel or func, a gradient given
or dropped, a buffer of another shape): never a stale result.

A replay equals the tape bit for bit: each step calls the compiled variant its launch
ran, and the plain form of its backward (where the tape knows buffers hold zeros it
may store instead of adding: the same values) -- or, where a gathered backward's last
pass only clears gradients shaped as its grid, the backward without that pass and then
a fill of those gradients with zeros (one write each; the tape owes such zeros,
runtime/owed.py). After the backward the gradients it left all zero are noted clean,
as the tape notes them, so that ``zero()`` before the next replay writes nothing. A
loss's launch the tape ran with its VJP at once (runtime/eager.py) replays so too: its
forward computes ``J`` for a seed of 1, and its backward adds ``g * J`` (replays the
backward where ``g`` is not finite).
Values a later step overwrites are copied right after the step reading them, as the
tape keeps them. CUDA launches, ``record_func`` and checkpointed steps are refused.
"""
import contextlib
import dataclasses
import operator

import numpy as np

from ..errors import TapeError
from . import buffers, config, eager, load, racecheck, verify, watch
from .bounds import STATUS_SIZE
from .capture_code import Pools, Source, lit, resolve, row, slot
from .jit import cpu_backend_name
from .steps import CopyStep, FuncStep, LaunchStep


def _rows(stmts, last):
    """``stmts`` with each backward status row ``("brow", r)``, numbered as the steps were
    recorded, as the row it is in the order the backward runs."""
    out = []
    for stmt in stmts:
        if len(stmt) == 2:
            fn, args = stmt
            out.append((fn, [("row", last - t[1]) if t[0] == "brow" else t for t in args]))
        else:       # ("if", test, then, orelse)
            (test,), then, orelse = _rows([stmt[1]], last), stmt[2], stmt[3]
            out.append(("if", test, _rows(then, last), _rows(orelse, last)))
    return out


def _slots(stmts):
    """The slots ``stmts`` (a step's statements, ``if`` statements too) name."""
    out = []
    for stmt in stmts:
        if len(stmt) == 2:
            out += [t[1] for t in stmt[1] if t[0] == "slot"]
        else:       # ("if", test, then, orelse)
            out += _slots([stmt[1]]) + _slots(stmt[2]) + _slots(stmt[3])
    return out


@dataclasses.dataclass
class _Bound:
    """``Capture._binding``: each a (buffers, memory keys) pair."""
    written: tuple
    grads: tuple
    left: tuple


class CaptureError(TapeError):
    """A capture that cannot be made, or replayed on what changed since."""


def _is_array(value):
    """Whether ``value`` is an ``ad.Array`` (runtime/array.py imports the tape, and so this)."""
    return hasattr(value, "_region_set")


def _fixed(value):
    return lambda: value


def _array_getter(arr):
    return lambda: arr._data


def _grad_getter(arr):
    return lambda: arr.grad._data


def _scalar_key(value):
    return ("scalar", type(value).__name__, np.asarray(value).tobytes())


class Capture:
    """A tape's steps as one forward and one backward function (see the module doc)."""

    def __init__(self, tape):
        if tape is None or not tape.steps:
            raise CaptureError("nothing to capture: the tape recorded no launch")
        self.steps = len(tape.steps)
        self._pools = Pools()
        self._arrays = {}       # id(Array) -> [Array, slot of its buffer, slot of its grad]
        self._kernels = {}      # id(spec) -> (Kernel, spec) each replay checks is current
        self._faults = ([], [])     # per status row, forward and backward: (bounds, label,
        #                             the step's arguments)
        self._written = []      # what the forward writes (other tapes keep copies first)
        self._launches = []     # (spec, arguments), for verify_fp
        where = tape._entered_at.split(",")[0] if tape._entered_at else ""
        src = self._src = Source(self._pools, [
            f"# adjoint capture of {self.steps} recorded steps" +
            (f" (the tape entered at {where})" if where else "") + " (runtime/capture.py)"])
        kept_last = self._kept_readers(tape)
        forward, backward, zeroed = [], [], []
        for n, step in enumerate(tape.steps):
            if isinstance(step, LaunchStep):
                fwd, bwd = self._launch(step, n, kept_last)
            elif isinstance(step, CopyStep):
                fwd, bwd = self._copy(step)
            elif isinstance(step, FuncStep):
                raise CaptureError(f"{step.label} runs Python during the backward "
                                   "(Tape.record_func): a capture runs compiled code only")
            else:
                raise CaptureError(f"{step.label}: a {type(step).__name__} (ad.checkpoint, "
                                   "ad.simulate) is not captured: capture its launches alone")
            forward.append(fwd)
            if bwd is not None:
                backward.append(bwd[:2])
                zeroed.append(bwd[2] if len(bwd) > 2 else ())
        # the backward's status rows in the order it runs
        last = len(self._faults[1]) - 1
        backward = [(label, _rows(stmts, last)) for label, stmts in backward[::-1]]
        self._marks = [(_slots(stmts), left) for (_, stmts), left in
                       zip(backward, zeroed[::-1])]
        self._left = None
        self._faults[1].reverse()
        self._written = list({id(a): a for a in self._written}.values())
        self._written_slots = [self._array(a)[1] for a in self._written]
        self.source = src.text(forward, backward)
        self._status = [np.zeros((len(f), STATUS_SIZE), np.int64) for f in self._faults]
        self._typed, self._made = cpu_backend_name() == "numba", None
        values = self._values()
        self._forward, self._backward, self.not_compiled = src.build(
            self.source, self._args(values))
        self._bound = values

    # -- building ----------------------------------------------------------------
    def _array(self, arr):
        """The slot of an argument array's buffer (an ``Array``, or a numpy array)."""
        if _is_array(arr):
            k = self._pools.add(("array", id(arr)), "a", arr._data, _array_getter(arr), arr)
            self._arrays.setdefault(id(arr), [arr, k, None])
            return slot(k)
        return slot(self._pools.add(("buf", id(arr)), "n", arr, _fixed(arr)))

    def _grad(self, arr):
        k = self._pools.add(("grad", id(arr)), "g", arr.grad._data, _grad_getter(arr),
                            ("grad", arr))
        self._array(arr)
        self._arrays[id(arr)][2] = k
        return slot(k)

    def _fixed(self, value, role, key=None):
        return slot(self._pools.add(key or ("fixed", id(value)), role, value, _fixed(value)))

    def _row(self, bounds, label, args, part):
        faults = self._faults[part]
        faults.append((bounds, label, list(args)))
        return (row, lambda r: ("brow", r))[part](len(faults) - 1)

    @staticmethod
    def _kept_readers(tape):
        """{id(kept copy): index of the last step reading it}: where the replay copies
        what a later step overwrites (the tape kept a copy of it)."""
        last = {}
        for n, step in enumerate(tape.steps):
            if isinstance(step, LaunchStep):
                for k, arg in step.reads():
                    live = arg._data if _is_array(arg) else arg
                    if step.values[k] is not live:
                        last[id(step.values[k])] = n
        return last

    def _launch(self, step, n, kept_last):
        """The forward and backward statements of a recorded launch."""
        spec, dims, src = step.kernel, step.dims, self._src
        if getattr(spec, "target", "cpu") != "cpu":
            raise CaptureError(f"{step.label}: a capture runs on the CPU backends, not on "
                               f"{spec.target!r}")
        if step.owner is None:
            raise CaptureError(f"{step.label} launched a KernelSpec, not a kernel: capture "
                               "launches of @ad.kernel functions")
        self._kernels[id(spec)] = (step.owner, spec)
        args, back_args, kept = [], [], []     # (the backward reads kept values)
        reads = dict(step.reads())
        for k, (p, arg, value) in enumerate(zip(spec.params, step.args, step.values)):
            if not p.is_array:
                args.append(self._fixed(value, "s", _scalar_key(value)))
            else:
                args.append(self._array(arg))
            back_args.append(args[-1])
            if k in reads and p.is_array and \
                    value is not (arg._data if _is_array(arg) else arg):
                back_args[-1] = self._fixed(value, "kept")  # filled after its last reader
                if kept_last.get(id(value)) == n:
                    kept.append(("rt_keep", [back_args[-1], args[-1]]))
        self._written += [step.args[k] for k in spec.written_arrays]
        saved = [self._fixed(v, "saved") for v in step.saved]
        self._launches.append((spec, step.args))
        label = f"{step.label}, over {dims}"
        grid = [lit(d) for d in dims]
        # the tape ran it with its VJP at once: so does the replay, on copies of what the
        # tape computed (a backward before any replay reads them)
        kinds = eager.layout(spec, step.args, step.values, dims) \
            if step.eager is not None and all(J is not None for J in step.eager) else None
        vjp = [J.copy() for J in step.eager] if kinds else None
        if vjp is not None:
            saved = [self._fixed(v, "eager", ("eager", n, j)) for j, v in enumerate(vjp)]
            resets = [({"one": "rt_one", "zero": "rt_zero"}[kind], [J])
                      for kind, J in zip(kinds, saved) if kind != "stored"]
        fn, bounds, status = resolve(spec.forward_vjp if vjp is not None else
                                     spec.forward_save if saved else spec.forward, dims,
                                     step.values)
        flag = [self._row(bounds, f"the forward of {step.label}", step.args, 0)] if status else []
        fwd = (label, (resets if vjp is not None else []) +
               [(src.name(fn), grid + args + saved + flag)] + kept)
        if spec.backward is None:
            return fwd, None
        if vjp is not None:
            Js, saved = saved, []
        adjs, zeros, adds, grads, own = [], [], [], [], set()
        for j, k in enumerate(spec.adjoint_params):
            arg = step.args[k]
            grad = getattr(arg, "grad", None)
            if grad is not None and not any(buffers.may_alias(grad._data, g) for g in grads):
                adjs.append(self._grad(arg))
                grads.append(grad._data)
                own.add(j)
                continue
            # zeroed scratch, one per parameter position, shape and dtype; where the
            # gradient shares memory with another of the launch's, the scratch is added
            # into it after the backward (as buffers.call_unaliased does)
            buf = np.zeros_like(arg._data if _is_array(arg) else step.values[k])
            adjs.append(self._fixed(buf, "scratch", ("scratch", j, buf.shape, buf.dtype.str)))
            zeros.append(("rt_zero", [adjs[-1]]))
            if grad is not None:
                adds.append(("rt_add", [self._grad(arg), adjs[-1]]))
        rest = None if saved else self._rest_filled(step, own)
        fn, bounds, status = resolve(spec.backward_saved if saved else spec.backward
                                     if rest is None else spec.backward_norest, dims,
                                     step.values)
        tail = [lit(True)] if spec.handed_arrays else []
        flag = [self._row(bounds, f"the backward of {step.label}", step.args, 1)] if status \
            else []
        replay = zeros + [(src.name(fn), grid + back_args + saved + adjs + tail + flag)] + \
            [("rt_zero", [adjs[j]]) for j in rest or ()] + adds
        if vjp is None:         # the gradients it leaves all zero, as runtime/steps.py
            left = [adjs[j][1] for j, k in spec.zeroed_adjoints if j in own and
                    tuple(step.args[k].grad.shape) == tuple(dims)]      # ``mark_zeroed``
            return fwd, (f"backward of {label}", replay, left)
        return fwd, (f"backward of {label}", [self._eager_backward(step, Js, replay)])

    @staticmethod
    def _rest_filled(step, own):
        """The positions (among the adjoint arguments) of the gradients a gathered backward's
        last pass only clears (``KernelSpec.rest_clears``: optimize/zeroed.py), where the
        replay runs the backward without that pass (``backward_norest``) and then fills them
        with zeros in one write each, as the tape owes them (runtime/owed.py ``rest_owed``):
        each must be its array's own gradient slot (``own``: no scratch added into it
        afterwards) shaped as the grid, so that the pass cleared every element. None: the
        whole backward runs (a parameter with no gradient has zeroed scratch, filled again
        before its next use)."""
        spec, dims = step.kernel, tuple(step.dims)
        if not spec.rest_clears or spec.backward_norest is None:
            return None
        filled = []
        for j, k in spec.rest_clear_adjoints:
            grad = getattr(step.args[k], "grad", None)
            if grad is None:
                continue
            if j not in own or tuple(grad.shape) != dims:
                return None
            filled.append(j)
        return filled

    def _eager_backward(self, step, Js, replay):
        """A backward that adds ``g * J`` into each gradient (runtime/eager.py), ``g`` the
        seeded output's gradient and ``J`` what the forward computed for a seed of 1; where
        ``g`` is not finite it runs ``replay`` instead, as the tape does."""
        spec = step.kernel
        k_out = spec.vjp_seeded_param
        seed = self._grad(step.args[k_out])
        adds = [("rt_eager_add", [seed, Js[j], self._grad(step.args[k])])
                for j, k in enumerate(spec.adjoint_params)
                if k != k_out and getattr(step.args[k], "grad", None) is not None]
        return ("if", ("rt_finite_seed", [seed]), adds, replay)

    def _copy(self, step):
        """The forward and backward statements of a recorded copy."""
        for a in (step.dest, step.src):
            buf = a._data if _is_array(a) else a
            if isinstance(buf, np.ndarray) and not buf.flags.c_contiguous:
                raise CaptureError(f"{step.label}: a capture copies C-contiguous arrays only")
        dest = self._array(step.dest)
        source = self._array(step.src) if _is_array(step.src) else \
            self._fixed(np.ascontiguousarray(step.src), "n")
        self._written.append(step.dest)
        offsets = [lit(step.dest_offset), lit(step.src_offset), lit(step.count)]
        fwd = (step.label, [("rt_copy", [dest, offsets[0], source] + offsets[1:])])
        if step.dest.grad is None:
            return fwd, None
        gd = self._grad(step.dest)
        if getattr(step.src, "grad", None) is not None:
            back = ("rt_copy_backward", [gd, offsets[0], self._grad(step.src)] + offsets[1:])
        else:
            back = ("rt_copy_clear", [gd, offsets[0], offsets[2]])
        return fwd, (f"backward of {step.label}", [back])

    # -- replaying ---------------------------------------------------------------
    def _values(self):
        """The current value of every slot, after checking that nothing it binds changed."""
        for kernel, spec in self._kernels.values():
            if kernel.spec_for("cpu") is not spec:
                raise CaptureError(f"kernel '{spec.name}' ({spec.origin}) runs other code now "
                                   "than when it was captured: it, or a func or constant it "
                                   "uses, was redefined, or the backend or the optimization "
                                   "passes changed since: capture again")
        for arr, _, grad in self._arrays.values():
            if (grad is None) != (arr.grad is None):
                has = "has none now" if grad is not None else "has one now"
                raise CaptureError(f"an array of shape {arr.shape} {has} of a gradient, unlike "
                                   "when it was captured: capture again")
        values = [getter() for _, _, getter, _ in self._pools.slots]
        bound = getattr(self, "_bound", None)
        if bound is not None and not all(map(operator.is_, bound, values)):
            for k, (old, new) in enumerate(zip(bound, values)):
                if new is not old and isinstance(old, np.ndarray) and \
                        (new.shape != old.shape or new.dtype != old.dtype):
                    pool, index = self._pools.slots[k][:2]
                    raise CaptureError(f"{pool}[{index}]: an array captured with shape "
                                       f"{old.shape} and dtype {old.dtype} now has shape "
                                       f"{new.shape} and dtype {new.dtype}: capture again")
        return values

    def _args(self, values, part=0):
        """The captured functions' arguments (the pools) from the slots' values: made
        again only when one of the values changed."""
        last = self._made
        if last is None or len(last[0]) != len(values) or \
                any(a is not b for a, b in zip(last[0], values)):
            tuples = self._pools.tuples(values, typed=self._typed)
            self._made = last = (values, [tuples[name] for name in self._pools.names()])
        return last[1] + [self._status[part]]

    def forward(self):
        """Run every captured step, in order: one call."""
        values = self._values()
        bound = self._binding(values)   # (other tapes keep what they read; clean is not)
        watch.before_writes(*bound.written, "a replay of a capture")
        self._run(self._forward, values, 0)
        if config.verify_fp:
            for spec, args in self._launches:
                verify.check(spec, "forward", [a._data if _is_array(a) else a
                                               for a in args])

    def backward(self, loss=None, grads=None):
        """Seed ``loss.grad = 1`` and/or each ``grads`` seed (as ``Tape.backward``), then
        run every captured step's backward in reverse: one call."""
        values = self._values()
        seeds = ([(loss, 1.0)] if loss is not None else []) + list((grads or {}).items())
        for arr, seed in seeds:
            if not _is_array(arr):
                raise CaptureError("a seed of the backward is for an ad.Array (the loss, or "
                                   f"a key of grads=), not {type(arr).__name__}")
            entry = self._arrays.get(id(arr))
            if entry is not None and entry[2] is None:
                raise CaptureError(f"a seed of the backward is for an array (shape "
                                   f"{arr.shape}) a captured launch uses with no gradient "
                                   "(its part would be lost): give it requires_grad=True "
                                   "before capturing")
            if entry is None and arr.grad is None:
                arr.requires_grad = True    # (as the tape: an array no step uses)
            if arr is loss and loss.size != 1:
                raise CaptureError(f"loss must have one element, not shape {loss.shape}")
            value = seed.numpy() if hasattr(seed, "numpy") else seed
            arr.grad._data[...] = np.broadcast_to(np.asarray(value), arr.shape)
        bound = self._binding(values)
        # a gradient clean now that the backward leaves zero again stays noted clean (and
        # is forgotten if the backward fails); the others are written, then those it
        # leaves zero are noted clean, as the tape notes them (steps.py ``mark_zeroed``:
        # a later ``zero()`` writes nothing)
        kept = watch.clean_unwatched(bound.left[1])
        grads = [(b, k) for b, k in zip(*bound.grads) if k not in kept] if kept else \
            list(zip(*bound.grads))
        watch.before_writes([b for b, _ in grads], [k for _, k in grads],
                            "the backward of a capture")
        try:
            self._run(self._backward, values, 1)
        except BaseException:
            watch.forget_clean(kept)
            raise
        for buf, key in zip(*bound.left):
            if key not in kept:
                watch.mark_clean(buf)

    def _binding(self, values):
        """What a replay on the slots' ``values`` writes, as (buffers, the names
        ``watch.memory_key`` gives them): ``written``, the arrays the forward writes; ``grads``,
        every gradient; ``left``, the gradients the backward leaves all zero -- each zeroed
        by a step (``self._marks``: the slots each step's statements name, and those it
        leaves zero) and named by no later step, its memory counted written wherever any
        slot's is; whole allocations of adjoint's own memory only (not ``_foreign``; a view
        of part of one shares its name, and the rest of it may hold anything). Made again
        only when a slot's value changed."""
        last = self._left
        if last is not None and len(last[0]) == len(values) and \
                all(map(operator.is_, last[0], values)):
            return last[1]
        keys = [watch.memory_key(v) if isinstance(v, np.ndarray) else None for v in values]
        left = {}
        for named, zeroed in self._marks:
            for k in named:
                left.pop(keys[k], None)
            for k in zeroed:
                what = self._pools.slots[k][3]
                if keys[k] is not None and not what[1].grad._foreign and \
                        watch.is_whole(values[k]):
                    left[keys[k]] = values[k]
        grads = [g for _, _, g in self._arrays.values() if g is not None]

        def pairs(slots):
            return [values[k] for k in slots], [keys[k] for k in slots]
        bound = _Bound(pairs(self._written_slots), pairs(grads),
                       (list(left.values()), list(left)))
        self._left = (values, bound)
        return bound

    def _run(self, fn, values, part):
        status = self._status[part]
        status[:] = 0
        if self._typed:         # (numba: its threads for the load now, runtime/load.py)
            load.govern()
        with contextlib.ExitStack() as stack:
            stack.enter_context(np.errstate(all="ignore"))
            if racecheck.enabled():     # (each thread writes the status of its faults)
                for flags in status:
                    stack.enter_context(racecheck.unrecorded(flags))
            fn(*self._args(values, part))
        self._bound = values
        for flags, (bounds, label, args) in zip(status, self._faults[part]):
            if flags[1]:
                error = bounds.fault_error(flags, [a._data if _is_array(a) else a
                                                   for a in args])
                error.args = (f"{label} (replayed by a capture): {error.args[0]}",)
                raise error

    def zero(self):
        """Zero the gradient of every array the capture holds one of."""
        for arr, _, grad in self._arrays.values():
            if grad is not None:
                arr.grad.zero_()

    def rebind(self, mapping):
        """Put each new array of ``{old: new}`` in its old array's place (same shape,
        dtype and device; a new one without a gradient is given one if the old had)."""
        for old, new in mapping.items():
            entry = self._arrays.get(id(old))
            if entry is None:
                raise CaptureError("rebind: an array the capture does not use")
            if not _is_array(new) or new.shape != old.shape or \
                    new.dtype != old.dtype or new.device != old.device:
                raise CaptureError(f"rebind: the new array must be an ad.Array of shape "
                                   f"{old.shape}, dtype {old.dtype} on {old.device!r}")
            if entry[2] is not None and new.grad is None:
                new.requires_grad = True
            slots = self._pools.slots
            pool, index, _, _ = slots[entry[1]]
            slots[entry[1]] = (pool, index, _array_getter(new), new)
            if entry[2] is not None:
                pool, index, _, _ = slots[entry[2]]
                slots[entry[2]] = (pool, index, _grad_getter(new), ("grad", new))
            del self._arrays[id(old)]
            self._arrays[id(new)] = [new, entry[1], entry[2]]

            def swap(args):
                return [new if a is old else a for a in args]
            self._written = swap(self._written)
            self._launches = [(spec, swap(args)) for spec, args in self._launches]
            self._faults = tuple([(b, label, swap(args)) for b, label, args in faults]
                                 for faults in self._faults)
        return self

    def __str__(self):
        return self.source
