"""How ad.grad(ad.grad(f)) is made: the JVP printed as Python, then transformed
again (run by docs/derivatives.md)."""
import inspect
import math

import adjoint as ad
from adjoint.printed import jvp_func


@ad.func
def f(x: float) -> float:
    return x * math.sin(x)


print(inspect.getsource(jvp_func(f).pyfunc))     # 1. f's JVP, printed as a func
print(ad.source(jvp_func(f)))                    # 2. that func's reverse mode
d2f = ad.grad(ad.grad(f))
print(ad.source(d2f))                            # 3. the adjoint of "f' = f_jvp's tangent"
print(d2f(1.0))                                  # 4. f''(1)
print(2 * math.cos(1.0) - 1.0 * math.sin(1.0))   #    by hand: 2 cos x - x sin x
