"""The release rule (docs/PYTHON.md "When a message is released") and the
zero-copy exports: a message's memory goes back to the publisher only when
the Message was released and every array made from it is gone; DLPack
capsules have the structure the specification asks for, and their deleter is
what gives the memory back."""
import ctypes
import gc
import threading

import pytest

import rgaps
from conftest import pool_used, wait_until

np = pytest.importorskip("numpy")


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = ctypes.c_void_p
PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
PyCapsule_GetName.restype = ctypes.c_char_p
PyCapsule_GetName.argtypes = [ctypes.py_object]
PyCapsule_SetName = ctypes.pythonapi.PyCapsule_SetName
PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


@pytest.fixture
def pubsub(topic):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        yield pub, sub


def send(pub, sub, a, **kw):
    pub.publish(a, **kw)
    return sub.take(timeout=5)


def test_with_block_releases(topic):
    sub = rgaps.Subscriber(topic)
    pub = rgaps.Publisher(topic)
    with send(pub, sub, np.arange(1000.0)) as msg:
        assert sub.held == 1 and pool_used(topic) > 0
    assert msg.released and sub.held == 0
    pub.close()  # its stream drains: read and released by everyone, so it goes
    wait_until(lambda: pool_used(topic) == 0, what="the pool to drain")
    sub.close()


def test_array_outlives_the_with_block(pubsub):
    pub, sub = pubsub
    a = np.arange(1000, dtype=np.int64)
    with send(pub, sub, a) as msg:
        b = np.asarray(msg)
    assert msg.released and sub.held == 1  # b still uses the memory
    assert np.array_equal(a, b)
    del b
    gc.collect()
    assert sub.held == 0


def test_arrays_made_after_release_are_refused(pubsub):
    pub, sub = pubsub
    msg = send(pub, sub, np.arange(10))
    msg.release()
    msg.release()  # twice is harmless
    with pytest.raises(BufferError, match="released"):
        np.asarray(msg)
    with pytest.raises(BufferError, match="released"):
        msg.__dlpack__()
    with pytest.raises(BufferError, match="released"):
        memoryview(msg)
    with pytest.raises(BufferError, match="released"):
        msg.ptr
    with pytest.raises(BufferError, match="released"):
        msg.raw()
    assert msg.seq == 0 and msg.shape == (10,)  # metadata stays readable


def test_garbage_collected_message_is_released(pubsub):
    pub, sub = pubsub
    for _ in range(3 * 64):  # more than the queue and max_holds: nothing may leak
        send(pub, sub, np.arange(100))
    assert sub.held == 0


def test_views_and_dlpack_each_keep_it(pubsub):
    pub, sub = pubsub
    msg = send(pub, sub, np.arange(12, dtype=np.float32).reshape(3, 4))
    mv = memoryview(msg)
    assert mv.format == "f" and mv.shape == (3, 4) and mv.readonly
    d = np.from_dlpack(msg)
    raw = msg.raw()
    msg.release()
    assert sub.held == 1
    del mv
    gc.collect()
    assert sub.held == 1
    assert np.array_equal(d, np.arange(12, dtype=np.float32).reshape(3, 4))
    del d
    gc.collect()
    assert sub.held == 1 and bytes(raw[:4]) == np.float32(0).tobytes()
    del raw
    gc.collect()
    assert sub.held == 0


def test_raw_address_pins_until_the_message_is_gone(pubsub):
    pub, sub = pubsub
    msg = send(pub, sub, np.arange(16, dtype=np.uint8))
    addr = msg.ptr
    cai = msg._cuda_array_interface()
    assert cai == {"shape": (16,), "typestr": "|u1", "data": (addr, True), "version": 3,
                   "strides": None, "stream": None}
    msg.release()
    assert sub.held == 1  # the address went out without a lifetime
    assert ctypes.string_at(addr, 16) == bytes(range(16))
    del msg
    gc.collect()
    assert sub.held == 0


def test_cuda_array_interface_is_for_gpu_topics_only(pubsub):
    pub, sub = pubsub
    with send(pub, sub, np.zeros(3)) as msg:
        assert not hasattr(msg, "__cuda_array_interface__")
        assert msg.__dlpack_device__() == (1, 0)
        cai = msg._cuda_array_interface()
        assert cai["typestr"] == "<f8" and cai["shape"] == (3,)
    with send(pub, sub, np.zeros((3, 4), np.int16, order="F")) as msg:
        assert msg._cuda_array_interface()["strides"] == (2, 6)


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_capsule_structure(pubsub, versioned):
    pub, sub = pubsub
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4).transpose(0, 2, 1)
    msg = send(pub, sub, a)
    kw = {"max_version": (1, 0)} if versioned else {}
    cap = msg.__dlpack__(**kw)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    assert PyCapsule_GetName(cap) == name
    ptr = PyCapsule_GetPointer(cap, name)
    if versioned:
        m = DLManagedTensorVersioned.from_address(ptr)
        assert (m.major, m.minor) == (1, 0)
        assert m.flags & 1  # DLPACK_FLAG_BITMASK_READ_ONLY: subscribers map read-only
        t = m.dl_tensor
    else:
        t = DLManagedTensor.from_address(ptr).dl_tensor
    assert t.data == msg.ptr and t.byte_offset == 0
    assert (t.device.device_type, t.device.device_id) == (1, 0)  # kDLCPU
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 32, 1)
    assert t.ndim == 3
    assert [t.shape[i] for i in range(3)] == [2, 4, 3]
    assert [t.strides[i] for i in range(3)] == [12, 1, 4]  # in elements
    del msg  # (its ptr went out: only its end lets go of that claim)
    gc.collect()
    assert sub.held == 1
    del cap  # never consumed: the capsule's destructor calls the deleter
    gc.collect()
    assert sub.held == 0


def test_consumed_capsule_is_released_by_its_deleter(pubsub):
    pub, sub = pubsub
    msg = send(pub, sub, np.arange(5, dtype=np.uint16))
    cap = msg.__dlpack__()
    ptr = PyCapsule_GetPointer(cap, b"dltensor")
    PyCapsule_SetName(cap, b"used_dltensor")  # as a consumer takes ownership
    del cap, msg
    gc.collect()
    assert sub.held == 1  # the consumer has not called the deleter yet
    m = DLManagedTensor.from_address(ptr)
    m.deleter(ctypes.pointer(m))
    assert sub.held == 0


def test_dlpack_keywords(pubsub):
    pub, sub = pubsub
    with send(pub, sub, np.zeros(2)) as msg:
        with pytest.raises(BufferError, match="in place"):
            msg.__dlpack__(dl_device=(2, 0))
        with pytest.raises(BufferError, match="copy=True"):
            msg.__dlpack__(copy=True)
        msg.__dlpack__(dl_device=(1, 0), copy=False, stream=None)
        msg.__dlpack__(None)  # stream positionally, as older consumers pass it
    gc.collect()
    assert sub.held == 0


def test_deleter_from_another_thread_while_take_waits(pubsub):
    """A consumer may free its array in any thread, while another thread
    blocks in take() on the same subscriber: the release must not wait for it."""
    pub, sub = pubsub
    msg = send(pub, sub, np.arange(100))
    cap = msg.__dlpack__()
    msg.release()
    got = []
    t = threading.Thread(target=lambda: got.append(sub.take(timeout=10)))
    t.start()
    ptr = PyCapsule_GetPointer(cap, b"dltensor")
    PyCapsule_SetName(cap, b"used_dltensor")
    m = DLManagedTensor.from_address(ptr)
    m.deleter(ctypes.pointer(m))
    wait_until(lambda: sub.held == 0, 5, "the release to be applied")
    pub.publish(np.arange(3))
    t.join(10)
    assert got and got[0].seq == 1


def test_max_holds_is_a_clear_error(daemon):
    with rgaps.Subscriber("holds") as sub, rgaps.Publisher("holds") as pub:
        arrays = []
        for i in range(5):
            pub.publish(np.full(8, i))
        for i in range(4):
            with sub.take(timeout=5) as m:
                arrays.append(np.asarray(m))
        with pytest.raises(rgaps.Error, match="max_holds") as e:
            sub.take(timeout=1)
        assert e.value.errno == 105  # ENOBUFS
        arrays.pop(0)
        gc.collect()
        with sub.take(timeout=5) as m:
            assert m.seq == 4


def test_close_with_arrays_alive_keeps_them_valid(topic):
    pub = rgaps.Publisher(topic)
    sub = rgaps.Subscriber(topic)
    pub.publish(np.arange(1 << 16, dtype=np.int64))
    with sub.take(timeout=5) as msg:
        a = np.asarray(msg)
        d = np.from_dlpack(msg)
    sub.close()
    assert sub.closed
    with pytest.raises(ValueError, match="closed"):
        sub.take(0)
    assert a[-1] == (1 << 16) - 1 and d[12345] == 12345  # still mapped
    del a, d
    gc.collect()
    pub.close()
