"""Process-wide settings, as ``warp.config``: read from the environment at import,
changeable at any time (``ad.config.verify_fp = True``).

``verify_fp`` (env ``ADJOINT_VERIFY_FP=1``): after every launch, check that the
arrays a forward launch wrote and the adjoint arrays a backward launch wrote
hold no inf or nan, and raise ``NonFiniteError`` naming the kernel, the launch,
the array and the first bad element (runtime/verify.py). Off by default: it
reads every array a launch writes, and copies it to the host on a GPU.
"""
import os


def _flag(name):
    return os.environ.get(name, "0").strip().lower() not in ("", "0", "false", "no", "off")


verify_fp = _flag("ADJOINT_VERIFY_FP")
