"""``adjoint.optim`` is ``adjoint.tapes.optim``, the same module (its old path, kept public)."""
import sys

from .tapes import optim as _module

sys.modules[__name__] = _module
