"""The errors ``adjoint.warp`` raises for what Warp has and adjoint does not.

``WarpFeatureError`` names the Warp feature, why adjoint lacks it and the user's line
(``user_line``: the first frame outside adjoint's package). ``WarpNameError`` is the one
a refused name raises (``wp.Mesh``, ``wp.capture_begin``): also an ``AttributeError``,
so ``hasattr(wp, "Mesh")`` and ``getattr(wp, "Mesh", None)`` read a refused name as
absent, as a program probing for a feature expects; inside a kernel the transformer
reports its message at the kernel's line (frontend/parse.py).
"""
from ..errors import AdjointError, user_line


class WarpFeatureError(AdjointError):
    """A feature of NVIDIA Warp that adjoint does not support (see docs/from-warp.md)."""


class WarpNameError(WarpFeatureError, AttributeError):
    """``wp.<name>`` for a Warp name adjoint refuses."""


def refuse(feature, why, depth=1, cls=WarpFeatureError):
    """The error for Warp's ``feature`` (``"wp.Mesh"``), which adjoint lacks because
    ``why``, naming the user's line."""
    line = user_line(depth + 2)
    return cls(f"{feature} is not supported by adjoint.warp: {why}" +
               (f" (at {line})" if line else ""))
