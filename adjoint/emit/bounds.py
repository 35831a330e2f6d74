"""Spell the bounds checks of pass bounds (adjoint/transform/bounds.py) for the runtime.

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
"""
import gast

from ..transform.ir import const, if_, name, rt_call, walk_stmts
from .cuda import STATUS
from .printer import WIDTH


def lower(stmt):
    """The ``if <index out of bounds>: rt.fault(...); return`` of check statement ``stmt``."""
    kind = stmt.check.kind
    args = stmt.value.args
    site = args[-1]
    if kind == "index":
        index, size = args[0], args[1]
        test = gast.BoolOp(op=gast.Or(), values=[
            gast.Compare(left=index, ops=[gast.Lt()], comparators=[const(0)]),
            gast.Compare(left=index, ops=[gast.GtE()], comparators=[size])])
        values = [index, const(0), const(0)]
    elif kind == "range":
        test = rt_call("range_outside", *args[:4])
        values = list(args[:3])
    else:
        test = rt_call("index_outside_loop", *args[:5])
        values = [args[0], const(0), const(0)]
    report = gast.Expr(value=rt_call("fault", name(STATUS), site, *values))
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
    return f"{head}{text!r}),"
