"""Exercise 1: write a derivative rule by hand, break it, and let gradcheck find the bug.

``scaled_hypot(x, y) = sqrt(x*x + 4*y*y)`` has the partials ``x / r`` and ``4 y / r``. The
rule below states them with ``@ad.func_grad``; ``ad.autograd.gradcheck`` compares the
backward of a kernel calling it with central differences. Then the rule for ``y`` is
broken on purpose (the factor 4 forgotten) and gradcheck must name ``y`` -- the input
whose partial is wrong -- and leave ``x`` alone. Change ``wrong_rule`` to break ``x``
instead and run it again.
"""
import math

import numpy as np

import adjoint as ad


@ad.func
def scaled_hypot(x: float, y: float) -> float:
    return math.sqrt(x * x + 4.0 * y * y)


@ad.func_grad(scaled_hypot)
def scaled_hypot_grad(x: float, y: float, adj_ret: float):
    r = math.sqrt(x * x + 4.0 * y * y)
    return adj_ret * x / r, adj_ret * 4.0 * y / r          # (adj_x, adj_y)


@ad.func
def broken_hypot(x: float, y: float) -> float:
    return math.sqrt(x * x + 4.0 * y * y)


@ad.func_grad(broken_hypot)
def broken_hypot_grad(x: float, y: float, adj_ret: float):
    r = math.sqrt(x * x + 4.0 * y * y)
    return adj_ret * x / r, adj_ret * y / r                # the bug: 4 forgotten in adj_y


@ad.kernel
def good(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = scaled_hypot(x[i], y[i])


@ad.kernel
def broken(x: ad.array(dtype=float), y: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    out[i] = broken_hypot(x[i], y[i])


def arrays(n=4):
    rng = np.random.default_rng(0)
    return (ad.array(rng.uniform(0.5, 2.0, n)), ad.array(rng.uniform(0.5, 2.0, n)),
            ad.zeros(n))


def main():
    x, y, out = arrays()
    ok = ad.autograd.gradcheck(good, len(x), [x, y], [out])
    print(f"the correct rule: gradcheck passed: {ok}")
    x, y, out = arrays()
    try:
        ad.autograd.gradcheck(broken, len(x), [x, y], [out])
    except ad.autograd.GradcheckError as e:
        message = str(e)
    else:
        raise SystemExit("the broken rule passed gradcheck: the check is not checking")
    print("the broken rule: gradcheck says")
    print("    " + message.replace("\n", "\n    "))
    named_y = "d out/d y: 4 of 16 entries wrong" in message
    named_x = "d out/d x agrees" not in message
    print(f"gradcheck names the wrong partial (y): {named_y}; leaves x alone: {not named_x}")
    if ok and named_y and not named_x:
        print("all checks passed")
    else:
        raise SystemExit("a check failed")


if __name__ == "__main__":
    main()
