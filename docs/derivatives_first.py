"""The first thing a teacher types (run by docs/derivatives.md)."""
import math

import adjoint as ad


@ad.func
def f(x: float) -> float:
    return x * math.sin(x)


df = ad.grad(f)
print(df(1.0))                                  # adjoint's derivative at x = 1
print(math.sin(1.0) + 1.0 * math.cos(1.0))      # by hand: f'(x) = sin x + x cos x
print(ad.source(df))                            # the code df runs
