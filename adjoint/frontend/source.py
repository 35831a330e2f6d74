"""Reading a kernel's or func's source text, as the parser and the module key see it.

Expects: a plain Python function.
Guarantees: ``read_source`` returns the same lines to everyone who asks in one
process state (``inspect`` refreshes ``linecache`` from the file first), so the
parser (frontend/parse.py) and the key of a generated module (adjoint/build/inputs.py)
read the same text; ``names_seen`` gives both the same names a body sees.
Imports no gast: the key is computed without the transformer.
"""
import ast
import inspect
import linecache

from ..errors import TransformError


def read_source(pyfunc):
    """(file name, first line, the function's lines, all lines of its file or cell)."""
    filename = pyfunc.__code__.co_filename
    try:
        lines, first = inspect.getsourcelines(pyfunc)
    except (OSError, TypeError) as exc:
        raise TransformError(
            f"cannot read the source of '{pyfunc.__qualname__}' ({exc}): kernels and funcs "
            "must be defined in a .py file or a notebook cell; a function made by exec() "
            "of a string has no source to read", filename=filename,
            lineno=pyfunc.__code__.co_firstlineno, function=pyfunc.__name__,
            stage="parse") from None
    all_lines = linecache.getlines(filename, pyfunc.__globals__)
    if len(all_lines) < first - 1 + len(lines):
        all_lines = [""] * (first - 1) + lines
    return filename, first, lines, all_lines


def names_seen(pyfunc):
    """The names ``pyfunc``'s body sees: its globals, then its closure's cells (an empty
    cell is left out)."""
    env = dict(pyfunc.__globals__)
    if pyfunc.__closure__:
        for name, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
            try:
                env[name] = cell.cell_contents
            except ValueError:
                pass
    return env


def attribute_chains(tree, local=frozenset()):
    """Every name not in ``local`` read in ``tree``, with the attribute chain read from it
    (``("math", "sin")``, ``("cfg", "n")``), sorted: what a body's free names look up
    (adjoint/build/inputs.py describes them, adjoint/build/bindings.py watches them)."""
    out = set()
    for node in ast.walk(tree):
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id not in local:
            out.add((node.id,) + tuple(reversed(chain)))
    return sorted(out)
