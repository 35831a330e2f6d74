"""``adjoint.distributed`` is ``adjoint.interop.distributed``, the same module (its old path, kept public)."""
import sys

from .interop import distributed as _module

sys.modules[__name__] = _module
