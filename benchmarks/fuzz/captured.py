"""Every taped run's capture (runtime/capture.py), replayed and compared with the tape.

After ``check.taped`` ran a program's schedule on a tape, ``replay`` records it again
on fresh arrays, captures that tape (``tape.capture()``), puts every array back to its
first values, zeroes the gradients, and runs the capture's forward and backward
(seeded as the tape's backward was). What it computed -- the weighed arrays before
and after the backward, the leaves' gradients -- must equal the tape's bit for bit:
``mismatch`` says where it does not (a finding, reported as a mismatch by check.py).
Where the tape ran a loss's launch with its VJP at once (runtime/eager.py: for a seed
other than 1 it rounds one product per element otherwise) and the capture that
launch's backward, they must agree to 1e-9 (float64) or 2e-4 (float32) of the array's
largest magnitude, as optimization levels that round otherwise must (levels.py).
"""
import numpy as np


def replay(prog, mod, data, weights, device, record):
    """``(forward, after, grads, eager)`` of the capture's replay (as ``check.taped`` gives
    them) and whether the tape ran a launch's VJP at once; ``record(prog, mod, data,
    device, first=dict)`` records the schedule and fills ``first`` with the arrays it
    started from."""
    first = {}
    arrays, tape = record(prog, mod, data, device, first=first)
    for n in weights:       # (tape.backward gives a seeded array its gradient first)
        arrays[n].requires_grad = True
    eager = any(getattr(step, "eager", None) is not None for step in tape.steps)
    cap = tape.capture()
    tape.release()
    for n, arr in first.items():
        values = arr.numpy()
        values[...] = np.asarray(data[n]).reshape(values.shape)
    cap.zero()
    cap.forward()
    forward = {n: arrays[n].numpy().copy() for n in weights}
    cap.backward(grads={arrays[n]: w for n, w in weights.items()})
    after = {n: arrays[n].numpy() for n in weights}
    grads = {n: arrays[n].grad.numpy() if arrays[n].grad is not None
             else np.zeros(data[n].shape) for n in prog.leaves()}
    return forward, after, grads, eager


def mismatch(taped, replayed, eager=False):
    """Where the replay differs from the tape (a message), or None: bit for bit, or with
    ``eager`` to the tolerance of the module docstring."""
    for what, a, b in zip(("forward value", "after backward", "gradient"), taped, replayed):
        for n, x in a.items():
            y = b[n]
            if eager and what != "forward value":
                x, y = np.asarray(x), np.asarray(y)
                scale = max(1.0, float(np.max(np.abs(x), initial=0.0)))
                tol = (2e-4 if x.dtype == np.float32 else 1e-9) * scale
                if np.all((np.abs(x - y) <= tol) | (np.isnan(x) & np.isnan(y))):
                    continue
            if np.asarray(x).tobytes() != np.asarray(y).tobytes():
                diff = np.flatnonzero(np.asarray(x).ravel() != np.asarray(y).ravel())
                at = int(diff[0]) if diff.size else 0
                return (f"capture: {what} of {n} differs from the tape's at flat element {at}: "
                        f"tape {np.asarray(x).ravel()[at]!r}, replay {np.asarray(y).ravel()[at]!r}")
    return None

