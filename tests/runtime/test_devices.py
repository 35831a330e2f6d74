"""A new kind of memory is one ``Device`` and ``devices.register`` (runtime/devices.py).

The device here is host memory under another name whose buffers are boxes (a type of
their own, so nothing can treat them as numpy arrays): arrays made on it, read back,
filled, zeroed, copied and added into between devices, given gradients and pickled all
go through its methods, and its log says which ran.
"""
import pickle

import numpy as np
import pytest

import adjoint as ad
from adjoint.runtime import buffers, devices


class Box:
    """A buffer of the boxed device: a numpy array inside."""

    def __init__(self, values):
        self.values = values

    shape = property(lambda self: self.values.shape)
    dtype = property(lambda self: self.values.dtype)
    size = property(lambda self: self.values.size)

    def reshape(self, *shape):
        return Box(self.values.reshape(*shape))

    def __getitem__(self, index):
        return Box(self.values[index])


class Boxed(devices.Device):
    name = "boxed"

    def __init__(self):
        self.log = []

    def holds(self, buf):
        return isinstance(buf, Box)

    def empty(self, shape, dtype):
        self.log.append("empty")
        return Box(np.empty(shape, dtype))

    def zeros(self, shape, dtype):
        self.log.append("zeros")
        return Box(np.zeros(shape, dtype))

    def from_host(self, values):
        self.log.append("from_host")
        return Box(np.array(values))

    def to_host(self, buf, why=None):
        self.log.append("to_host")
        return buf.values.copy()

    def write(self, dst, values):
        self.log.append("write")
        dst.values.reshape(-1)[...] = np.asarray(values).reshape(-1)

    def fill(self, buf, value):
        self.log.append("fill")
        buf.values[...] = value

    def copy(self, dst, src):
        self.log.append("copy")
        dst.values.reshape(-1)[...] = src.values.reshape(-1)

    def add(self, dst, src):
        self.log.append("add")
        dst.values += src.values.reshape(dst.values.shape)

    def wrap(self, obj):
        return obj if isinstance(obj, Box) else None

    def may_alias(self, a, b):
        return np.may_share_memory(a.values, b.values)

    def span(self, buf):
        start = buf.values.__array_interface__["data"][0]
        return start, start + buf.values.nbytes


@pytest.fixture
def boxed():
    dev = devices.register(Boxed())
    try:
        yield dev
    finally:
        devices.unregister("boxed")


def test_registered_device_is_named_and_holds_its_buffers(boxed):
    assert devices.named("boxed") is boxed
    assert devices.of(Box(np.zeros(2))) is boxed
    assert devices.of(np.zeros(2)) is devices.HOST
    with pytest.raises(ValueError, match="already registered"):
        devices.register(Boxed())
    with pytest.raises(ValueError, match="built in"):
        devices.unregister("cpu")
    with pytest.raises(ValueError, match=r"unknown device 'tape'; use 'cpu' or 'cuda' or 'boxed'"):
        devices.named("tape")


def test_arrays_on_the_device_go_through_its_methods(boxed):
    z = ad.zeros(3, device="boxed")
    assert boxed.log == ["zeros"] and isinstance(z.data, Box) and z.device == "boxed"
    a = ad.array([1.0, 2.0, 3.0], device="boxed")
    assert boxed.log[-1] == "from_host"
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0, 3.0])
    assert boxed.log[-1] == "to_host"
    a.fill_(4.0)
    assert boxed.log[-1] == "fill"
    np.testing.assert_array_equal(a.numpy(), 4.0)
    # copies and adds: on the device, and between it and the host
    buffers.copy_into(z.data, a.data)
    assert boxed.log[-1] == "copy"
    buffers.add_into(z.data, np.array([1.0, 2.0, 3.0]))
    assert boxed.log[-2:] == ["from_host", "add"]
    np.testing.assert_array_equal(z.numpy(), [5.0, 6.0, 7.0])
    host = np.zeros(3)
    buffers.copy_into(host, z.data)
    np.testing.assert_array_equal(host, [5.0, 6.0, 7.0])
    buffers.copy_into(z.data, np.array([0.5, 0.25, 0.125]))
    assert boxed.log[-1] == "write"
    np.testing.assert_array_equal(buffers.clone(z.data).values, [0.5, 0.25, 0.125])
    assert not buffers.may_alias(z.data, a.data) and buffers.may_alias(z.data, z.data[1:])
    assert not buffers.may_alias(z.data, host)


def test_gradients_and_pickles_stay_on_the_device(boxed):
    x = ad.array([1.0, 2.0], requires_grad=True, device="boxed")
    assert isinstance(x.grad.data, Box) and "zeros" in boxed.log
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)
    back = pickle.loads(pickle.dumps(x))
    assert back.device == "boxed" and isinstance(back.data, Box)
    assert back.data is not x.data
    np.testing.assert_array_equal(back.numpy(), [1.0, 2.0])


def test_a_device_missing_a_method_cannot_be_made():
    """``Device`` is abstract: a subclass that leaves out a method its buffers need is
    refused when made (naming the method), not when an array first needs it."""
    but_span = {k: v for k, v in vars(Boxed).items() if k != "span"}
    Partial = type("Partial", (devices.Device,), dict(but_span, name="partial"))
    with pytest.raises(TypeError, match="span"):
        Partial()
    Boxed()                     # defines every abstract method
    assert devices.Device.__abstractmethods__ >= {"holds", "empty", "to_host", "add", "span"}


def test_host_span_is_the_arrays_bytes():
    a = np.zeros((3, 4), np.float32)
    start, end = devices.HOST.span(a)
    assert start == a.ctypes.data and end - start == 48
    assert devices.HOST.span(a[1:]) == (a.ctypes.data + 16, a.ctypes.data + 48)


def test_once_per_buffer_forgets_a_collected_buffer():
    calls = []

    @devices.once_per_buffer
    def size(buf):
        calls.append(buf)
        return buf.values.size

    a, b = Box(np.zeros(3)), Box(np.zeros(5))
    assert (size(a), size(a), size(b)) == (3, 3, 5) and len(calls) == 2
    del a, calls[:]
    assert set(size.cache) == {id(b)}           # a is gone, and so is what it cached
    assert size(Box(np.ones(4))) == 4
