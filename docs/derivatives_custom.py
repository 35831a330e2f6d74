"""Hand-written rules: @ad.func_grad for reverse mode, @ad.func_jvp for forward mode
and everything built on it (run by docs/derivatives.md)."""
import math

import adjoint as ad


@ad.func
def softplus(x: float) -> float:
    return math.log(1.0 + math.exp(x))


@ad.func_grad(softplus)            # reverse mode: adj_x from the result's adjoint
def softplus_grad(x: float, adj_ret: float):
    return adj_ret / (1.0 + math.exp(-x))


@ad.func_jvp(softplus)             # forward mode: (value, tangent) from (x, dot_x)
def softplus_jvp(x: float, dot_x: float):
    return math.log(1.0 + math.exp(x)), dot_x / (1.0 + math.exp(-x))


@ad.func
def loss(x: float) -> float:
    return softplus(x * x)


x = 0.5
s = 1.0 / (1.0 + math.exp(-x * x))         # by hand: loss' = 2x s, loss'' = 2s + 4x² s(1 - s)
print("grad(loss)       =", ad.grad(loss)(x), " by hand:", 2 * x * s)
print("jvp(loss)        =", ad.jvp(loss, (x,), (1.0,)))
print("grad(grad(loss)) =", ad.grad(ad.grad(loss))(x), " by hand:", 2 * s + 4 * x * x * s * (1 - s))


@ad.func
def relu6(x: float) -> float:      # a func with a reverse rule only
    return ad.clamp(x, 0.0, 6.0)


@ad.func_grad(relu6)
def relu6_grad(x: float, adj_ret: float):
    return adj_ret if 0.0 < x < 6.0 else 0.0


print("grad(relu6)      =", ad.grad(relu6)(2.0))
try:
    ad.grad(ad.grad(relu6))(2.0)
except ad.AdjointError as e:
    print("grad(grad(relu6)): AdjointError:", e)
