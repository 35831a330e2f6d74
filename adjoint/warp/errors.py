"""The errors ``adjoint.warp`` raises for what Warp has and adjoint does not.

``WarpFeatureError`` names the Warp feature, why adjoint lacks it and the user's line
(``user_line``: the first frame outside adjoint's package). ``WarpNameError`` is the one
a refused name raises (``wp.Mesh``, ``wp.capture_begin``): also an ``AttributeError``,
so ``hasattr(wp, "Mesh")`` and ``getattr(wp, "Mesh", None)`` read a refused name as
absent, as a program probing for a feature expects; inside a kernel the transformer
reports its message at the kernel's line (frontend/parse.py).
"""
import linecache
import sys

from ..errors import PACKAGE_DIR, AdjointError


class WarpFeatureError(AdjointError):
    """A feature of NVIDIA Warp that adjoint does not support (see docs/from-warp.md)."""


class WarpNameError(WarpFeatureError, AttributeError):
    """``wp.<name>`` for a Warp name adjoint refuses."""


def user_line(depth=1):
    """``"file:line: source"`` of the innermost frame outside adjoint's package (and
    outside the import machinery), starting ``depth`` frames above the caller; "" when
    there is none."""
    frame = sys._getframe(depth + 1)
    while frame is not None and frame.f_code.co_filename.startswith((PACKAGE_DIR, "<frozen")):
        frame = frame.f_back
    if frame is None:
        return ""
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{where}: {text}" if text else where


def refuse(feature, why, depth=1, cls=WarpFeatureError):
    """The error for Warp's ``feature`` (``"wp.Mesh"``), which adjoint lacks because
    ``why``, naming the user's line."""
    line = user_line(depth + 1)
    return cls(f"{feature} is not supported by adjoint.warp: {why}" +
               (f" (at {line})" if line else ""))
