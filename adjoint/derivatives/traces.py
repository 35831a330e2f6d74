"""Evaluation traces with numbers: the primal, tangent and adjoint traces of the
textbook presentation of AD (Baydin et al.'s survey, tables 2 and 3), read off the
generated code of an ``@ad.func`` as it runs on concrete inputs.

``ad.evaluation_trace(f, *args, tangent=None, seed=1.0)`` (``ad.trace`` is the
matrix trace, as in Warp) loads the *unoptimized* module of
``f`` (the rule-by-rule SSA code ``adjoint show`` prints by default) on the plain
Python backend and runs its forward, its JVP along ``tangent`` (default: the first
float parameter's direction) and its backward seeded with ``adj_ret = seed``. For a
kernel, ``ad.evaluation_trace(kernel, dim, inputs=, outputs=, thread=i)`` launches it
(on copies of the arrays) and records thread ``i``'s generated ``_thread`` functions.

Mechanism (adjoint/derivatives/trace_record.py): ``sys.settrace`` follows only the frames of those
three generated functions and reads the values each line assigns from their locals,
naming the user's line from the generated ``# FILE:LINE:`` comments. Nothing is added
to the generated code: the trace reads the code that runs under ``ADJOINT_OPTIMIZE=0
ADJOINT_JIT=0``.

Rows: phase ``primal`` (the forward), ``tangent`` (the JVP's ``dot_`` names),
``adjoint`` (the backward's ``adj_`` names) and ``replay`` (what the backward
recomputes or stores to run in reverse; left out of the tables unless asked for). A
loop's first ``max_iterations`` iterations and its last are shown; the rows between
are one elision row.
"""
import html as html_lib
import inspect
from dataclasses import dataclass, field, replace

import numpy as np

from ..build import passes
from ..api import Func, Kernel
from ..errors import AdjointError
from ..build.modules import load_func
from ..runtime import Array, array, backend_scope, launch, ones_like, zeros_like
from .trace_record import Row, record

PHASES = ("primal", "tangent", "adjoint", "replay")
SHOWN = ("primal", "tangent", "adjoint")


@dataclass(frozen=True)
class Elided:
    """Rows of loop iterations left out of a table."""
    phase: str
    count: int              # rows left out
    file: str
    line: int               # the user's line of the loop
    first: int              # first and last iteration left out (0-based; shown 1-based)
    last: int
    loop: tuple = ()        # the loop's place: the rows' ``loops`` up to it, iteration None


@dataclass
class Trace:
    """The rows of one evaluation, in the order they ran; ``str()`` is a terminal
    table, ``markdown()`` and ``html()`` the same for documents."""
    name: str
    title: str              # the first line of the terminal table
    all_rows: list = field(default_factory=list)    # every row, nothing elided
    max_iterations: int = 3

    @property
    def rows(self):
        """Rows and ``Elided`` rows, as the tables show them."""
        return self.shown(SHOWN)

    def shown(self, phases):
        """The rows of ``phases``, loops elided past ``max_iterations``."""
        return elide([r for r in self.all_rows if r.phase in phases], self.max_iterations)

    def value(self, phase, variable):
        """The last value ``variable`` took in ``phase`` (KeyError if never assigned)."""
        for r in reversed(self.all_rows):
            if r.phase == phase and r.variable == variable:
                return r.value
        raise KeyError(f"{variable!r} is not assigned in the {phase} trace of {self.name}")

    def table(self, phases=SHOWN, digits=6):
        """[(phase, where, source, variable, value, statement)] as text, for ``phases``."""
        out = []
        for r in self.shown(phases):
            if isinstance(r, Elided):
                out.append((r.phase, _where(r), "", "…",
                            f"{r.count} rows",
                            f"… iterations {r.first + 1} to {r.last + 1} elided …"))
            else:
                out.append((r.phase, _where(r), r.source, r.variable,
                            show_value(r.value, digits), r.statement))
        return out

    def __str__(self):
        return self.text()

    def text(self, phases=SHOWN, digits=6):
        """A terminal table; a heading line wherever the user's line changes."""
        rows = self.table(phases, digits)
        head = ("phase", "variable", "value", "generated line")
        cells = [(p, v, val, st) for p, _, _, v, val, st in rows]
        width = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(head[:3])]
        lines = [self.title, "  ".join(h.ljust(w) for h, w in zip(head, width + [0])).rstrip()]
        last = None
        for (p, where, src, *_), c in zip(rows, cells):
            if (p, where, src) != last and src:
                lines.append(f"── {where}: {src}" if where else f"── {src}")
            last = (p, where, src)
            lines.append("  ".join(x.ljust(w) for x, w in zip(c, width + [0])).rstrip())
        return "\n".join(lines) + "\n"

    def markdown(self, phases=SHOWN, digits=6):
        """A Markdown table."""
        def cell(s):
            return s.replace("|", "\\|")
        lines = ["| phase | user line | variable | value | generated line |",
                 "| --- | --- | --- | --- | --- |"]
        for p, where, src, v, val, st in self.table(phases, digits):
            user = f"`{where}: {src}`" if where and src else f"`{src}`" if src else where
            lines.append(f"| {p} | {cell(user)} | `{cell(v)}` | {cell(val)} | `{cell(st)}` |")
        return "\n".join(lines) + "\n"

    def html(self, phases=SHOWN, digits=6):
        """An HTML table (class ``adjoint-trace``)."""
        e = html_lib.escape
        out = ['<table class="adjoint-trace">',
               "<tr><th>phase</th><th>user line</th><th>variable</th><th>value</th>"
               "<th>generated line</th></tr>"]
        for p, where, src, v, val, st in self.table(phases, digits):
            user = f"{where}: {src}" if where and src else where or src
            out.append(f'<tr class="{p}"><td>{p}</td><td><code>{e(user)}</code></td>'
                       f"<td><code>{e(v)}</code></td><td>{e(val)}</td>"
                       f"<td><code>{e(st)}</code></td></tr>")
        return "\n".join(out + ["</table>"]) + "\n"



def _where(r):
    return f"{r.file}:{r.line}" if r.line else ""


def show_value(v, digits):
    """A value as a table shows it: floats to ``digits`` significant digits, -0 as 0."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v + 0.0:.{digits}g}"
    if isinstance(v, tuple):
        return "(" + ", ".join(show_value(x, digits) for x in v) + ")"
    if hasattr(v, "tolist") and hasattr(v, "shape"):        # a loop's stack
        items = v.tolist() if v.ndim == 1 else [v.tolist()]
        shown = [show_value(x, digits) for x in items[:4]]
        return "[" + ", ".join(shown + (["…"] if len(items) > 4 else [])) + "]"
    try:
        return show_value(float(v), digits)                 # numpy scalars
    except (TypeError, ValueError):
        return repr(v)


def _calls(fn, args, phase_of):
    """``fn(*args)`` recorded: (result, rows)."""
    out = []
    rows = record(lambda: out.append(fn(*args)), lambda frame: frame.f_code is fn.__code__,
                phase_of)
    return out[0], rows


def elide(rows, max_iterations):
    """``rows`` with the iterations of each loop past the first ``max_iterations`` (and
    before its last) replaced by ``Elided`` rows."""
    last = {}
    for r in rows:
        for j, (header, k) in enumerate(r.loops):
            key = (r.phase, r.loops[:j], header)
            last[key] = max(last.get(key, 0), k)

    def hidden(r):
        for j, (header, k) in enumerate(r.loops):
            if max_iterations <= k < last[(r.phase, r.loops[:j], header)]:
                return j, k
        return None

    out = []
    for r in rows:
        h = hidden(r)
        if h is None:
            out.append(r)
            continue
        gap = out[-1] if out and isinstance(out[-1], Elided) else None
        if gap is not None and gap.phase == r.phase and gap.loop == r.loops[:h[0] + 1][:-1] \
                + ((r.loops[h[0]][0], None),):
            out[-1] = replace(gap, count=gap.count + 1, first=min(gap.first, h[1]),
                              last=max(gap.last, h[1]))
        else:
            out.append(Elided(r.phase, 1, r.file, r.line, h[1], h[1],
                              r.loops[:h[0]] + ((r.loops[h[0]][0], None),)))
    return out


def _values(f, args, what):
    """``args`` as the generated code takes them: a number per (scalarized) parameter."""
    params = f.transformed.pf.params
    names = ", ".join(p.name for p in params)
    if len(args) != len(params):
        raise TypeError(f"{what} of func '{f.name}' takes {len(params)} arguments "
                        f"({names}: a vector parameter is given as its components), "
                        f"got {len(args)}")
    try:
        return [float(a) if p.kind == "float" else int(a) for p, a in zip(params, args)]
    except (TypeError, ValueError):
        raise TypeError(f"{what} of func '{f.name}' takes numbers ({names}), got "
                        f"{', '.join(type(a).__name__ for a in args)}") from None


def evaluation_trace(f, *args, tangent=None, seed=None, max_iterations=3, **options):
    """The evaluation trace of ``f(*args)``: primal rows from its forward, tangent rows
    from its JVP along ``tangent`` (one number per parameter; default: 1 for the first
    float parameter, 0 for the rest), adjoint rows from its backward seeded with ``seed``
    (one number, or one per returned value)."""
    if isinstance(f, Kernel):
        return kernel_trace(f, *args, tangent=tangent, seed=seed,
                            max_iterations=max_iterations, **options)
    if options:
        raise TypeError(f"ad.evaluation_trace of func '{f.name}': unexpected keyword(s) "
                        f"{', '.join(options)} (inputs=, outputs=, thread= are for kernels)")
    if not isinstance(f, Func):
        raise TypeError("ad.evaluation_trace expects an @ad.func or @ad.kernel, got "
                        f"{type(f).__name__}")
    f.refresh()
    values = _values(f, args, "ad.evaluation_trace")
    params = f.transformed.pf.params
    floats = [p for p in params if p.kind == "float"]
    if tangent is None:
        tangent = tuple(1.0 if floats and p is floats[0] else 0.0 for p in params)
    tangent = tuple(float(t) for t in tangent)
    if len(tangent) != len(params):
        raise TypeError(f"ad.evaluation_trace of func '{f.name}': give one tangent per parameter "
                        f"({len(params)}), got {len(tangent)}")
    n_ret = len(f.return_kinds)
    seed = 1.0 if seed is None else seed
    seeds = tuple(seed) if isinstance(seed, (tuple, list)) else (seed,) * n_ret
    with backend_scope("python"), passes.optimizing(False):
        spec = getattr(load_func(f, "python"), f.name)
        if spec.jvp is None:
            raise AdjointError(f"func '{f.name}' has no JVP to trace: it has a custom "
                               "gradient (@ad.func_grad), or calls a func that has one")
        where = _def_line(f)
        head = [Row("primal", p.name, v, *where, "(argument)", f"{p.name} = {v!r}")
                for p, v in zip(params, values)]
        head += [Row("tangent", f"dot_{p.name}", t, *where, "(tangent direction)",
                     f"dot_{p.name} = {t!r}") for p, t in zip(params, tangent)
                 if p.kind == "float"]
        _, primal = _calls(spec.forward, values, lambda name, info: "primal")
        dots = [t for p, t in zip(params, tangent) if p.kind == "float"]
        _, tangent_rows = _calls(spec.jvp, values + dots, _tangent_phase(n_ret))
        names = ["adj_ret"] if n_ret == 1 else [f"adj_ret{k}" for k in range(n_ret)]
        head_adj = [Row("adjoint", n, float(s), *where, "(seed)", f"{n} = {float(s)!r}")
                    for n, s in zip(names, seeds)]
        _, adjoint = _calls(spec.adjoint, values + [float(s) for s in seeds], _adjoint_phase)
    primal = [_returned(r, lambda v: v) for r in primal]
    tangent_rows = [_returned(r, lambda v: v[n_ret] if n_ret == 1 else tuple(v[n_ret:]))
                    for r in tangent_rows]
    rows = head + primal + tangent_rows + head_adj + adjoint
    title = (f"# trace of {f.name}({', '.join(show_value(a, 6) for a in values)}): tangent "
             f"({', '.join(show_value(t, 6) for t in tangent)}), seed "
             + ", ".join(f"{n} = {show_value(float(s), 6)}" for n, s in zip(names, seeds)))
    return Trace(f.name, title, rows, max_iterations)


def _def_line(f):
    """(file, line) of ``f``'s ``def``, as the generated comments name them."""
    lines, start = inspect.getsourcelines(f.pyfunc)
    k = next((i for i, t in enumerate(lines) if t.lstrip().startswith(("def ", "async def "))), 0)
    return f.transformed.pf.source.display_name(), start + k


def _returned(row, pick):
    """A return row with the value ``pick`` takes from what the function returned."""
    return replace(row, value=pick(row.value)) if row.variable == "return" else row


def _tangent_phase(n_ret):
    def phase(name, info):
        if name.startswith("dot_") or info.loop:
            return "tangent"
        return "tangent" if name == "return" else None
    return phase


def _adjoint_phase(name, info):
    if name.startswith("adj_") or name == "return":
        return "adjoint"
    return "adjoint" if info.loop and name.startswith("loop") else "replay"


def kernel_trace(kernel, dim, inputs=(), outputs=(), thread=0, tangent=None, seed=None,
                 max_iterations=3):
    """The trace of one thread of a launch of ``kernel`` (``ad.evaluation_trace(kernel,
    dim, inputs=, outputs=, thread=)``): the launch runs on copies of the arrays (the
    forward, then the JVP along ``tangent`` -- ``{input array: tangent array}``, as
    ``ad.launch``'s ``tangents``; default ones for the first float array input -- then
    the backward after the forward, seeded with ``seed`` -- ``{output array: adjoint
    array}``; default ones for each float array output), and only thread ``thread`` (an
    int, or a tuple for a 2-D/3-D launch) is recorded."""
    args = list(inputs) + list(outputs)

    def place(a):
        """The position of argument ``a`` (an array: by identity; a name: as given)."""
        return next((k for k, b in enumerate(args) if b is a), None)

    def is_float(a):
        return isinstance(a, Array) and np.issubdtype(a.numpy().dtype, np.floating)

    def fresh():
        return [_copy(a) if isinstance(a, Array) else a for a in args]

    if tangent is None:
        first = next((a for a in inputs if is_float(a)), None)
        tangent = {} if first is None else {first: ones_like(first)}
    if seed is None:
        seed = {a: ones_like(a) for a in outputs if is_float(a)}
    at = tuple(thread) if isinstance(thread, (tuple, list)) else (thread,)

    def accept(part):
        def take(frame):
            if frame.f_code.co_name != f"{kernel.name}_{part}_thread":
                return False
            return tuple(frame.f_locals.get(f"tid{k}") for k in range(len(at))) == at
        return take

    n_in = len(inputs)
    with backend_scope("python"), passes.optimizing(False):
        values = fresh()
        primal = record(lambda: launch(kernel, dim, values[:n_in], values[n_in:],
                                     record_tape=False), accept("forward"),
                      lambda name, info: "primal")
        jv = fresh()
        dots = {a if place(a) is None else jv[place(a)]: _copy(t) for a, t in tangent.items()}
        tangent_rows = record(lambda: launch(kernel, dim, jv[:n_in], jv[n_in:], tangents=dots,
                                           record_tape=False), accept("jvp"),
                            _tangent_phase(1))
        adj = [zeros_like(a) if is_float(a) else None for a in values]
        for a, g in seed.items():
            adj[place(a)] = _copy(g)
        adjoint = record(lambda: launch(kernel, dim, values[:n_in], values[n_in:], adjoint=True,
                                      adj_inputs=adj[:n_in], adj_outputs=adj[n_in:],
                                      record_tape=False), accept("backward"), _adjoint_phase)
    where = ", ".join(map(str, at))
    title = f"# trace of {kernel.name}, thread {where} of a launch over {dim}"
    return Trace(kernel.name, title, primal + tangent_rows + adjoint, max_iterations)


def _copy(a):
    """A copy of array ``a`` (same dtype), outside any tape."""
    return array(a.numpy().copy(), dtype=a.dtype)
