"""Bounds checks at run time: once per launch, and the faults a kernel reports.

A generated module describes every index its kernel checks as a ``Site`` and
gathers them in the kernel's ``Bounds`` (see adjoint/derive/bounds.py for
where each check goes). Here:

- ``Bounds.check_launch`` tests, before the grid runs, the sites fixed per
  launch: an axis indexed by thread index ``d`` needs ``dim_d <= shape[axis]``,
  one indexed by a constant ``c`` needs ``0 <= c < shape[axis]``;
- the kernel's own checks never raise (an exception cannot leave numba's
  parallel loops or a GPU thread): a thread whose index is out of bounds
  writes the site's number and the index (or the loop's range) into a small
  status array and returns before the access. ``checked`` (CPU) reads it after
  the grid ran and raises ``BoundsError`` naming the kernel, the file:line of the
  access, the array, the index and the shape; a CUDA launch does not wait for
  its kernel: the same error is raised where the host next waits for the GPU
  (``Array.numpy()``, the end of ``Tape.backward``, ``ad.synchronize()``: see
  runtime/pending.py).

Status array layout (int64): ``[0]`` a CUDA loop-stack overflow's line,
``[1]`` the number of the first failed site (from 1; 0: none), ``[2:5]`` its
values: the index, or a loop's ``start, stop, step``. When several threads fail
at once, the one reported is any of them.
"""
from dataclasses import dataclass, field

import numpy as np

from ..errors import BoundsError
from . import racecheck

STATUS_SIZE = 5
LAUNCH_KINDS = ("thread", "const")


@dataclass(frozen=True)
class Site:
    """One checked index: axis ``axis`` of array parameter ``array``, at ``line``.

    ``kind``: ``thread`` (per launch, the thread index ``value``), ``const`` (per
    launch, the index ``value``), ``range`` (a loop's variable, before the loop),
    ``index`` (where used) or ``component`` (a component index of a local vector or
    matrix ``array``, where used: ``value`` is the size of that axis). ``source``: the user's line (possibly shortened);
    ``inside``: for an access inlined from a func, which func and line (pass inline)."""
    array: str
    axis: int
    line: int
    kind: str
    value: int = 0
    source: str = ""
    inside: str = ""


@dataclass(frozen=True)
class Bounds:
    """The checked indices of kernel ``kernel`` (defined in ``file``)."""
    kernel: str
    file: str
    params: tuple          # the kernel's parameter names, in order
    dims: int
    sites: tuple
    _launch: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        at = {p: k for k, p in enumerate(self.params)}
        launch = tuple((at[s.array], s.axis, s.kind == "thread", s.value, s)
                       for s in self.sites if s.kind in LAUNCH_KINDS)
        object.__setattr__(self, "_launch", launch)

    def check_launch(self, dims, args):
        """Raise ``BoundsError`` if a launch over ``dims`` with arguments ``args``
        (the kernel's, in order) would index outside an array at a per-launch site."""
        if not self._launch or 0 in dims:
            return
        for pos, axis, is_thread, value, site in self._launch:
            n = args[pos].shape[axis]
            if is_thread:
                if dims[value] > n:
                    raise self.error(site, n, args, f"thread index {n} (dim={tuple(dims)!r}; "
                                     "checked once per launch)")
            elif not 0 <= value < n:
                raise self.error(site, value, args, f"index {value}")

    def fault(self, status, args):
        """Raise the ``BoundsError`` a kernel reported in ``status`` (see the module doc)."""
        raise self.fault_error(status, args)

    def fault_error(self, status, args):
        """The ``BoundsError`` a kernel reported in ``status``, launched with ``args``."""
        site = self.sites[int(status[1]) - 1]
        a, b, c = (int(v) for v in status[2:5])
        if site.kind == "component":
            return self.component_error(site, a)
        if site.kind != "range":
            return self.error(site, a, args, f"index {a}")
        index = first_outside(a, b, c, args[self.params.index(site.array)].shape[site.axis])
        return self.error(site, index, args, f"index {index} (the loop's range({a}, {b}, {c}), "
                          "checked before the loop runs)")

    def component_error(self, site, index):
        """A local vector's or matrix's component index out of range (``site.value``: the
        size of that axis)."""
        return self._fault(site, index, (site.value,),
                           f"index {index} is out of range for axis {site.axis} of the local "
                           f"'{site.array}', of size {site.value}")

    def error(self, site, index, args, what):
        shape = tuple(args[self.params.index(site.array)].shape)
        return self._fault(site, index, shape, f"{what} is out of bounds for axis {site.axis} "
                           f"of array '{site.array}' with shape {shape}")

    def _fault(self, site, index, shape, what):
        """The ``BoundsError`` of ``site`` (an array's or a local's index), ``what`` saying
        which index and what it is outside of."""
        msg = f"kernel '{self.kernel}' ({self.file}:{site.line}): {what}"
        if index < 0:
            msg += " (a negative index does not wrap around in a kernel)"
        if site.inside:
            msg += f", inside {site.inside}"
        if site.source:
            msg += f"\n    {site.source}"
        return BoundsError(msg, kernel=self.kernel, array=site.array, index=index, shape=shape,
                           filename=self.file, lineno=site.line)


def first_outside(start, stop, step, size):
    """The first value of ``range(start, stop, step)`` outside ``[0, size)``
    (the range reaches outside it; ``step`` is not 0)."""
    if not 0 <= start < size:
        return start
    if step > 0:
        return start + -(-(size - start) // step) * step
    return start + -(-(start + 1) // -step) * step


def checked(fn, bounds, status=False):
    """Grid function ``fn`` behind ``bounds``' checks: the per-launch ones before it
    runs and, with ``status`` (its thread functions check indices themselves), the
    status array it is given last, read after it ran."""
    nd = bounds.dims

    def run(*args):
        dims, rest = args[:nd], args[nd:]
        bounds.check_launch(dims, rest)
        if not status:
            fn(*args)
            return
        flags = np.zeros(STATUS_SIZE, np.int64)
        if racecheck.enabled():
            with racecheck.unrecorded(flags):
                fn(*args, flags)
        else:
            fn(*args, flags)
        if flags[1]:
            bounds.fault(flags, rest)
    run.__wrapped__ = fn
    run.checked = (fn, bounds, status)      # (a capture checks once: capture_code)
    return run
