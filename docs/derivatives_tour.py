"""ad.value_and_grad, argnums, ad.jvp, ad.hessian, ad.grad(ad.grad(g)) (run by
docs/derivatives.md)."""
import math

import adjoint as ad


@ad.func
def g(x: float, y: float) -> float:
    s = x
    for k in range(3):
        if s < 1.0:
            s = s * s + y
        else:
            s = math.sin(s) * y
    return s


print("g(0.5, 0.4)                  =", g(0.5, 0.4))
print("value_and_grad(g)            =", ad.value_and_grad(g)(0.5, 0.4))
print("grad(g, argnums=1)           =", ad.grad(g, argnums=1)(0.5, 0.4))
print("grad(g, argnums=(0, 1))      =", ad.grad(g, argnums=(0, 1))(0.5, 0.4))
print("jvp(g, (0.5, 0.4), (1, 0))   =", ad.jvp(g, (0.5, 0.4), (1.0, 0.0)))
print("jvp(g, (0.5, 0.4), (0, 1))   =", ad.jvp(g, (0.5, 0.4), (0.0, 1.0)))
print("hessian(g)                   =", ad.hessian(g)(0.5, 0.4))
print("hessian(g, argnums=(0, 1))   =", ad.hessian(g, argnums=(0, 1))(0.5, 0.4))
print("grad(grad(g))                =", ad.grad(ad.grad(g))(0.5, 0.4))
print("grad(grad(g, 1), 0)          =", ad.grad(ad.grad(g, argnums=1), argnums=0)(0.5, 0.4))
