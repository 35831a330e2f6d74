"""Exceptions raised by adjoint, and how their tracebacks are shown.

Every error about user code names the file, the line (and column where known)
and shows the offending source line, so it can be fixed without a traceback
into the transformer or into numba. Public entry points are wrapped in
``user_frames``: an ``AdjointError`` leaving them carries only the frames
outside adjoint's package (the user's), plus the one line that re-raises it.
``ADJOINT_TRACEBACK=1`` in the environment keeps the full traceback.
"""
import functools
import linecache
import os
import sys
import sysconfig
import types

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
LIBRARY_DIRS = tuple(sorted({os.path.join(os.path.abspath(p), "") for key, p in
                             sysconfig.get_paths().items() if key in
                             ("stdlib", "platstdlib", "purelib", "platlib")}))


class AdjointError(Exception):
    """Base class of every error adjoint raises on purpose."""


class TransformError(AdjointError):
    """User code that cannot be differentiated (unsupported syntax or call).

    Attributes: ``filename``, ``lineno``, ``col``, ``source_line``, ``stage``
    (the pass that failed), ``function`` (kernel/func name), ``reason``.
    """

    def __init__(self, reason, *, filename="<unknown>", lineno=0, col=0,
                 source_line="", stage="", function=""):
        self.reason = reason
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.source_line = source_line
        self.stage = stage
        self.function = function
        where = f"{filename}:{lineno}:{col + 1}"
        what = f" in '{function}'" if function else ""
        stage_txt = f" [pass: {stage}]" if stage else ""
        msg = f"{where}: {reason}{what}{stage_txt}"
        if source_line:
            stripped = source_line.rstrip("\n")
            indent = len(stripped) - len(stripped.lstrip())
            caret_col = max(col, indent)
            msg += f"\n    {stripped}\n    {' ' * caret_col}^"
        super().__init__(msg)


class LaunchError(AdjointError, TypeError):
    """Wrong arguments to ``launch`` (count, dtype, ndim, device, dim)."""


class BoundsError(LaunchError, IndexError):
    """An array index out of bounds in a kernel (checked unless
    ``@ad.kernel(bounds_check=False)``). Attributes: ``kernel``, ``array``,
    ``index``, ``shape``, ``filename`` and ``lineno`` (the access)."""

    def __init__(self, message, *, kernel="", array="", index=None, shape=(), filename="",
                 lineno=0):
        super().__init__(message)
        self.kernel, self.array, self.index, self.shape = kernel, array, index, shape
        self.filename, self.lineno = filename, lineno


class TapeError(AdjointError):
    """Misuse of a Tape, or an unsafe overwrite it refuses to record."""


class StaleModuleError(AdjointError):
    """A generated module is out of date with its source."""


def full_traceback():
    """Whether ``ADJOINT_TRACEBACK`` asks for adjoint's internal frames (read each time)."""
    return os.environ.get("ADJOINT_TRACEBACK", "0").strip().lower() not in ("", "0", "false",
                                                                           "no", "off")


def outside_frames(tb):
    """The traceback ``tb`` without adjoint's frames: those of adjoint's package, and
    below them those of the libraries it calls (the standard library, site-packages,
    frozen modules). The caller's frames stay, and so do frames of user files that
    adjoint calls back into."""
    kept, inside = [], False
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(PACKAGE_DIR):
            inside = True
        elif not (inside and (filename.startswith(LIBRARY_DIRS) or filename.startswith("<"))):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def user_line(depth=1):
    """``"file:line: source"`` of the innermost frame outside adjoint's package and the
    import machinery (the user's line that called into adjoint), starting ``depth`` frames
    above the caller, or "" when there is none: for an error raised by plain Python code,
    whose traceback is not the transformer's."""
    frame = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename.startswith((PACKAGE_DIR, "<frozen")):
        frame = frame.f_back
    if frame is None:
        return ""
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{where}: {text}" if text else where


def user_frames(fn):
    """Decorator for public entry points: an ``AdjointError`` raised inside ``fn`` shows
    the user's frames and its message, not the transformer's (unless ADJOINT_TRACEBACK=1)."""
    @functools.wraps(fn)
    def entry_point(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AdjointError as exc:
            if full_traceback():
                raise
            exc.__suppress_context__ = True
            tb = outside_frames(exc.__traceback__)
            raise exc.with_traceback(tb)  # adjoint's frames hidden: ADJOINT_TRACEBACK=1 shows them
    return entry_point


class NonFiniteError(AdjointError, FloatingPointError):
    """An inf or nan that ``adjoint.config.verify_fp`` found in a launch's output or
    gradient (see adjoint/runtime/verify.py)."""
