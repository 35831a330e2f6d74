"""Exercise 3: the cost of forward and reverse mode on a Jacobian of growing size.

``spread`` maps ``n`` inputs to ``m`` outputs, every output reading every input. Forward
mode builds the Jacobian a column at a time, one JVP launch per input: ``n`` launches.
Reverse mode builds it a row at a time, one backward launch per output: ``m`` launches.
So a wide Jacobian (few outputs: a loss) wants reverse mode and a tall one (few inputs)
wants forward mode. The script times both on a wide family (``m = 2``, ``n`` growing) and
a tall one (``n = 2``, ``m`` growing), checks that the two Jacobians agree and counts the
launches, prints a table, and saves ``jacobian_cost.png`` when matplotlib is installed
(``pip install adjoint[plot]``; the table needs nothing). Timings vary by machine; the
launch counts do not.

Run:  python examples/teaching/jacobian_cost.py [--sizes 2 4 8 16 32] [--plot FILE.png]
      [--no-plot]
"""
import argparse
import math
import time

import numpy as np

import adjoint as ad


@ad.kernel
def spread(n: int, x: ad.array(dtype=float), out: ad.array(dtype=float)):
    i = ad.tid()
    s = 0.0
    for k in range(n):
        s = s + math.sin(x[k] * float(i + 1)) * x[k]
    out[i] = s


def by_forward(xs, m):
    """Columns from JVPs: (Jacobian, launches)."""
    J = np.zeros((m, len(xs)))
    for j, e in enumerate(np.eye(len(xs))):
        dots = ad.launch(spread, dim=m, inputs=[len(xs), xs.copy()], outputs=[np.zeros(m)],
                         tangents={"x": e.copy()})
        J[:, j] = dots["out"]
    return J, len(xs)


def by_reverse(xs, m):
    """Rows from backward launches: (Jacobian, launches)."""
    J = np.zeros((m, len(xs)))
    for i, e in enumerate(np.eye(m)):
        adj_x = np.zeros(len(xs))
        ad.launch(spread, dim=m, inputs=[len(xs), xs.copy()], outputs=[np.zeros(m)],
                  adjoint=True, adj_inputs=[None, adj_x], adj_outputs=[e.copy()])
        J[i, :] = adj_x
    return J, m


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def measure(sizes):
    """[(family, n, m, forward launches, reverse launches, forward s, reverse s, agree)]."""
    rows = []
    by_forward(np.ones(2), 2)       # compile once before timing
    by_reverse(np.ones(2), 2)
    for family in ("wide", "tall"):
        for size in sizes:
            n, m = (size, 2) if family == "wide" else (2, size)
            xs = np.linspace(0.1, 1.0, n)
            (jf, lf), tf = timed(by_forward, xs, m)
            (jr, lr), tr = timed(by_reverse, xs, m)
            rows.append((family, n, m, lf, lr, tf, tr, bool(np.allclose(jf, jr, atol=1e-12))))
    return rows


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install adjoint[plot])")
        return
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, family, size_of in ((axes[0], "wide", 1), (axes[1], "tall", 2)):
        mine = [r for r in rows if r[0] == family]
        sizes = [r[size_of] for r in mine]
        ax.plot(sizes, [r[5] * 1e3 for r in mine], "o-", label="forward (n JVPs)")
        ax.plot(sizes, [r[6] * 1e3 for r in mine], "s-", label="reverse (m VJPs)")
        ax.set_xlabel("inputs n (m = 2)" if family == "wide" else "outputs m (n = 2)")
        ax.set_ylabel("ms")
        ax.set_title(f"{family} Jacobian")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    print(f"saved {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    p.add_argument("--plot", default="jacobian_cost.png", help="where to save the plot")
    p.add_argument("--no-plot", action="store_true", help="the table alone")
    args = p.parse_args(argv)
    rows = measure(args.sizes)
    print(f"{'shape':<6} {'n':>4} {'m':>4} {'JVPs':>5} {'VJPs':>5} {'forward ms':>11} "
          f"{'reverse ms':>11}  agree")
    for family, n, m, lf, lr, tf, tr, agree in rows:
        print(f"{family:<6} {n:>4} {m:>4} {lf:>5} {lr:>5} {tf * 1e3:>11.2f} {tr * 1e3:>11.2f}"
              f"  {agree}")
    counts = all(lf == n and lr == m for _, n, m, lf, lr, *_ in rows)
    agree = all(r[-1] for r in rows)
    print(f"forward mode took n launches and reverse mode m: {counts}; "
          f"the two Jacobians agree: {agree}")
    if not args.no_plot:
        plot(rows, args.plot)
    if counts and agree:
        print("all checks passed")
    else:
        raise SystemExit("a check failed")


if __name__ == "__main__":
    main()
