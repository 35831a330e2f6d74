"""adjoint.distributed: gradient sweeps on a Dask LocalCluster (2 worker processes, one
for the module), checked bit for bit against the same items run in this process.

The workers cannot import gast or astor (a worker plugin blocks them, also on a worker
the nanny restarts), so every sweep here also shows that the committed gradient module
``examples/springs_grad.py`` runs where the transformer does not. The kernels run in the
workers, where tests/levels.py cannot watch them: the module is not rerun unoptimized.
"""
import functools
import importlib
import os
import signal
import sys
import time
import traceback

import numpy as np
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import adjoint as ad  # noqa: E402
from adjoint.distributed import (ItemGradient, add_gradients, item_gradient,  # noqa: E402
                                 local_cluster, map_gradients, sum_gradients, tree_sum)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, EXAMPLES)            # before the workers start: they inherit sys.path
import springs_sweep  # noqa: E402

pytestmark = pytest.mark.levels_skip("the kernels run in Dask's worker processes")

STEPS = 12


class BlockTransformer(distributed.WorkerPlugin):
    """On every worker (also one started later): importing gast or astor raises."""

    def setup(self, worker):
        for name in ("gast", "astor"):
            sys.modules[name] = None


@pytest.fixture(scope="module")
def client():
    with local_cluster(n_workers=2) as cluster, distributed.Client(cluster) as connected:
        connected.register_plugin(BlockTransformer())
        yield connected


@pytest.fixture(scope="module")
def items():
    return springs_sweep.make_items(6, STEPS)


@pytest.fixture(scope="module")
def serial(items):
    return [item_gradient(springs_sweep.calibrate, item) for item in items]


def assert_identical(results, expected):
    assert len(results) == len(expected)
    for got, want in zip(results, expected):
        assert isinstance(got, ItemGradient)
        assert got.loss == want.loss and got.loss.dtype == want.loss.dtype
        assert got.grads.keys() == want.grads.keys()
        for name in want.grads:
            assert type(got.grads[name]) is np.ndarray
            np.testing.assert_array_equal(got.grads[name], want.grads[name])


def test_map_gradients_is_bit_identical_to_serial_and_in_order(client, items, serial):
    results = map_gradients(springs_sweep.calibrate, items, client=client, numba_threads=1)
    assert_identical(results, serial)
    assert len({float(r.loss) for r in results}) == len(items)   # distinct items, in order


def test_sum_gradients_adds_on_the_cluster_in_tree_order(client, items, serial):
    total = sum_gradients(springs_sweep.calibrate, items, client=client)
    assert_identical([total], [tree_sum(serial)])
    np.testing.assert_allclose(total.grads["rest"], sum(r.grads["rest"] for r in serial),
                               rtol=1e-12)


def test_tree_sum_pairs_neighbours():
    one = [ItemGradient(np.float64(v), {"g": np.array([v])}) for v in (1e16, 1.0, -1e16, 1.0)]
    # ((1e16 + 1) + (-1e16 + 1)) = 0 in float64, where a left-to-right sum gives 1
    assert tree_sum(one).loss == (1e16 + 1.0) + (-1e16 + 1.0) == 0.0
    assert sum(r.loss for r in one) == 1.0
    np.testing.assert_array_equal(tree_sum(one).grads["g"], [0.0])
    assert tree_sum(one[:3]).loss == (1e16 + 1.0) + -1e16


def test_a_scheduler_address_or_a_cluster_works_like_a_client(client, items, serial):
    results = map_gradients(springs_sweep.calibrate, items[:2], client=client.scheduler.address)
    assert_identical(results, serial[:2])
    results = map_gradients(springs_sweep.calibrate, items[2:3], client=client.cluster)
    assert_identical(results, serial[2:3])
    assert client.cluster.status.name == "running"
    with pytest.raises(ad.AdjointError, match="client must be"):
        map_gradients(springs_sweep.calibrate, items[:1], client=2)


def failing(item):
    if item["fail"]:
        raise ValueError(f"no calibration for amplitude {item['k']}")
    return springs_sweep.calibrate(item)


def failing_items(items):
    return [dict(item, k=k, fail=k == 3) for k, item in enumerate(items)]


def test_an_items_exception_names_it_and_keeps_the_workers_traceback(client, items):
    with pytest.raises(ValueError, match="amplitude 3") as info:
        map_gradients(failing, failing_items(items), client=client)
    notes = getattr(info.value, "__notes__", [])
    assert any("item 3" in note for note in notes), notes
    frames = traceback.extract_tb(info.value.__traceback__)
    names = [f.name for f in frames]
    assert "failing" in names
    assert not any(os.sep + "distributed" + os.sep in f.filename for f in frames), frames
    assert "_worker_item" not in names and "item_gradient" not in names


def test_errors_return_keeps_the_other_results(client, items, serial):
    results = map_gradients(failing, failing_items(items), client=client, errors="return")
    assert isinstance(results[3], ValueError)
    assert_identical(results[:3] + results[4:], serial[:3] + serial[4:])
    with pytest.raises(ValueError, match="amplitude 3"):
        sum_gradients(failing, failing_items(items), client=client)


def checked(item):
    """calibrate, on a worker that must not be able to import the transformer's parser
    (``absent``), and where numba and the cluster have the threads and workers named."""
    for name in item.get("absent", ()):
        try:
            __import__(name)
        except ImportError:
            continue
        raise AssertionError(f"{name} imported on the worker")
    import numba
    worker = distributed.get_worker()
    found = {"threads": numba.get_num_threads(), "nthreads": worker.state.nthreads,
             "workers": len(distributed.get_client().scheduler_info()["workers"])
             if "workers" in item else None}
    for key in ("threads", "nthreads", "workers"):
        if key in item and found[key] != item[key]:
            raise AssertionError(f"{key}: {found[key]} on the worker, not {item[key]}")
    return springs_sweep.calibrate(item)


def test_workers_run_the_generated_module_without_the_transformer(client, items, serial):
    results = map_gradients(checked, [dict(items[0], absent=("gast", "astor"), threads=1)],
                            client=client, numba_threads=1)
    assert_identical(results, serial[:1])


def test_no_client_starts_a_local_cluster_of_one_thread_workers(items, serial):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    results = map_gradients(checked, [dict(items[1], threads=1, nthreads=1, workers=cores)])
    assert_identical(results, serial[1:2])


TINY = """\
import adjoint as ad


@ad.kernel
def half_squares(x: ad.array(dtype=float), loss: ad.array(dtype=float)):
    i = ad.tid()
    ad.atomic_add(loss, 0, 0.5 * x[i] * x[i])
"""


def uploaded(item):
    """half_squares from the generated module the test uploaded (not on the workers' path)."""
    gen = importlib.import_module(item["module"])
    x = ad.array(item["x"], requires_grad=True)
    loss = ad.zeros(1, requires_grad=True)
    ad.launch(gen.half_squares, dim=len(item["x"]), inputs=[x], outputs=[loss])
    return loss, {"x": x}


def test_an_uploaded_generated_module_runs_on_the_workers(client, tmp_path, monkeypatch):
    (tmp_path / "tiny_kernels.py").write_text(TINY)
    module = "adjoint_test_tiny_grad"
    (tmp_path / f"{module}.py").write_text(ad.generate(str(tmp_path / "tiny_kernels.py")))
    client.upload_file(str(tmp_path / f"{module}.py"))
    items = [{"module": module, "x": np.linspace(-1.0, 1.0, 5) * k} for k in (1, 2, 3)]
    results = map_gradients(uploaded, items, client=client)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert_identical(results, [item_gradient(uploaded, item) for item in items])
    for result, item in zip(results, items):
        np.testing.assert_array_equal(result.grads["x"], item["x"])


def killed_once(marker, item):
    """calibrate; the first time it meets item 2, its worker process is killed."""
    if item["k"] == 2 and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return springs_sweep.calibrate(item)


def test_a_killed_worker_is_retried_and_the_results_are_complete(client, items, serial,
                                                                 tmp_path):
    marker = str(tmp_path / "killed")
    start = time.perf_counter()
    results = map_gradients(functools.partial(killed_once, marker),
                            [dict(item, k=k) for k, item in enumerate(items)], client=client)
    assert os.path.exists(marker)
    assert_identical(results, serial)
    assert time.perf_counter() - start < 60
    client.wait_for_workers(2, timeout=60)


def test_fn_must_return_a_loss_and_named_arrays():
    with pytest.raises(ad.AdjointError, match="must return"):
        item_gradient(lambda item: ad.zeros(1), None)
    with pytest.raises(ad.AdjointError, match="one-element"):
        item_gradient(lambda item: (ad.zeros(2), {}), None)
    with pytest.raises(ad.AdjointError, match="requires_grad"):
        item_gradient(lambda item: (ad.zeros(1, requires_grad=True), {"x": ad.zeros(2)}), None)
    with pytest.raises(ad.AdjointError, match="errors must be"):
        map_gradients(failing, [], errors="skip")
    with pytest.raises(ad.AdjointError, match="different arrays"):
        add_gradients(ItemGradient(np.float64(1), {"a": np.ones(1)}),
                      ItemGradient(np.float64(1), {"b": np.ones(1)}))
    with pytest.raises(ad.AdjointError, match="no items"):
        tree_sum([])
