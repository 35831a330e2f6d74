"""``adjoint.cli`` is ``adjoint.build.cli``, the same module (its old path, kept public)."""
import sys

from .build import cli as _module

if __name__ == "__main__":          # python -m adjoint.cli
    sys.exit(_module.main())
sys.modules[__name__] = _module
