"""``adjoint.copies`` is ``adjoint.tapes.copies``, the same module (its old path, kept public)."""
import sys

from .tapes import copies as _module

sys.modules[__name__] = _module
