"""Clean device memory (runtime/watch.py): a write forgets every clean allocation it
overlaps, found by bisecting the clean spans' sorted first bytes, and nothing else.

Real device arrays are named by their device pointer, which numba's simulator does not
have (it holds numpy arrays, named as host memory): these tests use stand-ins exposing
``__cuda_array_interface__``, as a real device array does, on any machine, and compare
with a model that checks every clean span against every write.
"""

import numpy as np

from adjoint.runtime import buffers, watch


class Device:
    """A stand-in for a device array of ``n`` float32 at address ``ptr`` (the CUDA device
    of runtime/devices.py holds what has numba's two copy methods)."""
    copy_to_host = copy_to_device = None

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (n,),
                                         "typestr": "<f4", "version": 3}
        self.shape, self.size, self.dtype = (n,), n, np.dtype(np.float32)


def _clean_everything_forgotten():
    for buf in list(watch._clean.values()):
        owner = buf()
        if owner is not None:
            watch.mark_dirty(owner)


def test_a_write_forgets_the_clean_spans_it_overlaps_and_no_other():
    a, b, c = Device(1000, 250), Device(3000, 500), Device(6000, 25)   # bytes [start, +4n)
    long = Device(100_000, 10_000)
    for buf in (a, b, c, long):
        watch.mark_clean(buf)
        assert watch.is_clean(buf)
    watch.before_write(Device(4000, 25), "a view inside b")
    assert not watch.is_clean(b) and watch.is_clean(a) and watch.is_clean(c)
    watch.before_write(Device(1000, 250), "another object over all of a")
    assert not watch.is_clean(a) and watch.is_clean(c)
    watch.before_write(Device(5000, 250), "between b's end and c")
    assert watch.is_clean(c)
    watch.before_write(Device(139_990, 1), "the last bytes of a long span")
    assert not watch.is_clean(long) and watch.is_clean(c)
    watch.before_write(Device(6000, 0), "an empty buffer at c's first byte: c's own key")
    assert not watch.is_clean(c)
    assert buffers.device_span(a) == (1000, 2000)


def test_a_collected_owner_leaves_no_span_behind(no_gc):
    _clean_everything_forgotten()
    keep, d = Device(70_000, 10), Device(50_000, 10)
    watch.mark_clean(keep)
    watch.mark_clean(d)
    first = buffers.device_span(d)[0]
    del d                   # (freed at once: nothing else holds it)
    assert ("device", first) not in watch._spans
    watch.before_write(Device(50_000, 10), "memory reused")    # (its stale first byte goes)
    assert first not in watch._starts and watch.is_clean(keep)
    del keep
    assert watch._starts == [70_000] and not watch._spans     # (stale: collected)
    e = Device(90_000, 10)
    watch.mark_clean(e)          # (no span left clean: the stale first bytes all go)
    assert watch._starts == [90_000]
    watch.mark_dirty(e)


def test_against_a_model_checking_every_span():
    rng = np.random.default_rng(0)
    _clean_everything_forgotten()
    held, model = {}, {}        # first byte -> Device; first byte -> (start, end)
    for step in range(600):
        start = int(rng.integers(0, 200)) * 64
        n = int(rng.choice([0, 1, 16, 64, 400]))
        buf = Device(start, n)
        lo, hi = buffers.device_span(buf)
        if rng.random() < 0.5:
            held[start] = buf
            watch.mark_clean(buf)
            model[start] = (lo, hi)
        else:
            watch.before_write(buf, "a write")
            for first, (s, e) in list(model.items()):
                if s < hi and lo < e or first == start:
                    del model[first]
        for first, other in held.items():
            assert watch.is_clean(other) == (first in model), (step, first)
    _clean_everything_forgotten()


def test_host_keys_in_batches():
    """``before_writes``, ``clean_unwatched``, ``forget_clean`` and ``is_whole`` on host
    memory (a capture's replay announces its writes with the names of its binding)."""
    a, b = np.zeros(100), np.zeros(100)
    ka, kb = watch.memory_key(a), watch.memory_key(b)
    assert watch.memory_key(a[10:20]) == ka         # a view: named as its allocation
    assert watch.is_whole(a) and not watch.is_whole(a[10:20])
    watch.mark_clean(a)
    watch.mark_clean(b)
    assert watch.clean_unwatched([ka, kb]) == {ka, kb}
    watch.before_writes([a], [ka], "a test")
    assert not watch.is_clean(a) and watch.is_clean(b)
    watch.forget_clean([kb])
    assert not watch.is_clean(b)
    seen = []
    watch.mark_clean(a)
    with watch.observe_writes(lambda buf, writer: seen.append(writer)):
        assert watch.clean_unwatched([ka]) == set()     # (observed: nothing kept)
        watch.before_writes([a], [ka], "observed")
    assert seen == ["observed"] and not watch.is_clean(a)
