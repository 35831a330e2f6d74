"""``adjoint.vector_mode`` is ``adjoint.derivatives.vector_mode``, the same module (its old path, kept public)."""
import sys

from .derivatives import vector_mode as _module

sys.modules[__name__] = _module
