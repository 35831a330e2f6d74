"""adjoint's tests, one subpackage per package group of adjoint/ (docs/architecture.md).

A package, so that tests import the shared helpers (``tests.conftest``, ``tests.levels``,
``tests.gpu_tolerance``) and one another's tables by their full names, and no test folder
(``tests/warp``, ``tests/build``) is ever importable as a top-level ``warp`` or ``build``."""
