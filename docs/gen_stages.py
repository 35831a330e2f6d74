"""Fill the docs with the real output of ``adjoint show`` (and real files).

Markers in a page, each on a line of its own, are replaced by a code block:

    <!-- adjoint show docs/stages_example.py:capped_sum --stage ssa -->
    <!-- include docs/stages_example.py -->

``mkdocs build`` runs this through ``docs/hooks.py``, so the tutorial always
shows what the current transformer prints. To see a page expanded by hand:

    python docs/gen_stages.py docs/reverse-mode.md
"""
import contextlib
import io
import os
import re
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!-- (adjoint show|include) (.+?) -->$", re.MULTILINE)


def show(args):
    """The standard output of ``adjoint show ARGS`` (run from the repository root)."""
    from adjoint.cli import main
    argv = shlex.split(args)
    argv[0] = os.path.join(ROOT, argv[0])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main(["show"] + argv)
    if status != 0:
        raise RuntimeError(f"adjoint show {args} failed with status {status}")
    return buf.getvalue().replace(ROOT + os.sep, "")


def include(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        text = fh.read()
    return text.split('"""', 2)[2].lstrip("\n") if text.startswith('"""') else text


def expand(markdown):
    """``markdown`` with every marker replaced by its output in a fenced block."""
    def block(m):
        kind, args = m.group(1), m.group(2)
        text = show(args) if kind == "adjoint show" else include(args)
        lang = "diff" if "--diff" in args else "python"
        command = f"$ adjoint show {args}\n" if kind == "adjoint show" else ""
        note = f"<small>`{command.strip()[2:]}`</small>\n\n" if command else ""
        return f"{note}```{lang}\n{text.rstrip()}\n```"
    return MARKER.sub(block, markdown)


if __name__ == "__main__":
    for page in sys.argv[1:] or [os.path.join(ROOT, "docs", "reverse-mode.md")]:
        with open(page, encoding="utf-8") as fh:
            sys.stdout.write(expand(fh.read()))
