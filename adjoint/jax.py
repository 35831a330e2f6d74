"""``adjoint.jax`` is ``adjoint.interop.jax``, the same module (its old path, kept public)."""
import sys

from .interop import jax as _module

sys.modules[__name__] = _module
