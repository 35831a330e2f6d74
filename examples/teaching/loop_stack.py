"""Exercise 2: a loop whose gradient needs stored values, and the stack that keeps them.

``orbit(x, n)`` repeats ``s = s * x + sin(s)`` ``n`` times. The derivative of each
iteration needs the ``s`` it started from, but the loop overwrote it. The backward
therefore replays the loop once, pushing each iteration's ``s`` on a stack
(``rt.stack_push``), and reads it back (``loop0_s_1[loop0_iter]``) while it runs the
iterations in reverse. The script prints those lines of the generated backward, checks
that the gradient agrees with central differences, and that the stack holds the values
the forward computed. Try: make ``s`` not carried (``t = s * x + sin(s)`` with ``s``
unchanged) and see the stack disappear.
"""
import math

import adjoint as ad


@ad.func
def orbit(x: float, n: int) -> float:
    s = 0.5
    for k in range(n):
        s = s * x + math.sin(s)
    return s


def main(n=5, x=0.8):
    code = ad.source(orbit, "backward", optimize=False)
    stack_lines = [line for line in code.splitlines() if ("stack" in line or "loop0_s" in line)
                   and not line.strip().startswith("#")]
    print("the lines of the generated backward that keep and read the stack:")
    for line in stack_lines:
        print("   ", line.strip())
    has_stack = any("stack_push" in line for line in stack_lines) and \
        any("[loop0_iter]" in line for line in stack_lines)
    # the values the forward computed, iteration by iteration
    s, forward = 0.5, []
    for _ in range(n):
        forward.append(s)
        s = s * x + math.sin(s)
    trace = ad.evaluation_trace(orbit, x, n, max_iterations=n)
    pushed = [r.value for r in trace.all_rows if r.phase == "replay"
              and r.variable == "loop0_s_1"]
    stored = [float(v) for v in pushed[-1][:n]] if pushed else []
    same = len(stored) == n and all(abs(a - b) <= 1e-15 for a, b in zip(stored, forward))
    print("the stack after the replay:", ", ".join(f"{v:.6f}" for v in stored))
    print("the forward's s, iteration by iteration:", ", ".join(f"{v:.6f}" for v in forward))
    g = ad.grad(orbit)(x, n)
    h = 1e-6
    fd = (orbit.pyfunc(x + h, n) - orbit.pyfunc(x - h, n)) / (2 * h)
    close = abs(g - fd) <= 1e-6 * max(1.0, abs(fd))
    print(f"d orbit/dx = {g:.9f}; central differences {fd:.9f}")
    print(f"stack in the backward: {has_stack}; stack holds the forward's values: {same}; "
          f"gradient matches finite differences: {close}")
    if has_stack and same and close:
        print("all checks passed")
    else:
        raise SystemExit("a check failed")


if __name__ == "__main__":
    main()
