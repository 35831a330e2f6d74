"""Fill the docs with the real output of ``adjoint show`` (and real files).

Markers in a page, each on a line of its own, are replaced by a code block:

    <!-- adjoint show docs/stages_example.py:capped_sum --stage ssa -->
    <!-- adjoint passes -->
    <!-- adjoint trace docs/trace_example.py:baydin --args 2 5 --format markdown -->
    <!-- adjoint transpose docs/trace_example.py:baydin --args 2 5 -->
    <!-- include docs/stages_example.py -->
    <!-- run examples/jacobian.py -->
    <!-- warp table -->

``warp table`` is a markdown table (not a code block): every name of NVIDIA Warp's
namespace and what ``adjoint.warp`` does with it, read from that namespace
(``adjoint.warp.markdown_table``), so the page cannot go stale.
``adjoint trace ... --format markdown`` (or ``html``; ``adjoint transpose ... --format
markdown`` too) is put in the page as it prints (a table, not a code block); as text it
is a code block.
``run`` shows what a script prints (arguments after its path are passed on), run with
the pure-Python backend
(``ADJOINT_JIT=0``: the same numbers as numba, without its compile time).

``mkdocs build`` runs this through ``docs/hooks.py``, so the tutorial always
shows what the current transformer prints. To see a page expanded by hand:

    python docs/gen_stages.py docs/reverse-mode.md
"""
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!-- (adjoint show|adjoint passes|adjoint trace|adjoint transpose|include|"
                    r"run|warp table) "
                    r"?(.*?) -->$",
                    re.MULTILINE)


def show(args, command="show"):
    """The standard output of ``adjoint show ARGS`` (run from the repository root; also
    ``adjoint passes``)."""
    from adjoint.cli import main
    argv = shlex.split(args)
    if argv:
        argv[0] = os.path.join(ROOT, argv[0])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main([command] + argv)
    if status != 0:
        raise RuntimeError(f"adjoint {command} {args} failed with status {status}")
    return buf.getvalue().replace(ROOT + os.sep, "")


def include(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        text = fh.read()
    return text.split('"""', 2)[2].lstrip("\n") if text.startswith('"""') else text


def run(path):
    """The standard output of ``python PATH [ARGS]`` (from the repository root,
    ``ADJOINT_JIT=0``)."""
    env = dict(os.environ, ADJOINT_JIT="0",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = shlex.split(path)
    r = subprocess.run([sys.executable, os.path.join(ROOT, argv[0])] + argv[1:],
                       capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"python {path} failed with status {r.returncode}:\n{r.stderr}")
    return r.stdout.replace(ROOT + os.sep, "")


def expand(markdown):
    """``markdown`` with every marker replaced by its output in a fenced block."""
    def block(m):
        kind, args = m.group(1), m.group(2)
        if kind == "warp table":
            import adjoint.warp
            return adjoint.warp.markdown_table()
        text = {"adjoint show": show, "include": include, "run": run,
                "adjoint passes": lambda a: show(a, "passes"),
                "adjoint trace": lambda a: show(a, "trace"),
                "adjoint transpose": lambda a: show(a, "transpose")}[kind](args)
        if kind in ("adjoint trace", "adjoint transpose") and \
                re.search(r"--format[ =](markdown|html)", args):
            return f"<small>`{kind} {args}`</small>\n\n{text.rstrip()}"
        lang = "diff" if "--diff" in args else "text" if kind in (
            "run", "adjoint passes", "adjoint trace", "adjoint transpose") else "python"
        command = {"adjoint show": f"adjoint show {args}", "run": f"python {args}",
                   "adjoint trace": f"adjoint trace {args}",
                   "adjoint transpose": f"adjoint transpose {args}",
                   "adjoint passes": "adjoint passes"}.get(kind)
        note = f"<small>`{command}`</small>\n\n" if command else ""
        return f"{note}```{lang}\n{text.rstrip()}\n```"
    return MARKER.sub(block, markdown)


if __name__ == "__main__":
    for page in sys.argv[1:] or [os.path.join(ROOT, "docs", "reverse-mode.md")]:
        with open(page, encoding="utf-8") as fh:
            sys.stdout.write(expand(fh.read()))
