"""``adjoint.traces`` is ``adjoint.derivatives.traces``, the same module (its old path, kept public)."""
import sys

from .derivatives import traces as _module

sys.modules[__name__] = _module
