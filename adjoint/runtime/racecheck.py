"""Race checking: a test mode of the plain-Python backend for the parallel CPU plans.

With ``ADJOINT_RACECHECK=1`` in the environment (read at import) or inside
``with racecheck():`` (a context-local switch: that thread or task only), every
grid function the Python backend runs (``@rt.jit_grid``: the parallel, privatize
and color plans) takes its parallel path whatever the launch size, and records,
for each element of memory, which concurrently running *unit* touched it and how:

- a unit is one iteration of the grid's ``rt.prange`` loop: a thread row (plan
  parallel), a chunk of rows (privatize: up to MAX_CHUNKS chunks), or a block of rows
  within one phase (color); each ``prange`` loop is one *region* (a color plan's two
  phases are two regions, run one after the other);
- elements are identified by memory address, so one buffer passed for two
  parameters, and overlapping views, are the same element;
- a ``RaceError`` is raised at the first element that two different units
  touch, at least one of them writing (a store, or an accumulation ``+=``);
- and at the first element one unit reaches through two different array
  parameters, at least one access writing: numba compiles each ``prange`` body
  assuming its array parameters do not overlap (LLVM ``noalias``).

Guarantees: the generated code is unchanged and computes what it computes
without checking (per-chunk private copies are distinct memory and not recorded;
``add_chunks`` and the serial plans run outside any ``prange``). Expects: grid
functions whose parameters are fewer than 256, array ones numpy arrays, indexed
with integers (a slice store records each element). Checking is sequential and
single-threaded; a unit's accesses are seen only on the paths that launch's data
takes. See docs/backends.md, "Checking a plan for races".
"""
import contextlib
import contextvars
import functools
import linecache
import os
import re
import sys
import threading

import numpy as np

from ..errors import AdjointError
from .helpers import chunk_start

__all__ = ["RaceError", "racecheck", "enabled", "grid", "prange", "chunk_count",
           "note_blocks"]

MAX_CHUNKS = 64     # chunks of a privatize plan under checking (more units: finer checking)
READ, WRITE = 1, 2

# on or off in this context: ``racecheck()``'s, else ADJOINT_RACECHECK's
_on = contextvars.ContextVar("adjoint_racecheck", default=os.environ.get(
    "ADJOINT_RACECHECK", "0").strip().lower() in ("1", "true", "yes", "on"))


class _State(threading.local):
    """Per Python thread (launches made by different threads at once are checked
    apart): ``grid``, the _Grid being checked while one runs; ``region``, the _Region
    being recorded, inside a prange loop of that grid."""
    grid = None
    region = None


_state = _State()


class RaceError(AdjointError):
    """Two concurrently running units of a parallel plan touched one element, at
    least one of them writing (or one unit reached it through two parameters)."""


def enabled():
    return _on.get()


@contextlib.contextmanager
def racecheck(on=True):
    """Check the parallel plans of every Python-backend launch in this block, made in
    this thread or task (a context-local switch, as the backend is: runtime/jit.py)."""
    token = _on.set(bool(on))
    try:
        yield
    finally:
        _on.reset(token)


class _Recorded(np.ndarray):
    """A view of a grid function's array argument that reports element accesses."""

    def __array_finalize__(self, obj):
        # views of a recorded array (a slice inside a thread) keep its parameter
        self._rc_param = getattr(obj, "_rc_param", None)
        self._rc_address = _addresser(self.__array_interface__["data"][0], self.strides,
                                      self.shape)

    def __getitem__(self, idx):
        value = _getitem(self, idx)
        region = _state.region
        if region is not None and not isinstance(value, np.ndarray):
            _touch(region, self, idx, READ)
        return value

    def __setitem__(self, idx, value):
        region = _state.region
        if region is not None:
            target = _getitem(self, idx)
            if isinstance(target, np.ndarray):          # a slice: every element in it
                for sub in np.ndindex(target.shape):
                    _touch(region, target, sub, WRITE)
            else:
                _touch(region, self, idx, WRITE)
        _setitem(self, idx, value)


_getitem, _setitem = np.ndarray.__getitem__, np.ndarray.__setitem__


def _addresser(base, strides, shape):
    """``address(idx)``: the address of element ``idx`` (integers, negative ones counted
    from the end; numba wraps them too) of an array at ``base``. Unrolled for 1-3
    dimensions: it runs at every element access under checking."""
    if len(shape) == 1:
        (s0,), (n0,) = strides, shape

        def address(i):
            if type(i) is tuple:
                (i,) = i
            return base + int(i) % n0 * s0
    elif len(shape) == 2:
        (s0, s1), (n0, n1) = strides, shape

        def address(idx):
            i, j = idx
            return base + int(i) % n0 * s0 + int(j) % n1 * s1
    elif len(shape) == 3:
        (s0, s1, s2), (n0, n1, n2) = strides, shape

        def address(idx):
            i, j, k = idx
            return base + int(i) % n0 * s0 + int(j) % n1 * s1 + int(k) % n2 * s2
    else:
        def address(idx):
            idx = idx if type(idx) is tuple else (idx,)
            return base + sum(int(i) % n * s for i, s, n in zip(idx, strides, shape))
    return address


def _unravel(arr, addr):
    """``[i, j]``: the index of the element at ``addr`` in ``arr``."""
    off = addr - arr.__array_interface__["data"][0]
    idx = [0] * arr.ndim
    for k in sorted(range(arr.ndim), key=lambda k: -abs(arr.strides[k])):
        if arr.strides[k]:
            idx[k], off = divmod(off, arr.strides[k])
    return f"[{', '.join(map(str, idx))}]"


class _Grid:
    """One call of a grid function under checking: its kernel, plan and unit layout."""

    def __init__(self, fn, plan, rows, params, views):
        kernel, stage = "", ""
        for part in ("forward_save", "backward_saved", "forward", "backward", "jvp"):
            if fn.__name__.endswith("_" + part):
                kernel, stage = fn.__name__[:-len(part) - 1], part.replace("_", " ")
                break
        if kernel:
            origin = getattr(fn.__globals__.get(kernel), "origin", None)
            self.where = f"kernel '{kernel}'" + (f" ({origin})" if origin else "") + \
                f", {stage} pass"
        else:
            self.where = f"grid function '{fn.__name__}'"
        self.plan, self.rows = plan, rows
        self.params, self.views = params, views     # names, and the recorded arguments
        self.regions = 0
        self.n_chunks = self.n_blocks = self.radius = None

    def unit(self, region, u):
        """Words for unit ``u`` of ``region``: which threads it runs."""
        if self.plan == "color" and self.n_blocks is not None:
            b = 2 * u + region
            return f"block {b} ({self._rows(self.n_blocks, b)})"
        if self.plan == "privatize" and self.n_chunks is not None:
            return f"chunk {u} ({self._rows(self.n_chunks, u)})"
        return f"row {u}" if self.plan == "parallel" else f"prange iteration {u}"

    def _rows(self, parts, k):
        lo, hi = chunk_start(self.rows, parts, k), chunk_start(self.rows, parts, k + 1) - 1
        return f"row {lo}" if lo == hi else f"rows {lo}..{hi}"

    def describe(self, region):
        if self.plan == "color" and self.n_blocks is not None:
            return (f"plan 'color' (radius {self.radius}, {self.n_blocks} blocks of rows; "
                    f"phase {region}: {'even' if region == 0 else 'odd'} blocks run at once)")
        if self.plan == "privatize" and self.n_chunks is not None:
            return f"plan 'privatize' ({self.n_chunks} chunks run at once)"
        return f"plan '{self.plan}'"


def _kinds(k):
    return {READ: "read", WRITE: "written", READ | WRITE: "read and written (+=)"}[k]


SHARED = 4  # a second accessor has read the element: its access is in _Region.readers


class _Region:
    """The accesses of one prange loop. An *accessor* is a unit together with the
    parameter it goes through: ``unit << 8 | parameter number``. ``seen`` maps an
    address to ``accessor << 3 | kinds`` of its first accessor (plus SHARED once a
    second one read it); plain ints, as this runs at every element access."""

    def __init__(self, grid, number):
        self.grid, self.number = grid, number
        self.token = 0          # the running unit << 8
        self.seen = {}
        self.readers = {}       # address -> second reader << 3 | READ

    def fail(self, arr, idx, access, other):
        """Raise the RaceError of ``access`` (by the running unit, through ``arr[idx]``)
        meeting ``other`` (an earlier access, packed as in ``seen``) at one element."""
        g = self.grid
        unit, unit2 = access >> 11, other >> 11
        kind, kind2 = access & 3, other & 3
        addr = arr._rc_address(idx)
        name, name2 = g.params[arr._rc_param], g.params[(other >> 3) & 255]
        elem = f"'{name}'{_unravel(g.views[arr._rc_param], addr)}"
        if name2 != name:
            elem += f" (also '{name2}'{_unravel(g.views[(other >> 3) & 255], addr)}: " \
                "the same memory)"
        head = f"race in {g.where}, {g.describe(self.number)}: element {elem} is "
        if unit2 == unit:
            msg = (head + f"{_kinds(kind)} through '{name}' and {_kinds(kind2)} through "
                   f"'{name2}' by {g.unit(self.number, unit)}; numba compiles a parallel "
                   "loop assuming its array parameters do not overlap, so these accesses may "
                   "be reordered")
        else:
            msg = (head + f"{_kinds(kind)} by {g.unit(self.number, unit)} and "
                   f"{_kinds(kind2)} by {g.unit(self.number, unit2)}, which run at the same time")
        raise RaceError(msg + _source_line())


def _touch(region, arr, idx, kind):
    """Record that the running unit reads or writes ``arr[idx]``; raise on a race."""
    addr = arr._rc_address(idx)
    access = (region.token | arr._rc_param) << 3 | kind
    seen = region.seen
    first = seen.get(addr)
    if first is None:
        seen[addr] = access
    elif first >> 3 == access >> 3:                 # the same unit, the same parameter
        if kind & ~first:
            if first & SHARED:                      # a write after another unit's read
                region.fail(arr, idx, access, region.readers[addr])
            seen[addr] = first | kind
    elif kind == WRITE or first & WRITE:
        region.fail(arr, idx, access, first)
    elif not first & SHARED:                        # two readers: fine, remember one
        seen[addr] = first | SHARED
        region.readers[addr] = access


def _source_line():
    """' (at user.py:N, generated gen.py:M)' for the access being recorded: the kernel
    line named by the comment above the generated line that made it."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    if f is None:
        return ""
    path, lineno = f.f_code.co_filename, f.f_lineno
    here = f"{os.path.basename(path)}:{lineno}"
    lines = linecache.getlines(path)
    for text in reversed(lines[:lineno]):
        m = re.match(r"\s*# (\S+:\d+): ", text)
        if m:
            return f" (at {m.group(1)}, generated {here})"
    return f" (at {here})"


def _plan_of(fn):
    """A grid function's plan, from the runtime helpers it calls (see emit/module.py)."""
    names = set(fn.__code__.co_names)
    if "block_count" in names:
        return "color"
    if "private_copies" in names or "chunk_sums" in names:
        return "privatize"
    return "parallel"


_unrecorded = set()     # ids of buffers any thread may write (see ``unrecorded``)


@contextlib.contextmanager
def unrecorded(buf):
    """Leave ``buf`` out of the record while it is in use: a fault report that every
    failing thread may write (the first write wins by design), not a race."""
    _unrecorded.add(id(buf))
    try:
        yield buf
    finally:
        _unrecorded.discard(id(buf))


def grid(fn):
    """``fn`` (a grid function) checked when race checking is on, else run as it is."""
    code = fn.__code__
    params = code.co_varnames[:code.co_argcount]
    plan = _plan_of(fn)

    @functools.wraps(fn)
    def checked(*args):
        if not _on.get() or _state.grid is not None:
            return fn(*args)
        views = []
        for k, a in enumerate(args):
            if isinstance(a, np.ndarray) and id(a) not in _unrecorded:
                a = a.view(_Recorded)
                a._rc_param = k
            views.append(a)
        _state.grid = _Grid(fn, plan, args[0], params, views)
        try:
            return fn(*views)
        finally:
            _state.grid = _state.region = None
    return checked


def prange(n):
    """``range(n)``; while a grid is checked, each iteration is one concurrent unit."""
    g = _state.grid
    if g is None or _state.region is not None:
        return range(n)
    return _units(g, n)


def _units(g, n):
    region = _Region(g, g.regions)
    g.regions += 1
    _state.region = region
    for u in range(n):
        region.token = u << 8
        yield u
    _state.region = None


def chunk_count(n):
    """Chunks of a privatize plan: one without checking (the Python backend is serial),
    up to MAX_CHUNKS while a grid is checked."""
    g = _state.grid
    if g is None:
        return 1
    g.n_chunks = max(1, min(MAX_CHUNKS, n))
    return g.n_chunks


def note_blocks(n_blocks, radius):
    """Remember a color plan's blocks for the messages."""
    g = _state.grid
    if g is not None:
        g.n_blocks, g.radius = n_blocks, radius
    return n_blocks
