"""Spell the bounds checks of pass bounds (adjoint/derive/bounds.py) for the runtime.

Each check statement becomes a test that, when it fails, records the site
and the index in the status array the thread function is given last
(``rt_status``) and returns before the access -- on every target, since an
exception can leave neither numba's parallel loops nor a GPU thread::

    if t6 < 0 or t6 >= x.shape[0]:
        rt.fault(rt_status, 3, t6, 0, 0)
        return

and each kernel with checked sites gets a ``<kernel>_bounds`` record
(``adjoint.runtime.Bounds``) that its launcher uses to check the per-launch
sites and to name a reported fault (adjoint/runtime/bounds.py).

The early return has a price where a grid's loop over threads accumulates into
one element (the springs workload's ``energy[0] += e``): numba keeps that
element in a register only if every thread stores to it, so a check that may
return makes it load and store the element per thread. Going on at index 0
after a failed check and handing the failure back through the thread's return
value keeps the register, but its bookkeeping cost as much on that workload
(both about +15% on its forward, see docs/benchmarks.md) for a longer
generated code and a runtime that must give empty arrays a valid element 0;
so checks return.
"""
import copy

import gast

from ..derive.ir import const, if_, name, number_constant, rt_call, walk_stmts
from .cuda import STATUS
from .printer import WIDTH


def lower(stmt):
    """The ``if <index out of bounds>: rt.fault(...); return`` of check statement ``stmt``."""
    kind = stmt.check.kind

    def arg(k):          # a fresh copy per use: later passes rewrite nodes in place
        return copy.deepcopy(stmt.value.args[k])
    if kind == "index":          # (index, size); a constant index is never negative
        above = gast.Compare(left=arg(0), ops=[gast.GtE()], comparators=[arg(1)])
        c = number_constant(stmt.value.args[0])
        test = above if type(c) is int and c >= 0 else gast.BoolOp(op=gast.Or(), values=[
            gast.Compare(left=arg(0), ops=[gast.Lt()], comparators=[const(0)]), above])
        values = [arg(0), const(0), const(0)]
    elif kind == "range":        # (start, stop, step, size)
        test = rt_call("range_outside", *[arg(k) for k in range(4)])
        values = [arg(k) for k in range(3)]
    else:                        # loop_index: (index, start, stop, step, size)
        test = rt_call("index_outside_loop", *[arg(k) for k in range(5)])
        values = [arg(0), const(0), const(0)]
    report = gast.Expr(value=rt_call("fault", name(STATUS), arg(-1), *values))
    report.lineno = stmt.lineno
    ret = gast.Return(value=None)
    ret.lineno = stmt.lineno
    return if_(test, [report, ret], [], stmt.lineno)


def reports(body):
    """Whether a lowered thread body records faults (so it takes ``rt_status``)."""
    return any(isinstance(n, gast.Name) and n.id == STATUS
               for s in walk_stmts(body) for n in gast.walk(s))


def bounds_name(kernel):
    return f"{kernel}_bounds"


def bounds_lines(tr, relname):
    """The lines defining ``<kernel>_bounds`` (none when the kernel checks nothing)."""
    if not tr.sites:
        return []
    params = ", ".join(repr(p.name) for p in tr.pf.params)
    params = f"({params},)" if len(tr.pf.params) == 1 else f"({params})"
    lines = [f"{bounds_name(tr.pf.name)} = adjoint.runtime.Bounds(",
             f"    kernel={tr.pf.name!r},",
             f"    file={relname!r},",
             f"    params={params},",
             f"    dims={tr.dims},",
             "    sites=("]
    lines += [_site_line(s, tr.pf.source.line(s.line).strip()) for s in tr.sites]
    return lines + ["    ),", ")"]


def _site_line(s, source):
    """One ``Site(...)`` line, the user's line shortened to fit (a longer line would be
    wrapped by the printer, which may only break between arguments)."""
    head = f"        adjoint.runtime.Site({s.array!r}, {s.axis}, {s.line}, {s.kind!r}, {s.value}, "
    room = WIDTH - len(head) - len("),")
    text, n = source, len(source)
    while len(repr(text)) > room:
        n -= 1
        text = source[:n].rstrip() + "..." if n > 0 else ""
    if s.inside:                # (an access inlined from a func: a second line)
        return f"{head}{text!r},\n            inside={s.inside!r}),"
    return f"{head}{text!r}),"
