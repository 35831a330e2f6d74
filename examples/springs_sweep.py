"""A gradient sweep on Dask: the rest-length gradient of 64 spring-chain calibrations.

Each item is one calibration of ``springs.py``'s hanging chain against its own measured
shape (chains whose true rest lengths differ in amplitude and phase); ``calibrate``
simulates the chain from the first guess and returns the shape loss and the rest
lengths, and ``adjoint.distributed.map_gradients`` runs the items on a Dask cluster,
one tape per item on a worker, and hands back each loss and gradient in input order.
The kernels come from the committed gradient module ``springs_grad.py``: the workers
need adjoint's runtime and numba, not the transformer. With ``--scheduler`` the script
uploads ``springs_grad.py`` and the modules that import it to the workers
(``client.upload_file``); a LocalCluster's workers find them on this process's path.

Run:  python examples/springs_sweep.py [--items 64] [--steps 100] [--scheduler ADDRESS]
      [--serial]   (also time the same items in this process, and compare)
"""
import argparse
import contextlib
import os
import sys
import time

import numpy as np
from distributed import Client

import adjoint as ad
from adjoint.distributed import item_gradient, local_cluster, map_gradients, sum_gradients

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import springs  # noqa: E402  (make_chain, simulate: the kernels of springs_grad.py)


def make_items(n_items, steps):
    """``n_items`` calibrations: a measured shape each (simulated from true rest lengths
    of their own), the first guess and the number of time steps."""
    x0, ends, pinned = springs.make_chain()
    span = (ends[:, 1] - ends[:, 0]) * 0.8
    middle = 0.5 * (ends[:, 0] + ends[:, 1]) / (springs.N - 1)
    items = []
    for k in range(n_items):
        amplitude, phase = 0.1 + 0.3 * k / max(n_items - 1, 1), 0.37 * k
        true_rest = span * (1.0 + amplitude * np.sin(2.0 * np.pi * middle + phase))
        target = springs.simulate(ad.array(true_rest), x0, ends, pinned, steps).numpy()
        items.append({"target": target, "guess": span.copy(), "steps": steps})
    return items


def calibrate(item):
    """One calibration's loss and the rest lengths whose gradient is wanted (runs on a
    worker, inside the tape map_gradients opens there)."""
    x0, ends, pinned = springs.make_chain()
    rest = ad.array(item["guess"], requires_grad=True)
    loss = ad.zeros(1, requires_grad=True)
    springs.simulate(rest, x0, ends, pinned, item["steps"], ad.array(item["target"]), loss)
    return loss, {"rest": rest}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=64, help="calibrations")
    p.add_argument("--steps", type=int, default=100, help="time steps per simulation")
    p.add_argument("--scheduler", default=None,
                   help="a running Dask scheduler's address (default: a LocalCluster)")
    p.add_argument("--serial", action="store_true",
                   help="also run the items in this process, timed, and compare")
    args = p.parse_args(argv)

    items = make_items(args.items, args.steps)
    item_gradient(calibrate, items[0])            # compile (or load) the kernels here
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if args.scheduler is None:                # one LocalCluster for both sweeps
            cluster = stack.enter_context(local_cluster())
            client = stack.enter_context(Client(cluster))
        else:                                     # ship the modules calibrate imports
            client = stack.enter_context(Client(args.scheduler))
            for name in ("springs_grad.py", "_common.py", "springs.py"):
                client.upload_file(os.path.join(HERE, name))
        workers = len(client.scheduler_info()["workers"])
        print(f"{workers} workers ready in {time.perf_counter() - start:.2f} s")
        map_gradients(calibrate, items[:workers], client=client)   # warm every worker
        start = time.perf_counter()
        results = map_gradients(calibrate, items, client=client)
        parallel = time.perf_counter() - start
        print(f"{len(items)} gradients on {workers} workers in {parallel:.2f} s")
        total = sum_gradients(calibrate, items, client=client)
    for k in (0, len(items) - 1):
        loss, grads = results[k]
        print(f"item {k:3d}  loss {loss:.6f}  |d loss / d rest| {np.linalg.norm(grads['rest']):.6f}")
    print(f"sum of the losses {total.loss:.6f} (added on the cluster)")

    if args.serial:
        start = time.perf_counter()
        serial = [item_gradient(calibrate, item) for item in items]
        elapsed = time.perf_counter() - start
        same = all(a.loss == b.loss and np.array_equal(a.grads["rest"], b.grads["rest"])
                   for a, b in zip(results, serial))
        print(f"serially in this process in {elapsed:.2f} s; bit-identical: {same}; "
              f"speedup {elapsed / parallel:.2f}x")
    return results


if __name__ == "__main__":
    main()
