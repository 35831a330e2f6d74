"""``adjoint.passes`` is ``adjoint.build.passes``, the same module (its old path, kept public)."""
import sys

from .build import passes as _module

sys.modules[__name__] = _module
