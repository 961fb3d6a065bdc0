"""Timeouts, overflow (block and drop_oldest with gap counts), iteration and
fileno() for selectors."""
import errno
import selectors
import threading
import time

import pytest

import rgaps

np = pytest.importorskip("numpy")


def test_take_timeouts(topic):
    with rgaps.Subscriber(topic) as sub:
        with pytest.raises(rgaps.Timeout) as e:
            sub.take(0)
        assert e.value.errno == errno.ETIMEDOUT and isinstance(e.value, TimeoutError)
        start = time.monotonic()
        with pytest.raises(rgaps.Timeout, match="no message within 0.25 s"):
            sub.take(timeout=0.25)
        assert time.monotonic() - start >= 0.25


def test_block_overflow_times_out(daemon):
    # "block": queue_depth 4, block_timeout_ms 100
    with rgaps.Subscriber("block") as sub, rgaps.Publisher("block") as pub:
        for i in range(4):
            pub.publish(np.full(16, i, np.uint8))
        with pytest.raises(rgaps.Timeout, match="no room"):
            pub.publish(np.zeros(16, np.uint8), timeout=0)
        start = time.monotonic()
        with pytest.raises(rgaps.Timeout):
            pub.publish(np.zeros(16, np.uint8))  # the topic's block timeout
        assert time.monotonic() - start >= 0.1
        with pytest.raises(rgaps.Timeout):
            pub.publish(np.zeros(16, np.uint8), timeout=0.2)
        for i in range(4):
            with sub.take(timeout=5) as m:
                assert m.seq == i and m.gap == 0
        pub.publish(np.zeros(16, np.uint8), timeout=5)  # room again
        with sub.take(timeout=5) as m:
            assert m.seq == 4


def test_gaps_under_drop_oldest(daemon):
    # "drop": drop_oldest, queue_depth 8
    n = 40
    with rgaps.Subscriber("drop") as sub, rgaps.Publisher("drop") as pub:
        for i in range(n):
            pub.publish(np.full(4, i, np.int32))  # never blocks: the oldest are dropped
        got, gaps = [], 0
        while True:
            try:
                m = sub.take(0)
            except rgaps.Timeout:
                break
            with m:
                gaps += m.gap
                got.append(m.seq)
                assert np.asarray(m).tolist() == [m.seq] * 4
        assert got == sorted(got) and got[-1] == n - 1
        assert len(got) <= 8 and gaps > 0
        assert len(got) + gaps == n  # nothing lost silently
        assert sub.info()["drops"] >= gaps


def test_iteration_and_selectors(topic):
    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        def produce():
            time.sleep(0.1)
            for i in range(5):
                pub.publish(np.array([i]))

        t = threading.Thread(target=produce)
        t.start()
        with selectors.DefaultSelector() as sel:
            sel.register(sub, selectors.EVENT_READ)
            assert sel.select(timeout=10), "fileno() never became readable"
        seen = []
        for msg in sub:
            with msg:
                seen.append(int(np.asarray(msg)[0]))
            if len(seen) == 5:
                break
        t.join(10)
        assert seen == [0, 1, 2, 3, 4]
        with pytest.raises(rgaps.Timeout):
            sub.take(0)


def test_fd_readable_only_when_a_message_may_be_there(topic):
    import os

    with rgaps.Subscriber(topic) as sub, rgaps.Publisher(topic) as pub:
        fd = sub.fileno()
        assert fd == sub.fileno() and os.get_blocking(fd) is not None
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        with pytest.raises(rgaps.Timeout):
            sub.take(0)  # drains and re-arms
        assert sel.select(timeout=0.2) == []
        pub.publish(b"x")
        assert sel.select(timeout=10)
        with sub.take(0) as m:
            assert m.seq == 0
        sel.close()
