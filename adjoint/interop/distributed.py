"""Gradient sweeps on a Dask cluster: the same gradient at many inputs, one tape per item.

    from adjoint.distributed import map_gradients, sum_gradients
    results = map_gradients(fn, items)                  # a LocalCluster sized to this machine
    results = map_gradients(fn, items, client="tcp://scheduler:8786")   # a running cluster

``fn(item)`` launches kernels and returns ``(loss, {name: array})``: the one-element
loss array and the arrays whose gradients are wanted. Each call runs on a worker inside
a tape that map_gradients opens there; the tape never leaves the worker, only the
items, the losses and the gradients travel. ``map_gradients`` returns one
``ItemGradient(loss, grads)`` per item, in input order; ``sum_gradients`` adds them
pairwise on the cluster and returns only the sum. ``item_gradient`` is the same work in
this process (the serial reference; the results are bit-identical).

Dask does the rest (``client.map``, reruns of a dead worker's items, a tree of
``client.submit`` for the sum); adjoint adds no scheduler of its own.

* With no client, ``local_cluster()`` starts one worker process per core, one thread
  each, and every task sets numba's thread count to 1 (``numba.set_num_threads``).
  ``NUMBA_NUM_THREADS`` is not lowered: the runtime splits privatized accumulations
  into that many chunks (``backend_numba.MAX_CHUNKS``), so another value would round
  otherwise. Given a client, numba's threads are left alone unless ``numba_threads`` says.
* An item whose ``fn`` raises: its exception carries a note naming the item's index,
  with the worker's traceback. ``errors="raise"`` raises the first such item's (by
  index) once all are done; ``errors="return"`` puts the exception in the item's slot.
* Generated modules (``adjoint generate``) import only ``adjoint.runtime``, so workers
  need adjoint and numba but neither gast nor astor (``client.upload_file``).

Needs the extra ``adjoint[dask]``. See docs/distributed.md.
"""
import concurrent.futures
import contextlib
import os
from typing import NamedTuple

import numba
import numpy as np

try:
    import distributed
except ImportError as exc:          # pragma: no cover - the optional extra is missing
    raise ImportError("adjoint.distributed needs Dask: pip install 'adjoint[dask]' "
                      "(dask and distributed)") from exc

from ..errors import AdjointError
from ..runtime.array import Array
from ..runtime.tape import Tape

__all__ = ["ItemGradient", "item_gradient", "map_gradients", "sum_gradients", "tree_sum",
           "local_cluster"]

ERRORS = ("raise", "return")


class ItemGradient(NamedTuple):
    """One item's result: the loss (a numpy scalar of the loss array's dtype) and
    ``{name: gradient ndarray}``. A tuple, so ``loss, grads = result`` works."""
    loss: np.generic
    grads: dict


def item_gradient(fn, item):
    """``fn(item)`` on a fresh tape, its backward from the loss, the gradients read back:
    what a worker computes for one item, here in this process."""
    tape = Tape()
    with tape:
        returned = fn(item)
    loss, arrays = _unpack(returned)
    tape.backward(loss=loss)
    grads = {}
    for name, arr in arrays.items():
        if arr.grad is None:
            raise AdjointError(f"map_gradients: fn's array {name!r} has no gradient "
                               f"(create it with requires_grad=True)")
        grads[name] = np.array(arr.grad.numpy(), copy=True)
    return ItemGradient(loss.numpy().reshape(-1)[0], grads)


def _unpack(returned):
    """fn's ``(loss, {name: array})``, checked."""
    if not (isinstance(returned, tuple) and len(returned) == 2):
        raise AdjointError(f"map_gradients: fn must return (loss, {{name: array}}), "
                           f"not {type(returned).__name__}")
    loss, arrays = returned
    if not isinstance(loss, Array) or loss.size != 1:
        raise AdjointError("map_gradients: fn's loss must be a one-element adjoint array, "
                           f"not {loss!r:.80}")
    if not isinstance(arrays, dict) or not all(isinstance(a, Array) for a in arrays.values()):
        raise AdjointError("map_gradients: fn's second result must be {name: adjoint array}")
    return loss, arrays


def add_gradients(a, b):
    """The sum of two ``ItemGradient``s (losses and each named gradient)."""
    if a.grads.keys() != b.grads.keys():
        raise AdjointError(f"sum_gradients: items name different arrays: "
                           f"{sorted(a.grads)} and {sorted(b.grads)}")
    return ItemGradient(a.loss + b.loss, {name: a.grads[name] + b.grads[name]
                                          for name in a.grads})


def tree_sum(results):
    """Results added in pairs of neighbours, level by level (``[a, b, c] -> [a+b, c] ->
    [(a+b)+c]``): the order ``sum_gradients`` adds in on the cluster, so this gives its
    answer bit for bit from ``map_gradients``' or ``item_gradient``'s results."""
    level = list(results)
    if not level:
        raise AdjointError("sum_gradients: no items")
    while len(level) > 1:
        level = [add_gradients(level[k], level[k + 1]) if k + 1 < len(level) else level[k]
                 for k in range(0, len(level), 2)]
    return level[0]


def _worker_item(fn, index, item, numba_threads):
    """A task: one item on a worker; its exception gets a note naming the item."""
    if numba_threads is not None:
        numba.set_num_threads(min(numba_threads, numba.config.NUMBA_NUM_THREADS))
    try:
        return item_gradient(fn, item)
    except BaseException as exc:
        _add_note(exc, f"map_gradients: fn raised this on item {index} ({_short(item)}) "
                       f"on worker {distributed.get_worker().address}")
        raise


def _add_note(exc, text):
    """``exc.add_note(text)`` (Python 3.11+); before, the note is only stored."""
    if hasattr(exc, "add_note"):
        exc.add_note(text)
    else:                            # pragma: no cover - Python 3.10
        exc.__notes__ = [*getattr(exc, "__notes__", []), text]


def _short(item):
    text = " ".join(repr(item).split())
    return text if len(text) <= 60 else text[:57] + "..."


def local_cluster(n_workers=None, **kwargs):
    """A ``distributed.LocalCluster`` of ``n_workers`` processes (default: one per core
    this process may use), one thread each, its HTTP server (the dashboard, where bokeh
    is installed) on a free port; ``kwargs`` go to LocalCluster.
    Start one and pass ``Client(cluster)`` to many calls to pay its start-up once."""
    if n_workers is None:
        n_workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count() or 1
    options = dict(n_workers=n_workers, threads_per_worker=1, processes=True,
                   dashboard_address=":0")
    options.update(kwargs)
    return distributed.LocalCluster(**options)


@contextlib.contextmanager
def _connected(client, numba_threads):
    """``(client, numba threads per task)``: the client given, one to the cluster or the
    address given, or one to a ``local_cluster()`` started here; what was started here
    is closed after (a cluster given stays up)."""
    if isinstance(client, distributed.Client):
        yield client, numba_threads
    elif isinstance(client, str) or hasattr(client, "scheduler_address"):   # or a cluster
        with distributed.Client(client) as connected:
            yield connected, numba_threads
    elif client is None:
        with local_cluster() as cluster, distributed.Client(cluster) as connected:
            yield connected, 1 if numba_threads is None else numba_threads
    else:
        raise AdjointError(f"map_gradients: client must be a distributed.Client, a "
                           f"cluster, a scheduler address or None, not "
                           f"{type(client).__name__}")


def _submit_items(client, fn, items, numba_threads):
    return client.map(_worker_item, [fn] * len(items), range(len(items)), items,
                      [numba_threads] * len(items), pure=False)


def map_gradients(fn, items, client=None, errors="raise", numba_threads=None):
    """``[ItemGradient(loss, {name: gradient}), ...]``, one per item in input order, each
    computed on a worker as ``item_gradient(fn, item)`` computes it here.

    ``client``: a ``distributed.Client``, a cluster (``LocalCluster``, dask-jobqueue's
    ``SLURMCluster``, ...), a scheduler address, or None (a ``local_cluster()`` for
    this call). ``errors="return"``: an item whose fn raised
    holds its exception instead. ``numba_threads``: numba's threads per task (default:
    1 on the cluster started here, unchanged on yours)."""
    if errors not in ERRORS:
        raise AdjointError(f"map_gradients: errors must be one of {ERRORS}, not {errors!r}")
    items = list(items)
    with _connected(client, numba_threads) as (connected, threads):
        futures = _submit_items(connected, fn, items, threads)
        distributed.wait(futures)
        done = [f for f in futures if f.status == "finished"]
        values = iter(connected.gather(done))
        results = [next(values) if f.status == "finished" else _failure(f) for f in futures]
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed and errors == "raise":
        raise failed[0]
    return results


def _failure(future):
    """The exception a failed task raised, with the worker's traceback from the user's
    frames on (the frames of this module are left out)."""
    if future.status != "error":         # cancelled, or lost with its cluster
        return concurrent.futures.CancelledError(f"task {future.key} was {future.status}")
    exc, tb = future.exception(), future.traceback()
    while tb is not None and tb.tb_frame.f_globals.get("__name__") == __name__:
        tb = tb.tb_next
    return exc.with_traceback(tb)


def sum_gradients(fn, items, client=None, numba_threads=None):
    """``ItemGradient(total loss, {name: summed gradient})`` over the items, added on the
    cluster in ``tree_sum``'s order (pairs of neighbours, level by level) with
    ``client.submit``: only the sum comes back. An item's exception is raised as in
    ``map_gradients`` (if several raise, whichever the cluster met first)."""
    items = list(items)
    if not items:
        raise AdjointError("sum_gradients: no items")
    with _connected(client, numba_threads) as (connected, threads):
        level = _submit_items(connected, fn, items, threads)
        while len(level) > 1:
            level = [connected.submit(add_gradients, level[k], level[k + 1], pure=False)
                     if k + 1 < len(level) else level[k] for k in range(0, len(level), 2)]
        distributed.wait(level)
        if level[0].status != "finished":
            raise _failure(level[0])
        return level[0].result()
