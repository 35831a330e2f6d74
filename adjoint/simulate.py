"""``adjoint.simulate`` is ``adjoint.tapes.simulate``, the same module (its old path, kept public)."""
import sys

from .tapes import simulate as _module

sys.modules[__name__] = _module
