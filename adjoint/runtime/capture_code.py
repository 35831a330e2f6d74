"""The source of a capture (runtime/capture.py): one function that runs a tape's forward,
one that runs its backward, and how they are compiled.

Each recorded step becomes a few statements: a call of the generated function its
launch ran (``resolve``: the variant ``by_size`` picks for the launch's grid, behind
``checked``'s bounds checks) with the capture's values in the places of its arguments.
The values are held in pools, one per role and type (``Pools``: ``a`` the arrays,
``g`` their gradients, ``s`` the scalars bound at capture...), so that consecutive
steps doing the same thing to successive arrays -- a time loop -- are written (and
compiled) as one loop: ``for k in range(50): step_forward(128, 128, a[k], s[0],
a[k + 1], status[k])``.

On the numba backend both functions are compiled with ``numba.njit`` (not parallel:
each callee keeps its own parallel plan), so that a replay is one call from Python; on
the Python backend they run as they read.
"""
import collections
import linecache
import re
import types

import numpy as np

from .jit import cpu_backend_name

_counter = [0]
ROLL = 3            # this many like steps in a row, or more, are written as a loop
LISTED = 4          # a pool of more arrays than this is a numba.typed.List when compiled
_JITTED = {}        # plain Python dispatcher of a generated module -> its numba.njit
_JIT_HELPERS = {}
# (source, argument types) -> (callees, forward, backward): a capture of the same steps
# over arrays of the same types (a tape recorded again each iteration) is not compiled
# again; its callees are compared by identity (a regenerated kernel is another function)
_BUILT = collections.OrderedDict()
BUILT_MAX = 32


def resolve(fn, dims, values):
    """``(function, bounds, status)``: what the launcher ``fn`` (a ``KernelSpec`` part)
    runs for a launch over ``dims`` of ``values`` -- the ``by_size`` variant for that
    much work, behind ``checked``'s ``bounds`` (None without) and whether it takes a
    status array."""
    bounds, status = None, False
    info = getattr(fn, "checked", None)
    if info is not None:
        fn, bounds, status = info
    sized = getattr(fn, "by_size", None)
    if sized is not None:
        small, grid, below, work = sized
        fn = small if work(list(dims) + list(values)) < below() else grid
    return fn, bounds, status


def _numba_callable(fn):
    """``fn`` as numba compiled code can call it: a dispatcher as it is; a plain Python
    function of a generated module (a grid choosing its plan by the arrays' shapes)
    compiled with ``numba.njit`` once."""
    import numba
    from numba.core.registry import CPUDispatcher
    if isinstance(fn, CPUDispatcher) or not isinstance(fn, types.FunctionType):
        return fn
    jitted = _JITTED.get(fn)
    if jitted is None:
        jitted = _JITTED[fn] = numba.njit(fn)
    return jitted


def zero(buf):
    """Zero a scratch adjoint before a step's backward adds into it."""
    buf.fill(0)


def copy_region(dest, dest_offset, src, src_offset, count):
    """``dest[dest_offset:+count] = src[src_offset:+count]`` over the flattened (C-order)
    arrays; through a copy, so that regions of one array may overlap."""
    d = dest.reshape(-1)
    values = src.reshape(-1)[src_offset:src_offset + count].copy()
    d[dest_offset:dest_offset + count] = values


def copy_region_backward(adj_dest, dest_offset, adj_src, src_offset, count):
    """A copy's backward: take ``adj_dest`` over the region and clear it, then add what was
    taken into ``adj_src`` (after the clear: a copy within one array is exact)."""
    d = adj_dest.reshape(-1)
    taken = d[dest_offset:dest_offset + count].copy()
    d[dest_offset:dest_offset + count] = 0
    s = adj_src.reshape(-1)
    for e in range(count):
        s[src_offset + e] += taken[e]


def copy_region_clear(adj_dest, dest_offset, count):
    """A copy's backward when its source has no gradient: clear ``adj_dest`` there."""
    adj_dest.reshape(-1)[dest_offset:dest_offset + count] = 0


def add_into(total, part):
    """``total += part``: a gradient shared by two parameters of a launch (its second
    parameter's part was summed in scratch memory)."""
    total += part


def snapshot(kept, live):
    """Keep the values a later step overwrites: ``kept[...] = live``."""
    kept[...] = live


def one(buf):
    """Set the seed buffer of a loss's VJP (runtime/eager.py) to 1 before its forward."""
    buf.fill(1)


def finite_seed(grad):
    """Whether the one-element gradient ``grad`` (a loss's) is finite: its backward adds
    ``g * J`` (runtime/eager.py), else replays."""
    return np.isfinite(grad.reshape(-1)[0])


def eager_add(seed, J, grad):
    """``grad += g * J``, ``g`` the one element of ``seed``: the backward of a loss's
    launch whose forward computed ``J`` for a seed of 1 (runtime/eager.py)."""
    g = seed.reshape(-1)[0]
    total, part = grad.reshape(-1), J.reshape(-1)
    for e in range(total.size):
        total[e] += part[e] * g


HELPERS = {"rt_zero": zero, "rt_one": one, "rt_finite_seed": finite_seed,
           "rt_eager_add": eager_add, "rt_copy": copy_region, "rt_copy_backward": copy_region_backward,
           "rt_copy_clear": copy_region_clear, "rt_keep": snapshot, "rt_add": add_into}


def type_key(value):
    """What numba types ``value`` by: values of one key share a pool."""
    if isinstance(value, np.ndarray):
        flags = value.flags
        layout = "C" if flags.c_contiguous else "F" if flags.f_contiguous else "A"
        return (value.dtype.str, value.ndim, layout, bool(flags.writeable))
    return (type(value).__name__,)


def describe(key):
    if len(key) == 1:
        return key[0]
    layout = {"C": "", "F": ", Fortran order", "A": ", strided"}[key[2]]
    return f"{np.dtype(key[0]).name} arrays of {key[1]} dimension(s){layout}" + \
        ("" if key[3] else ", read-only")


class Pools:
    """The captured functions' values: each slot is an entry of one tuple (its pool,
    named by role and type: ``a``, ``a_2``, ...), with how a replay finds its value."""

    ROLES = {"a": "arrays", "n": "numpy arrays", "g": "gradients", "s": "scalars bound at "
             "capture", "kept": "values a later step overwrites, kept",
             "saved": "values the forward saves", "scratch": "zeroed scratch adjoints",
             "eager": "a loss's vector-Jacobian products for a seed of 1"}

    def __init__(self):
        self.pools = {}         # (role, type key) -> pool name
        self.slots = []         # (pool name, index in it, getter, what)
        self.sizes = {}         # pool name -> entries
        self._keys = {}

    def add(self, key, role, value, getter, what=None):
        """The slot of ``key`` (made the first time: ``value`` now, ``getter()`` at replay)."""
        slot = self._keys.get(key)
        if slot is None:
            pkey = (role, type_key(value))
            pool = self.pools.get(pkey)
            if pool is None:
                taken = sum(r == role for r, _ in self.pools)
                pool = self.pools[pkey] = role if not taken else f"{role}_{taken + 1}"
                self.sizes[pool] = 0
            slot = self._keys[key] = len(self.slots)
            self.slots.append((pool, self.sizes[pool], getter, what))
            self.sizes[pool] += 1
        return slot

    def names(self):
        return list(self.sizes)

    def header(self):
        """Comment lines naming each pool."""
        return [f"# {name}: {self.ROLES[role]}, {describe(tkey)} ({self.sizes[name]})"
                for (role, tkey), name in self.pools.items()]

    def tuples(self, values, typed=False):
        """Each pool's values from each slot's value: a tuple, or (``typed``: compiled
        code receives them) a ``numba.typed.List`` for a pool of more than ``LISTED``
        arrays -- compiled code unboxes a list as one object, a tuple element by element
        (the wrapper numba writes for a tuple of 50 arrays took seconds to compile)."""
        out = {name: [None] * n for name, n in self.sizes.items()}
        for (pool, k, _, _), v in zip(self.slots, values):
            out[pool][k] = v
        if typed:
            from numba.typed import List
            return {name: List(vals) if len(vals) > LISTED and isinstance(vals[0], np.ndarray)
                    else tuple(vals) for name, vals in out.items()}
        return {name: tuple(vals) for name, vals in out.items()}


def slot(k):
    return ("slot", k)


def lit(text):
    return ("lit", str(text))


def row(r):
    return ("row", r)


class Source:
    """The statements of a capture's two functions (``steps``: ``(label, [(callee name,
    [argument])])``, an argument ``slot(k)`` or ``lit(text)``), written with each run
    of like steps rolled into a loop, and built into functions."""

    def __init__(self, pools, header):
        self.pools = pools
        self.header = header
        self.callees = {}       # name in the source -> function
        self._names = {}

    def name(self, fn):
        """The name ``fn`` is called by (its own, made unique)."""
        known = self._names.get(id(fn))
        if known is not None:
            return known
        base = name = getattr(fn, "__name__", "kernel_part")
        n = 1
        while name in self.callees or name in HELPERS:
            n += 1
            name = f"{base}_{n}"
        self.callees[name] = fn
        self._names[id(fn)] = name
        return name

    def _place(self, token):
        """``(tuple name, index)`` of a slot argument, or of a row of ``status``."""
        if token[0] == "row":
            return "status", token[1]
        return self.pools.slots[token[1]][:2]

    def _arg(self, token, k=None, step=None):
        """The text of an argument: a literal, a pool entry, or (in a loop) one of them at
        ``first + step * k``."""
        if token[0] == "lit":
            return token[1]
        pool, index = self._place(token)
        if k is None or not step:
            return f"{pool}[{index}]"
        term = k if abs(step) == 1 else f"{abs(step)} * {k}"
        if step > 0:
            return f"{pool}[{term}{f' + {index}' if index else ''}]"
        return f"{pool}[{index} - {term}]"

    def _runs(self, steps):
        """``[(first, count, strides)]``: consecutive steps with the same statements whose
        pool entries advance by a fixed stride (``strides``: one per slot argument)."""
        runs, i = [], 0
        while i < len(steps):
            j, strides = i + 1, None
            while j < len(steps):
                s = self._strides(steps[i][1], steps[j][1], j - i)
                if s is None or (strides is not None and s != strides):
                    break
                strides = s
                j += 1
            if j - i < ROLL:
                runs += [(m, 1, None) for m in range(i, j)]
            else:
                runs.append((i, j - i, strides))
            i = j
        return runs

    def _strides(self, first, other, distance):
        """The stride of each slot argument from ``first``'s statements to ``other``'s
        ``distance`` steps later, or None if they differ otherwise."""
        if len(first) != len(other):
            return None
        strides = []
        if any(len(stmt) != 2 for stmt in first + other):     # (a branch: never rolled)
            return None
        for (fa, aa), (fb, ab) in zip(first, other):
            if fa != fb or len(aa) != len(ab):
                return None
            for ta, tb in zip(aa, ab):
                if ta[0] != tb[0] or ta[0] == "lit" and ta != tb:
                    return None
                if ta[0] != "lit":
                    pa, ia = self._place(ta)
                    pb, ib = self._place(tb)
                    if pa != pb or (ib - ia) % distance:
                        return None
                    strides.append((ib - ia) // distance)
        return tuple(strides)

    def body(self, steps):
        """The lines of one function's body."""
        lines = []
        for first, count, strides in self._runs(steps):
            label, stmts = steps[first]
            if count == 1:
                lines.append(f"# {label}")
                lines += self._lines(stmts)
                continue
            lines.append(f"# {_span(label, steps[first + count - 1][0], count)}")
            lines.append(f"for k in range({count}):")
            stride = iter(strides)
            for fn, args in stmts:
                text = [t[1] if t[0] == "lit" else self._arg(t, "k", next(stride))
                        for t in args]
                lines.append("    " + _call(fn, text, 4))
        return lines

    def _lines(self, stmts, indent=0):
        """The lines of statements: calls ``(fn, args)``, and branches ``("if", (fn, args),
        then, orelse)``."""
        lines = []
        for stmt in stmts:
            if len(stmt) == 2:
                fn, args = stmt
                lines.append(" " * indent + _call(fn, [self._arg(t) for t in args], indent))
                continue
            _, (fn, args), then, orelse = stmt
            lines.append(" " * indent + f"if {_call(fn, [self._arg(t) for t in args])}:")
            lines += self._lines(then, indent + 4) or [" " * (indent + 4) + "pass"]
            if orelse:
                lines.append(" " * indent + "else:")
                lines += self._lines(orelse, indent + 4)
        return lines

    def text(self, forward, backward):
        """The module's source: ``captured_forward`` and ``captured_backward``."""
        params = ", ".join(self.pools.names() + ["status"])
        out = list(self.header) + self.pools.header() + \
            ["# status: a row per bounds-checked call, where its threads report a fault", ""]
        for name, steps in (("captured_forward", forward), ("captured_backward", backward)):
            body = self.body(steps) or ["pass"]
            out += [f"def {name}({params}):"] + ["    " + line for line in body] + ["", ""]
        return "\n".join(out[:-1])

    def build(self, text, args):
        """``(forward, backward, why)``: the two functions of ``text``, compiled with
        ``numba.njit`` for ``args`` on the numba backend (``why``: None, or why they could
        not be, in which case they run as Python calling the compiled kernels)."""
        _counter[0] += 1
        filename = f"<adjoint capture {_counter[0]}>"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        plain = dict(self.callees, **HELPERS)
        exec(compile(text, filename, "exec"), plain)
        if cpu_backend_name() != "numba":
            return plain["captured_forward"], plain["captured_backward"], None
        import numba
        sig = tuple(numba.typeof(a) for a in args)
        callees = [self.callees[name] for name in sorted(self.callees)]
        known = _BUILT.get((text, sig))
        if known is not None and all(a is b for a, b in zip(known[0], callees)):
            _BUILT.move_to_end((text, sig))
            return known[1], known[2], None
        ns = {name: _numba_callable(fn) for name, fn in self.callees.items()}
        ns.update(_jitted_helpers())
        exec(compile(text, filename, "exec"), ns)
        try:
            fwd = numba.njit(ns["captured_forward"])
            bwd = numba.njit(ns["captured_backward"])
            fwd.compile(sig)
            bwd.compile(sig)
        except Exception as exc:    # (numba's errors share no base): Python drives the calls
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return plain["captured_forward"], plain["captured_backward"], \
                f"{type(exc).__name__}: {first}"
        _BUILT[(text, sig)] = (callees, fwd, bwd)
        while len(_BUILT) > BUILT_MAX:
            _BUILT.popitem(last=False)
        return fwd, bwd, None


def _jitted_helpers():
    """``HELPERS`` compiled with ``numba.njit`` (once a process)."""
    if not _JIT_HELPERS:
        import numba
        _JIT_HELPERS.update({name: numba.njit(fn) for name, fn in HELPERS.items()})
    return _JIT_HELPERS


def _call(fn, args, indent=0, width=92):
    """``fn(args)``, its arguments wrapped under it where the line would pass ``width``."""
    line = f"{fn}({', '.join(args)})"
    if len(line) + indent + 4 <= width:
        return line
    lines, cur = [], f"{fn}("
    for n, a in enumerate(args):
        piece = a + (", " if n < len(args) - 1 else ")")
        if len(cur) + len(piece) + indent + 4 > width and cur.strip() and not cur.endswith("("):
            lines.append(cur.rstrip())
            cur = " " * 8
        cur += piece
    lines.append(cur)
    return ("\n" + " " * (indent + 4)).join(lines)


def _span(first, last, count):
    """The label of ``count`` like steps from ``first`` to ``last`` ("launch #0 to #49 of
    kernel 'f' (k.py:3)" where they differ in the step number alone)."""
    a, b = re.search(r"#(\d+)", first), re.search(r"#(\d+)", last)
    if a and b and first[:a.start()] + first[a.end():] == last[:b.start()] + last[b.end():]:
        return first[:a.end()] + f" to #{b.group(1)}" + first[a.end():] + f" ({count} steps)"
    return f"{first} ... {last} ({count} steps)"
