"""``adjoint.checkpoint`` is ``adjoint.tapes.checkpoint``, the same module (its old path, kept public)."""
import sys

from .tapes import checkpoint as _module

sys.modules[__name__] = _module
