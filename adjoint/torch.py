"""``adjoint.torch`` is ``adjoint.interop.torch``, the same module (its old path, kept public)."""
import sys

from .interop import torch as _module

sys.modules[__name__] = _module
