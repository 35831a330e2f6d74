"""The table of runtime builtins: every ``rt.<name>`` function generated code calls.

Expects: nothing (a leaf of the runtime). Guarantees: ``BUILTINS`` maps each name,
registered once (a second registration is a ``ValueError``), to its ``Builtin`` record;
``builtin`` and ``register`` add one. runtime/ieee.py registers the math functions and
operators, runtime/vecmath.py the vector code's (``length3``, ``div_or_zero``); the
backends, the ``ad.*`` exports and the CUDA device functions read the table.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Builtin:
    """One ``rt.<name>`` function generated code calls (a rule's ``runtime`` name)."""
    name: str
    python: object        # the plain-Python meaning: the Python backend, CUDA's simulator
    compiled: object      # the same for numba.njit (error_model="numpy") and numba.cuda
    user: object = None   # what a kernel calls, exported as ad.<name> (None: an operator's)
    device: object = None  # numba.cuda's spelling where it cannot compile ``compiled``

    @property
    def cuda(self):
        """The function numba.cuda compiles as a device function."""
        return self.device or self.compiled


BUILTINS = {}
AD = object()           # builtin(user=AD): the decorated function is also ad.<name>


def register(name, python, compiled, user, device=None):
    if name in BUILTINS:
        raise ValueError(f"duplicate runtime builtin rt.{name}")
    BUILTINS[name] = Builtin(name, python, compiled, python if user is AD else user, device)
    return python


def builtin(compiled, user=None, device=None):
    """Register the decorated function as ``rt.<its name>`` in plain Python, with
    ``compiled`` its numba spelling (``device``: numba.cuda's, where that differs) and
    ``user`` the function a kernel calls (``AD``: the decorated function itself, exported
    as ``ad.<its name>``: its plain-Python meaning is what a call outside a kernel gets)."""
    def deco(fn):
        return register(fn.__name__, fn, compiled, user, device)
    return deco
