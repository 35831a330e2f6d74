"""Print gast statements as readable Python source with line comments.

Each time the user line of the statements changes, a comment quotes it:
``# line 12: y = x * x``. Loops that still carry a ``LoopInfo`` (the
normalize and ssa stages) show their latch under a ``# latch`` comment.
"""
import ast
import math
import os
import textwrap

import gast

from ..derive.ir import (AtomicBits, AtomicFetch, AtomicMinMax, AtomicResult, CheckStmt, Comment,
                            ComponentCheck, Print, atomic_update)

INDENT = "    "
WIDTH = 99


def wrap(line, width=WIDTH):
    """Split a generated line longer than ``width`` at ', ' inside its first
    parenthesis (a comment is re-filled instead). Function bodies have no string
    literals, so breaking inside parentheses is valid Python; a line with a string
    (a refusal's message in a spec) is left whole."""
    if len(line) <= width:
        return [line]
    indent = line[:len(line) - len(line.lstrip())]
    body = line.lstrip()
    if body.startswith("#"):
        return textwrap.wrap(body[1:].strip(), width=width - len(indent) - 2,
                             initial_indent=indent + "# ", subsequent_indent=indent + "# ",
                             break_long_words=False) or [line]
    cut = body.find("(")
    if cut < 0 or "'" in body or '"' in body:    # (a message in a spec stays one line)
        return [line]
    head, rest = indent + body[:cut + 1], body[cut + 1:]
    cont = indent + " " * 8
    parts = rest.split(", ")
    out, cur = [head], cont
    for k, part in enumerate(parts):
        piece = part + (", " if k < len(parts) - 1 else "")
        if len(cur) + len(piece.rstrip()) > width and cur.strip():
            out.append(cur.rstrip())
            cur = cont
        cur += piece
    out.append(cur.rstrip())
    return out


class _SignedConstants(ast.NodeTransformer):
    """A negative number is not an atom: ``Constant(-0.5)`` inside ``** 2`` would print
    as ``-0.5 ** 2`` (that is, -(0.5 ** 2)). As ``-(0.5)`` the unparser parenthesizes it
    by precedence wherever it stands: ``(-0.5) ** 2``."""

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, (int, float)) and not isinstance(v, bool) and \
                (v < 0 or (v == 0 and math.copysign(1.0, v) < 0)):
            return ast.copy_location(ast.UnaryOp(op=ast.USub(), operand=ast.Constant(-v)), node)
        return node


def expr_src(node):
    """Python source of a gast expression or simple statement."""
    tree = _SignedConstants().visit(gast.gast_to_ast(node))
    for n in ast.walk(tree):
        if isinstance(n, ast.stmt) and getattr(n, "lineno", None) is None:
            n.lineno = 0
    return ast.unparse(tree)


def atomic_minmax_src(s):
    """The CPU spelling of ``ad.atomic_min(arr, i, v)``: ``arr[i] = min(arr[i], v)``, one
    statement (a colliding one runs in a serial grid loop: pass parallel)."""
    fn = "min" if s.is_min else "max"
    load = gast.Subscript(value=s.target.value, slice=s.target.slice, ctx=gast.Load())
    call = gast.Call(func=gast.Name(id=fn, ctx=gast.Load(), annotation=None, type_comment=None),
                     args=[load, s.value], keywords=[])
    store = gast.Assign(targets=[s.target], value=call, type_comment=None)
    return f"{expr_src(store)}  # ad.atomic_{fn}"


def _elif(s):
    """Whether ``if``-statement ``s``'s else is one ``if`` of the same user line, printed as
    ``elif`` (a chain of another line stays nested, under that line's comment)."""
    line = getattr(s, "lineno", None)
    return len(s.orelse) == 1 and isinstance(s.orelse[0], gast.If) and line is not None and \
        getattr(s.orelse[0], "lineno", None) == line


class Printer:
    def __init__(self, source=None):
        self.source = source          # SourceInfo, for quoting the user's lines
        self.lines = []
        self.last_line = None

    def text(self):
        return "\n".join(self.lines) + "\n"

    def emit(self, depth, text):
        self.lines.extend(wrap(INDENT * depth + text))

    def note_line(self, s, depth):
        lineno = getattr(s, "lineno", None)
        if not lineno or lineno == self.last_line or self.source is None:
            return
        self.last_line = lineno
        src = self.source.line(lineno).strip()
        where = f"{os.path.basename(self.source.filename)}:{lineno}"
        self.emit(depth, f"# {where}: {src}" if src else f"# {where}")

    def function(self, fname, params, body, depth=0, decorator=None):
        if decorator:
            self.emit(depth, decorator)
        self.emit(depth, f"def {fname}({', '.join(params)}):")
        self.block(body, depth + 1)

    def block(self, stmts, depth):
        for s in stmts:
            self.stmt(s, depth)
        if all(isinstance(s, Comment) for s in stmts):
            self.emit(depth, "pass")    # comments alone are no block (a backward with no work)

    def stmt(self, s, depth):
        if isinstance(s, Comment):
            self.emit(depth, f"# {s.text}")
            self.last_line = None
            return
        self.note_line(s, depth)
        if isinstance(s, gast.If):
            self.emit(depth, f"if {expr_src(s.test)}:")
            self.block(s.body, depth + 1)
            while _elif(s):         # a chain made of one line (a select): elif
                s = s.orelse[0]
                self.emit(depth, f"elif {expr_src(s.test)}:")
                self.block(s.body, depth + 1)
            if s.orelse:
                self.emit(depth, "else:")
                self.block(s.orelse, depth + 1)
        elif isinstance(s, gast.For):
            self.emit(depth, f"for {expr_src(s.target)} in {expr_src(s.iter)}:")
            self.loop_body(s, depth + 1)
        elif isinstance(s, gast.While):
            self.emit(depth, f"while {expr_src(s.test)}:")
            self.loop_body(s, depth + 1)
        elif isinstance(s, Print):
            self.emit(depth, expr_src(gast.Expr(value=gast.Call(
                func=gast.Name(id="print", ctx=gast.Load(), annotation=None, type_comment=None),
                args=s.args, keywords=[]))))
        elif isinstance(s, AtomicMinMax):
            self.emit(depth, atomic_minmax_src(s))
        elif isinstance(s, gast.Assign) and isinstance(s.value, AtomicFetch):
            v = s.value                     # old = ad.atomic_add(a, i, v): two steps, serial
            self.emit(depth, f"{expr_src(s.targets[0])} = {expr_src(v.target)}")
            self.stmt(atomic_update(s), depth)
        elif isinstance(s, gast.Assign) and isinstance(s.value, AtomicResult):
            zero = "0.0" if s.value.is_float else "0"
            self.emit(depth, f"{expr_src(s.targets[0])} = {zero}  # the old value of an atomic "
                      "(its backward does not read it)")
        elif isinstance(s, AtomicBits):     # (a colliding one runs serially: pass parallel)
            aug = gast.AugAssign(target=s.target, op=s.op, value=s.value)
            fn = {gast.BitAnd: "and", gast.BitOr: "or", gast.BitXor: "xor"}[type(s.op)]
            self.emit(depth, f"{expr_src(aug)}  # ad.atomic_{fn}")
        elif isinstance(s, ComponentCheck):     # (before pass bounds: --stage scalarize, ...)
            local = s.local or f"a {s.type_name}"
            self.emit(depth, f"# {expr_src(s.index)} is outside axis {s.axis} of {local} "
                      f"(size {s.size}): a fault (pass bounds)")
        elif isinstance(s, CheckStmt):
            self.emit(depth, expr_src(s.value))      # a bounds check, as pass bounds wrote it
        else:
            self.emit(depth, expr_src(s))

    def loop_body(self, s, depth):
        self.block(s.body, depth)
        info = getattr(s, "loop", None)
        if info is None:
            return
        extra = list(info.latch) or list(info.cond)
        if not info.latch and info.break_flag:
            extra.append(gast.If(test=gast.Name(id=info.break_flag, ctx=gast.Load(), annotation=None,
                                               type_comment=None), body=[gast.Break()], orelse=[]))
        if extra:
            self.emit(depth, "# latch: end of iteration")
            saved = self.last_line
            for x in extra:
                self.stmt(x, depth)
            self.last_line = saved


def render_function(fname, params, body, source=None, decorator=None):
    p = Printer(source)
    p.function(fname, params, body, decorator=decorator)
    return p.text()
