"""Exceptions raised by adjoint.

Every error about user code names the file, the line (and column where known)
and shows the offending source line, so it can be fixed without a traceback
into the transformer or into numba.
"""


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
