"""Errors are Python exceptions carrying the C error's errno and text."""
import errno
import os
import signal
import threading
import time

import pytest

import rgaps
from conftest import Daemon, close_ends

np = pytest.importorskip("numpy")


def test_no_daemon(monkeypatch, tmp_path):
    sock = str(tmp_path / "absent.sock")
    monkeypatch.setenv("RGAPS_SOCKET", sock)
    for cls in (rgaps.Subscriber, rgaps.Publisher):
        with pytest.raises(rgaps.Disconnected) as e:
            cls("x")
        assert e.value.errno == errno.ENOENT
        assert sock in str(e.value) and "rgapsd" in str(e.value)
        assert isinstance(e.value, ConnectionError) and isinstance(e.value, OSError)
    with pytest.raises(rgaps.Error):
        rgaps.topics()


RULE = ("a topic name is 1 to 63 characters of A-Z a-z 0-9 . _ -, not starting with '.' "
        "or '-'")


@pytest.mark.parametrize("name,what", [
    ("", "it is empty"), ("bad name", "a space is not allowed"), ("-x", "it starts with '-'"),
    (".dot", "it starts with '.'"), ("x" * 70, "it is 70 bytes long"),
    ("a/b", "'/' is not allowed"), ("café", "byte 0xc3 is not allowed (only ASCII)")])
def test_bad_topic_name(daemon, name, what):
    for cls in (rgaps.Publisher, rgaps.Subscriber):
        with pytest.raises(rgaps.Error) as e:
            cls(name)
        assert e.value.errno == errno.EINVAL
        assert f"is not a topic name ({what}): {RULE}" in str(e.value), str(e.value)


def test_message_too_large(daemon):
    with rgaps.Publisher("small") as pub:  # max_message_size 16 KiB
        with pytest.raises(rgaps.Error, match="max_message_size is 16384") as e:
            pub.publish(np.zeros(16385, np.uint8))
        assert e.value.errno == errno.EMSGSIZE
        pub.publish(np.zeros(16384, np.uint8))


def test_closed_handles(topic):
    pub, sub = rgaps.Publisher(topic), rgaps.Subscriber(topic)
    pub.close()
    sub.close()
    pub.close()  # twice is harmless
    assert pub.closed and sub.closed and "closed" in repr(sub)
    for call in (lambda: pub.publish(b"x"), lambda: pub.loan(1), lambda: sub.take(0),
                 lambda: sub.fileno(), lambda: pub.info(), lambda: sub.info()):
        with pytest.raises(ValueError, match="closed"):
            call()
    with pytest.raises(ValueError, match="closed"):
        with sub:
            pass
    assert list(sub) == []  # iteration just ends


def test_bad_arguments(topic):
    with rgaps.Publisher(topic) as pub, rgaps.Subscriber(topic) as sub:
        with pytest.raises(ValueError, match="timeout"):
            sub.take(-1)
        with pytest.raises(TypeError):
            sub.take("soon")
        with pytest.raises(ValueError, match="too long"):
            sub.take(1e12)
        with pytest.raises(TypeError, match="stream"):
            pub.publish(b"x", stream="default")
        with pytest.raises(TypeError, match="dtype"):
            pub.loan(4, object())
        assert pub.info()["memory"] == "host" and sub.info()["name"] == topic


def test_query_errors(daemon):
    with pytest.raises(rgaps.Error, match="refused 'no-such-request'"):
        rgaps.query({"type": "no-such-request"})
    assert isinstance(rgaps.topics(), list)


def test_daemon_gone_is_disconnected(monkeypatch, tmp_path):
    d = Daemon(str(tmp_path))
    monkeypatch.setenv("RGAPS_SOCKET", d.socket)
    d.start()
    try:
        sub, pub = rgaps.Subscriber("gone"), rgaps.Publisher("gone")
        pub.publish(b"before")
        with sub.take(timeout=5) as m:
            assert bytes(m.raw()) == b"before"
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
        with pytest.raises(rgaps.Disconnected):
            # rgapsd's death is seen at the next sync or sleep: bounded by the 10 s here
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                pub.publish(b"after", timeout=0.1)
                sub.take(timeout=0.1)
    finally:
        d.stop()


def test_handles_do_not_cross_fork(topic):
    sub = rgaps.Subscriber(topic)
    pid = os.fork()
    if pid == 0:  # the child: the parent's handle must refuse, and its end must not hurt
        code = 1
        try:
            sub.take(0)
        except RuntimeError as e:
            code = 0 if "fork" in str(e) else 2
        except BaseException:
            code = 3
        del sub
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with rgaps.Publisher(topic) as pub:
        pub.publish(b"still mine")
        with sub.take(timeout=5) as m:
            assert bytes(m.raw()) == b"still mine"
    sub.close()


def test_close_from_another_thread_ends_a_blocking_take(topic):
    sub = rgaps.Subscriber(topic)
    e = close_ends(sub, sub.take)
    assert isinstance(e, ValueError) and "closed" in str(e), e


def test_ctrl_c_interrupts_a_blocking_take(topic):
    with rgaps.Subscriber(topic) as sub:
        main = threading.main_thread().ident
        timer = threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                sub.take(timeout=30)
        finally:
            timer.cancel()
