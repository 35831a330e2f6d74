"""Child process for the cold/warm start measurement: one gradient, then exit.

    python -m benchmarks.first_gradient WORKLOAD SIZE
    python -m benchmarks.first_gradient numba-floor tiny    # one cached njit call, no adjoint

prints one JSON line: seconds from the start of this module to the end of the
first ``fwd_bwd`` (imports of numpy, numba and adjoint included), the part of
that spent in imports, and the seconds numba spent compiling, per compiled
function (``compile_s``: numba's ``numba:compile`` events, outermost ones only,
so a function inlined into another counts in that one; a function loaded from
numba's on-disk cache is not compiled and does not appear).
"""
import time

T0 = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from numba.core import event  # noqa: E402

import adjoint  # noqa: E402,F401


def compile_seconds(records):
    """{function name: seconds} of the outermost compilations in ``records`` (a numba
    event recorder's buffer of (time, Event))."""
    out, stack = {}, []
    for t, ev in records:
        if ev.is_start:
            stack.append(t)
            continue
        start = stack.pop()
        if not stack:
            fn = ev.data["dispatcher"].py_func
            out[fn.__name__] = out.get(fn.__name__, 0.0) + (t - start)
    return out


def main():
    from .workloads import load
    name, size = sys.argv[1], sys.argv[2]
    t_import = time.perf_counter() - T0
    if name == "numba-floor":
        # the floor: a hand-written njit(cache=True) function, no adjoint involved
        from .workloads.elementwise import _fwd_ser
        x = np.linspace(-1, 1, 64).astype(np.float32)
        _fwd_ser(x, np.zeros_like(x))
        print(json.dumps({"workload": name, "size": size, "adjoint": adjoint.__file__,
                          "import_s": t_import, "first_gradient_s": time.perf_counter() - T0,
                          "compile_s": {}}))
        return
    wl = load(name)
    problem = wl.make(np.random.default_rng(0), **wl.SIZES[size])
    with event.install_recorder("numba:compile") as rec:
        system = wl.SYSTEMS["adjoint"](problem)
        system.fwd_bwd(problem.seed)
    _, grads = system.result()
    assert all(np.all(np.isfinite(g)) for g in grads.values())
    print(json.dumps({"workload": name, "size": size, "adjoint": adjoint.__file__,
                      "import_s": t_import,
                      "first_gradient_s": time.perf_counter() - T0,
                      "compile_s": compile_seconds(rec.buffer)}))


if __name__ == "__main__":
    main()
