"""``adjoint.printed`` is ``adjoint.derivatives.printed``, the same module (its old path, kept public)."""
import sys

from .derivatives import printed as _module

sys.modules[__name__] = _module
