"""``adjoint.generate`` is ``adjoint.build.generate``, the same module (its old path, kept public)."""
import sys

from .build import generate as _module

sys.modules[__name__] = _module
