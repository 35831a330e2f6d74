"""Process-wide settings, as ``warp.config``: read from the environment at import,
changeable at any time (``ad.config.verify_fp = True``).

``verify_fp`` (env ``ADJOINT_VERIFY_FP=1``): after every launch, check that the
arrays a forward launch wrote and the adjoint arrays a backward launch wrote
hold no inf or nan, and raise ``NonFiniteError`` naming the kernel, the launch,
the array and the first bad element (runtime/verify.py). Off by default: it
reads every array a launch writes, and copies it to the host on a GPU.

``eager_vjp`` (env ``ADJOINT_EAGER_VJP=0`` turns it off; on by default): a launch
recorded on a tape whose kernel adds into a one-element loss runs its forward and
its vector-Jacobian product as one launch, and the tape's backward scales what it
computed (runtime/eager.py). Off, every backward replays its launch.

``load_governor`` (env ``ADJOINT_LOAD_GOVERNOR=0`` turns it off; on by default): on
the numba backend, parallel code runs on as many threads as the machine has cores
not taken by other runnable work (runtime/load.py). Off, always on numba's threads.
"""
import os


def _flag(name):
    return os.environ.get(name, "0").strip().lower() not in ("", "0", "false", "no", "off")


verify_fp = _flag("ADJOINT_VERIFY_FP")
eager_vjp = os.environ.get("ADJOINT_EAGER_VJP", "1").strip().lower() not in (
    "", "0", "false", "no", "off")
load_governor = os.environ.get("ADJOINT_LOAD_GOVERNOR", "1").strip().lower() not in (
    "", "0", "false", "no", "off")
