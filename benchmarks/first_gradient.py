"""Child process for the cold/warm start measurement: one gradient, then exit.

    python -m benchmarks.first_gradient WORKLOAD SIZE
    python -m benchmarks.first_gradient numba-floor tiny    # one cached njit call, no adjoint

prints one JSON line: seconds from the start of this module to the end of the
first ``fwd_bwd`` (imports of numpy, numba and adjoint included) and the part
of that spent in imports.
"""
import time

T0 = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

import adjoint  # noqa: E402,F401


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
                          "import_s": t_import, "first_gradient_s": time.perf_counter() - T0}))
        return
    wl = load(name)
    problem = wl.make(np.random.default_rng(0), **wl.SIZES[size])
    system = wl.Adjoint(problem)
    system.fwd_bwd(problem.seed)
    _, grads = system.result()
    assert all(np.all(np.isfinite(g)) for g in grads.values())
    print(json.dumps({"workload": name, "size": size, "adjoint": adjoint.__file__,
                      "import_s": t_import,
                      "first_gradient_s": time.perf_counter() - T0}))


if __name__ == "__main__":
    main()
