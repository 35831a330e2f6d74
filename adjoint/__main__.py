"""``python -m adjoint``: the same as the ``adjoint`` command."""
import sys

from .build.cli import main

sys.exit(main())
