"""``adjoint.transposes`` is ``adjoint.derivatives.transposes``, the same module (its old path, kept public)."""
import sys

from .derivatives import transposes as _module

sys.modules[__name__] = _module
