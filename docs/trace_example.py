"""The funcs docs/traces.md traces: Baydin et al.'s example and a loop."""
import math

import adjoint as ad


@ad.func
def baydin(x1: float, x2: float) -> float:
    y = math.log(x1) + x1 * x2 - math.sin(x2)
    return y


@ad.func
def compound(x: float, n: int) -> float:
    s = 1.0
    for k in range(n):
        s = s * (1.0 + x)
    return s
