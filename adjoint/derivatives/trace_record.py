"""How an evaluation trace is recorded (adjoint/derivatives/traces.py): ``record(call, accept,
phase_of)`` runs ``call()`` under a ``sys.settrace`` tracer that follows only the first
frame ``accept`` takes (a generated ``_forward``, ``_jvp``, ``_adjoint`` or thread
function; a call into another func runs untraced, as one row) and returns a ``Row`` per
value each executed line assigns.

Python reports a ``line`` event before each line runs; when the next one (or the frame's
``return``) arrives, the statement before it is complete, and the values of the names it
assigns are read from the frame's locals. Which names a line assigns, its text and the
loops around it come from parsing the generated module with ``ast`` (``line_table``); the
user's line is the nearest ``# FILE:LINE: text`` comment above it, which the emitter
writes before each block. Nothing is added to the generated code.
"""
import ast
import re
import sys
from dataclasses import dataclass

_USER_LINE = re.compile(r"^\s*# (\S+?):(\d+): (.*)$")


@dataclass(frozen=True)
class Row:
    """One value assigned by one executed line of generated code."""
    phase: str              # primal, tangent, adjoint or replay
    variable: str           # the name assigned ('return' for a return statement)
    value: object           # its value just after the line ran
    file: str               # the user's file (as the generated comment names it)
    line: int               # the user's line the generated line comes from
    source: str             # that user line's text
    statement: str          # the generated line
    loops: tuple = ()       # ((generated loop header line, iteration), ...), outer first


@dataclass(frozen=True)
class _Line:
    """What the tracer knows of one line of a generated function."""
    targets: tuple          # names the statement assigns ('return' for a return)
    loop: bool              # a for/while header
    loops: tuple            # generated lines of the loop headers around it, outer first
    file: str
    line: int
    source: str
    statement: str


def _targets(node):
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(n for e in node.elts for n in _targets(e))
    if isinstance(node, (ast.Subscript, ast.Attribute)):
        return (ast.unparse(node),)         # an element: its value is read back
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return ()


def line_table(code):
    """{line number: _Line} for the generated function of ``code``, from its file."""
    with open(code.co_filename, encoding="utf-8") as fh:
        text = fh.read()
    lines = text.splitlines()
    tree = ast.parse(text)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
              and n.name == code.co_name and n.lineno >= code.co_firstlineno)
    table = {}

    def user_line(lineno):
        """The comment nearest above: the user's line, or what the block does."""
        for k in range(lineno - 2, fn.lineno - 1, -1):
            m = _USER_LINE.match(lines[k])
            if m:
                return m.group(1), int(m.group(2)), m.group(3).strip()
            if lines[k].lstrip().startswith("#"):
                return "", 0, lines[k].strip().lstrip("#").strip()
        return "", 0, ""

    def visit(body, loops):
        for st in body:
            is_loop = isinstance(st, (ast.For, ast.While))
            if isinstance(st, (ast.Assign,)):
                targets = tuple(n for t in st.targets for n in _targets(t))
            elif isinstance(st, (ast.AugAssign, ast.AnnAssign, ast.For)):
                targets = _targets(st.target)
            elif isinstance(st, ast.Return):
                targets = ("return",)
            else:
                targets = ()
            inner = loops + ((st.lineno,),) if is_loop else loops
            nested = [getattr(st, k) for k in ("body", "orelse") if getattr(st, k, None)]
            end = nested[0][0].lineno - 1 if nested else st.end_lineno
            here = tuple(x[0] for x in inner)
            text = lines[st.lineno - 1:end] if not nested else lines[st.lineno - 1:st.lineno]
            info = _Line(targets, is_loop, here, *user_line(st.lineno),
                         " ".join(s.strip() for s in text))
            for k in range(st.lineno, end + 1):
                table[k] = info
            for b in nested:
                visit(b, inner)
    visit(fn.body, ())
    return table


class _Recorder:
    """The ``sys.settrace`` tracer of one call of one generated function."""

    def __init__(self, accept, phase_of):
        self.accept, self.phase_of = accept, phase_of
        self.rows, self.pending, self.counters, self.table = [], None, {}, None

    def global_trace(self, frame, event, arg):
        if event == "call" and self.table is None and self.accept(frame):
            self.table = line_table(frame.f_code)
            return self.local_trace
        return None

    def local_trace(self, frame, event, arg):
        if event == "line":
            info = self.table.get(frame.f_lineno)
            if info is None:
                return self.local_trace
            if self.pending is not None and info is self.pending[0]:
                return self.local_trace         # another line of the same statement
            if info.loop:
                header = info.loops[-1]
                before = self.pending[0] if self.pending else None
                inside = before is not None and header in before.loops and before is not info
                self.counters[header] = self.counters[header] + 1 if inside else 0
            self.finish(frame, info)
            self.pending = (info, tuple((h, self.counters.get(h, 0)) for h in info.loops))
        elif event == "return":
            self.finish(frame, None, arg)
            self.pending = None
        return self.local_trace

    def finish(self, frame, following, returned=None):
        """Record the pending statement, now complete (``following``: the next one)."""
        if self.pending is None:
            return
        info, loops = self.pending
        if info.loop and (following is None or info.loops[-1] not in following.loops):
            return                              # the loop's last test: it ran out
        for name in info.targets:
            if name == "return":
                value = returned
            elif name in frame.f_locals:
                value = frame.f_locals[name]
            elif name.isidentifier():
                continue
            else:
                value = eval(name, frame.f_globals, frame.f_locals)   # an element: x[i]
            phase = self.phase_of(name, info)
            if phase is not None:
                self.rows.append(Row(phase, name, value, info.file, info.line, info.source,
                                     info.statement, loops))


def record(call, accept, phase_of):
    """``call()`` with the lines of the first frame ``accept`` takes recorded: rows."""
    rec = _Recorder(accept, phase_of)
    old = sys.gettrace()
    sys.settrace(rec.global_trace)
    try:
        call()
    finally:
        sys.settrace(old)
    return rec.rows
