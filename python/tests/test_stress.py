"""What a careful user probes: closing handles other threads use, Ctrl-C in a
blocking publish, and errors as docs/PYTHON.md states them."""
import ctypes
import gc
import signal
import threading

import pytest

import rgaps
from conftest import close_ends

np = pytest.importorskip("numpy")

TOPIC = "closing"  # conftest.py: queue_depth 4, overflow block, block_timeout_ms 30000


def subscribers_of(topic):
    return next(t["subscribers"] for t in rgaps.topics() if t["name"] == topic)


def fill_queue(pub, sub, start):
    """Publish until the queue is full: sub never takes, so the next publish waits."""
    for i in range(4):
        pub.publish(np.full(8, start + i, np.int64), timeout=0)
    with pytest.raises(rgaps.Timeout):
        pub.publish(np.zeros(8, np.int64), timeout=0)


def test_closed_subscriber_keeps_its_arrays_not_its_place(daemon):
    """close() with an array alive: the array stays intact, the subscriber no longer
    counts and no longer holds the queue, so the publisher goes on."""
    with rgaps.Publisher(TOPIC) as pub, rgaps.Subscriber(TOPIC) as keep:
        sub = rgaps.Subscriber(TOPIC)
        pub.publish(np.arange(1000, dtype=np.int64))
        with sub.take(timeout=5) as msg:
            a = np.asarray(msg)
        keep.take(timeout=5).release()
        assert subscribers_of(TOPIC) == 2
        sub.close()
        assert subscribers_of(TOPIC) == 1  # only `keep`
        for i in range(3 * 4):  # three queues' worth: sub's cursor would stop it at 4
            pub.publish(np.full(1000, i, np.int64), timeout=5)
            with keep.take(timeout=5) as m:
                assert np.asarray(m)[0] == i
        assert np.array_equal(a, np.arange(1000, dtype=np.int64))  # its block was kept
        del a
        gc.collect()


def test_close_wakes_a_publish_waiting_in_another_thread(daemon):
    pub, sub = rgaps.Publisher(TOPIC), rgaps.Subscriber(TOPIC)
    try:
        fill_queue(pub, sub, 0)
        # the publish waits 20 s for room unless close() ends it
        e = close_ends(pub, lambda: pub.publish(np.zeros(8, np.int64), timeout=20))
        assert isinstance(e, ValueError) and "closed while it waited for room" in str(e), e
    finally:
        pub.close()
        sub.close()


def test_ctrl_c_interrupts_a_blocking_publish(daemon):
    with rgaps.Publisher(TOPIC) as pub, rgaps.Subscriber(TOPIC) as sub:
        fill_queue(pub, sub, 0)
        main = threading.main_thread().ident
        timer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                pub.publish(np.zeros(8, np.int64), timeout=30)
        finally:
            timer.cancel()
        with sub.take(timeout=5) as m:  # the handles still work
            assert m.seq == 0


def test_closing_from_another_thread_ends_iteration(topic):
    with rgaps.Publisher(topic) as pub:
        sub = rgaps.Subscriber(topic)
        got, errors = [], []

        def reader():
            try:
                for msg in sub:
                    got.append(msg.seq)
                    msg.release()
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=reader)
        t.start()
        for i in range(3):
            pub.publish(np.full(4, i, np.int64))
        deadline = threading.Event()
        for _ in range(100):
            if len(got) == 3:
                break
            deadline.wait(0.05)
        sub.close()
        t.join(10)
        assert not t.is_alive() and not errors, errors
        assert got == [0, 1, 2]


def test_a_broken_array_protocol_is_reported_as_itself(topic):
    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("the producer's own error")

    with rgaps.Publisher(topic) as pub:
        with pytest.raises(RuntimeError, match="the producer's own error"):
            pub.publish(Broken())
        with pytest.raises(TypeError, match="takes an array"):
            pub.publish(object())


PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = ctypes.c_void_p
PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def test_a_negative_dlpack_shape_is_named(topic):
    class NegativeShape:
        """numpy's DLPack export with its shape changed to -1."""

        def __init__(self):
            self.a = np.zeros(4, np.uint8)

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kw):
            cap = self.a.__dlpack__()
            p = PyCapsule_GetPointer(cap, b"dltensor")  # DLTensor first: data, device, ndim...
            shape = ctypes.cast(ctypes.c_void_p.from_address(p + 24).value,
                                ctypes.POINTER(ctypes.c_int64))
            shape[0] = -1
            return cap

    with rgaps.Publisher(topic) as pub:
        with pytest.raises(ValueError, match=r"negative shape \(-1 in dimension 0\)"):
            pub.publish(NegativeShape())


def test_loan_takes_any_integer_and_push_refuses_empty(topic):
    with rgaps.Publisher(topic) as pub, rgaps.Subscriber(topic) as sub:
        with pub.loan(np.int64(5), "uint8") as loan:
            np.asarray(loan)[:] = 7
        with pub.loan((np.int32(2), np.int64(3)), "float32") as loan:
            np.asarray(loan)[:] = 1.5
        with sub.take(timeout=5) as m:
            assert m.shape == (5,) and bytes(m.raw()) == b"\x07" * 5
        with sub.take(timeout=5) as m:
            assert m.shape == (2, 3) and np.asarray(m).sum() == 9.0
        with pytest.raises(ValueError, match="empty message"):
            pub.push(b"")
        pub.publish(b"")  # an empty array: one described pad byte
        with sub.take(timeout=5) as m:
            assert m.shape == (0,)
