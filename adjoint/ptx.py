"""``adjoint.ptx`` is ``adjoint.build.ptx``, the same module (its old path, kept public)."""
import sys

from .build import ptx as _module

if __name__ == "__main__":          # python -m adjoint.ptx
    sys.exit(_module.main())
sys.modules[__name__] = _module
