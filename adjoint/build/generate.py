"""Gradient modules you can commit: ``ad.generate``, and what ``adjoint
generate`` and ``adjoint check`` do with files.

A source file of ``@ad.kernel`` and ``@ad.func`` definitions is imported as a
module (under a private name, so its ``if __name__ == "__main__"`` block does
not run); every kernel and func it defines becomes one generated module,
written by ``adjoint.emit.module.module_source``. The generated text depends
only on the source text, the adjoint version and the source's path *relative
to the generated file* (recorded in the header), so it is byte-identical on
every machine and ``check`` can find the source again.

A module is generated for a *target*: ``cpu`` (``rt.jit``: numba on the CPU,
or plain Python) or ``cuda`` (``numba.cuda.jit``). A CUDA module's header says
so in one more line, ``# adjoint-target: cuda``; a header without it is a CPU
module's, so CPU headers read as they did before there were targets. A module generated
with some optimization passes off (``ADJOINT_OPTIMIZE=0``, ``-scale``) says so in
``# adjoint-optimize: 0``, and ``check`` regenerates it under that setting; one with all of
them has no such line.

This module imports the transformer lazily: ``import adjoint`` (which generated
modules do) must keep working where gast and astor are absent.
"""
import difflib
import hashlib
import importlib.util
import itertools
import os
import re
import sys
from dataclasses import dataclass

from .. import __version__
from . import passes
from ..api import Func, Kernel
from .cache import LOCK, holds, write_atomic
from ..emit.targets import TARGETS  # noqa: F401 - also adjoint.generate.TARGETS
from ..errors import AdjointError, StaleModuleError, user_frames
from .modules import module_items

HEADER_KEYS = ("adjoint-version", "adjoint-source", "adjoint-source-sha256")
TARGET_KEY = "adjoint-target"      # optional: absent means "cpu"
OPTIMIZE_KEY = "adjoint-optimize"  # optional: absent means every optimization (passes.py)
_counter = itertools.count()


@dataclass(frozen=True)
class Header:
    """The provenance a generated module records in its first lines."""
    version: str
    source: str      # the source path, relative to the generated file's folder
    sha256: str      # of the source text
    target: str = "cpu"
    optimize: str = "1"     # the ADJOINT_OPTIMIZE setting it was generated under

    @classmethod
    def parse(cls, text):
        """The header of generated module ``text``, or ``None`` if it has none."""
        found = {}
        for line in text.splitlines()[:20]:
            m = re.match(r"# (adjoint-[a-z0-9-]+): (.*)$", line)
            if m and m.group(1) in HEADER_KEYS + (TARGET_KEY, OPTIMIZE_KEY):
                found[m.group(1)] = m.group(2).strip()
        if not all(k in found for k in HEADER_KEYS):
            return None
        return cls(*(found[k] for k in HEADER_KEYS), found.get(TARGET_KEY, "cpu"),
                   found.get(OPTIMIZE_KEY, "1"))


@dataclass(frozen=True)
class CheckResult:
    """Whether one generated module is up to date; ``reason`` says why not.

    ``generated`` is False when ``path`` is no generated module at all (missing,
    or a file without an adjoint header, such as a kernel source): a wrong
    argument to ``check`` rather than a stale module."""
    path: str
    ok: bool
    reason: str = ""
    diff: str = ""
    generated: bool = True


def read_text(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def import_source(path):
    """Import the file at ``path`` as a fresh module (its folder on ``sys.path``)."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise AdjointError(f"{path}: no such source file")
    digest = hashlib.sha256(path.encode()).hexdigest()[:12]
    modname = f"adjoint_source_{digest}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec.loader.exec_module(module)
    except AdjointError:
        sys.modules.pop(modname, None)
        raise
    except Exception as exc:        # the user's module failed: say where, keep the cause
        sys.modules.pop(modname, None)
        raise AdjointError(_import_failure(path, exc)) from exc
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    finally:
        sys.path.remove(os.path.dirname(path))
    return module


def _import_failure(path, exc):
    """The message for ``path`` failing to import with ``exc``: its file and line."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f"{path}:{line}" if line is not None else path
    msg = f"{where}: importing the file failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, ImportError) and "relative import" in str(exc):
        msg += (" (adjoint imports FILE.py on its own, outside its package: use absolute "
                "imports in it, or put the kernels in a file that has them)")
    return msg


def defined_here(module):
    """(kernels, funcs) defined in ``module``'s own file, in source order."""
    here = os.path.abspath(module.__file__)
    found, seen = [], set()
    for obj in vars(module).values():
        if not isinstance(obj, (Kernel, Func)) or id(obj) in seen:
            continue
        code = obj.pyfunc.__code__
        if os.path.abspath(code.co_filename) != here:
            continue           # imported from elsewhere: generated with its own file
        seen.add(id(obj))
        found.append((code.co_firstlineno, obj.name, obj))
    found.sort(key=lambda t: (t[0], t[1]))
    kernels = [o for _, _, o in found if isinstance(o, Kernel)]
    funcs = [o for _, _, o in found if isinstance(o, Func)]
    return kernels, funcs


def relative_source(src, out=None):
    """How the header names ``src``: relative to ``out``'s folder, with ``/``."""
    src = os.path.abspath(src)
    if out is None:
        return os.path.basename(src)
    rel = os.path.relpath(src, os.path.dirname(os.path.abspath(out)))
    return rel.replace(os.sep, "/")


def check_target(target, path):
    """Raise ``AdjointError`` unless ``target`` is one adjoint generates for."""
    if target not in TARGETS:
        raise AdjointError(f"{path}: unknown target {target!r}; "
                           f"choose one of {', '.join(TARGETS)}")


@user_frames
def generate(path, out=None, target="cpu"):
    """Source text of the module holding every kernel and func defined in ``path``.

    ``out`` is where the module will be written; the header records the
    source's path relative to it (just the file name when ``out`` is omitted),
    so ``adjoint check`` can find the source again. ``target`` is ``"cpu"``
    (``rt.jit``; numba or plain Python) or ``"cuda"`` (``numba.cuda.jit``, for
    launches with ``device="cuda"``). The text is byte-identical for the same
    source, target, adjoint version and relative path.
    """
    from ..emit.module import module_source
    check_target(target, path)
    with LOCK:                  # import_source changes sys.path; kernels transform once
        module = import_source(path)
        try:
            kernels, funcs = defined_here(module)
            if not kernels and not funcs:
                raise AdjointError(f"{path}: defines no @ad.kernel or @ad.func")
            items = module_items(kernels, funcs)
            return module_source(items, relative_source(path, out), read_text(path), target)
        finally:
            sys.modules.pop(module.__name__, None)


def is_generated(path):
    """Whether the file at ``path`` is a module adjoint generated (it has the header)."""
    try:
        return Header.parse(read_text(path)) is not None
    except (OSError, UnicodeDecodeError):
        return False


def looks_like_source(path):
    """Whether the file at ``path`` defines adjoint kernels or funcs (by its text)."""
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError):
        return False
    return "adjoint" in text and re.search(r"^\s*@[\w.]*\b(kernel|func)\b", text, re.M) is not None


def check_output(src, out):
    """Raise ``AdjointError`` unless ``out`` may be written with the module generated
    from ``src``: a file already there must be a generated module, never the source
    itself or any other file of the user's."""
    if out is None or not os.path.lexists(out):
        return
    if os.path.isdir(out):
        raise AdjointError(f"{out} is a folder, not a file to write {src}'s module to")
    if os.path.exists(src) and os.path.samefile(src, out):
        raise AdjointError(f"refusing to overwrite {out}: it is the source file {src} itself; "
                           "write the generated module elsewhere (-o OUT.py)")
    if not is_generated(out):
        raise AdjointError(f"refusing to overwrite {out}: it is not a module adjoint generated "
                           "(it has no adjoint header); choose another -o or remove it first")


def write_if_changed(path, text):
    """Write ``text`` to ``path`` unless it already holds it; True if written.
    A path that cannot be written is an ``AdjointError`` naming it."""
    if holds(path, text):
        return False
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise AdjointError(f"cannot write {path}: {_why(exc)}") from None
    return True


def _why(exc):
    """What an ``OSError`` from writing a file means, in words."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)) and exc.filename:
        return f"{exc.filename} is a file, not a folder"
    return exc.strerror or str(exc)


def _is_candidate(path):
    """A file worth importing when a folder is generated: it uses adjoint and
    is not itself a generated module."""
    text = read_text(path)
    return "adjoint" in text and Header.parse(text) is None


def python_files(folder):
    """Every ``.py`` file under ``folder``, sorted, skipping hidden and cache folders."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".py")]
    return found


def plan(sources, out=None):
    """[(source file, output file or None)] for ``adjoint generate SOURCES -o OUT``.

    A single file with ``out`` ending in ``.py`` maps to that file; otherwise
    ``out`` is a folder and each source keeps its name (a folder source keeps
    its layout below ``out``). ``None`` as output means standard output.
    """
    to_file = (out is not None and len(sources) == 1 and os.path.isfile(sources[0])
               and out.endswith(".py") and not os.path.isdir(out))
    if out is None and (len(sources) > 1 or os.path.isdir(sources[0])):
        raise AdjointError("several sources or a folder need -o FOLDER")
    pairs = []
    for src in sources:
        if os.path.isdir(src):
            for f in python_files(src):
                if _is_candidate(f):
                    pairs.append((f, os.path.join(out, os.path.relpath(f, src))))
        elif not os.path.isfile(src):
            raise AdjointError(f"{src}: no such file or folder")
        elif out is None or to_file:
            pairs.append((src, out))
        else:
            pairs.append((src, os.path.join(out, os.path.basename(src))))
    return pairs


def generated_files(paths):
    """The generated modules among ``paths`` (files, or folders searched for
    files with an adjoint header)."""
    found = []
    for p in paths:
        if os.path.isdir(p):
            found += [f for f in python_files(p) if Header.parse(read_text(f)) is not None]
        else:
            found.append(p)
    return found


def check(out):
    """Is the generated module ``out`` what ``adjoint generate`` would write now
    (for the target its header names)?"""
    if not os.path.isfile(out):
        return CheckResult(out, False, "no such file", generated=False)
    text = read_text(out)
    header = Header.parse(text)
    if header is None and looks_like_source(out):
        return CheckResult(out, False, "this is a kernel source file, not a generated module; "
                           "check the module generated from it (adjoint generate "
                           f"{out} -o OUT.py, then adjoint check OUT.py)", generated=False)
    if header is None:
        return CheckResult(out, False, "not a generated module (no adjoint header)",
                           generated=False)
    if header.target not in TARGETS:
        return CheckResult(out, False, f"its header names an unknown target {header.target!r} "
                                       f"(known: {', '.join(TARGETS)})")
    src = os.path.normpath(os.path.join(os.path.dirname(out), header.source))
    if not os.path.isfile(src):
        return CheckResult(out, False, f"its source {header.source} ({src}) is missing")
    try:
        setting = passes.parse_setting(header.optimize, f"its header's {OPTIMIZE_KEY}")
    except ValueError as exc:
        return CheckResult(out, False, str(exc))
    with passes.optimizing(setting):     # (regenerated under the setting it was made with)
        fresh = generate(src, out, header.target)
    if fresh == text:
        return CheckResult(out, True)
    reasons = []
    now = sha256(read_text(src))
    if now != header.sha256:
        reasons.append(f"{header.source} changed since generation "
                       f"(sha256 {header.sha256[:12]} -> {now[:12]})")
    if header.version != __version__:
        reasons.append(f"generated by adjoint {header.version}, this is adjoint {__version__}")
    if not reasons:
        reasons.append("the generated text differs from what its source gives "
                       "(edited by hand?)")
    diff = "".join(difflib.unified_diff(
        text.splitlines(True), fresh.splitlines(True),
        fromfile=f"{out} (committed)", tofile=f"{out} (regenerated)"))
    return CheckResult(out, False, "; ".join(reasons), diff)


def require_fresh(out):
    """Raise ``StaleModuleError`` unless ``out`` is up to date with its source."""
    result = check(out)
    if not result.ok:
        raise StaleModuleError(f"{out}: {result.reason}; "
                               "regenerate it with `adjoint generate`")
