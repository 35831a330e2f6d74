"""``adjoint.autograd`` is ``adjoint.derivatives.autograd``, the same module (its old path, kept public)."""
import sys

from .derivatives import autograd as _module

sys.modules[__name__] = _module
