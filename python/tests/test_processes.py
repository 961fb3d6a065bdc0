"""Real processes: fan-out to subscriber processes that check every element,
and a subscriber process killed while it holds arrays."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import rgaps
from conftest import pool_used, wait_until

np = pytest.importorskip("numpy")

SUBSCRIBER = textwrap.dedent("""
    import sys, numpy as np, rgaps
    topic, n = sys.argv[1], int(sys.argv[2])
    bad = 0
    with rgaps.Subscriber(topic) as sub:
        print("attached", flush=True)
        for i in range(n):
            with sub.take(timeout=30) as m:
                a = np.asarray(m)
                want = (np.arange(a.size, dtype=np.int64) * 7 + m.seq).astype(a.dtype)
                if m.seq != i or m.gap or a.shape != (256, 128) or not np.array_equal(a.ravel(), want):
                    bad += 1
    print(f"received {n} bad {bad}", flush=True)
    sys.exit(1 if bad else 0)
""")

HOLDER = textwrap.dedent("""
    import sys, time, numpy as np, rgaps
    sub = rgaps.Subscriber(sys.argv[1])
    print("attached", flush=True)
    keep = []
    for i in range(4):
        with sub.take(timeout=30) as m:
            keep.append(np.asarray(m))      # the with block ends; the arrays keep it
            keep.append(np.from_dlpack(m))
    print(f"holding {sub.held}", flush=True)
    time.sleep(600)
""")


def spawn(code, *args):
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ))


def subscribers_of(name):
    return next((t["subscribers"] for t in rgaps.topics() if t["name"] == name), 0)


def test_fanout_to_subscriber_processes(topic):
    n, procs = 60, []
    try:
        procs = [spawn(SUBSCRIBER, topic, n) for _ in range(3)]
        for p in procs:
            assert p.stdout.readline().strip() == "attached"
        wait_until(lambda: subscribers_of(topic) == 3, 10, "3 subscribers")
        with rgaps.Publisher(topic) as pub:
            for seq in range(n):
                a = (np.arange(256 * 128, dtype=np.int64) * 7 + seq).astype(np.float32)
                pub.publish(a.reshape(256, 128), timeout=30)
        for p in procs:
            out, _ = p.communicate(timeout=60)
            assert p.returncode == 0, out
            assert f"received {n} bad 0" in out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_killed_subscriber_holding_arrays(topic):
    size = 1 << 20
    holder = spawn(HOLDER, topic)
    try:
        assert holder.stdout.readline().strip() == "attached"
        wait_until(lambda: subscribers_of(topic) == 1, 10, "the holder to attach")
        pub = rgaps.Publisher(topic)
        for i in range(4):
            pub.publish(np.full(size, i, np.uint8))
        assert holder.stdout.readline().strip() == "holding 4"
        assert pool_used(topic) >= 4 * size
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        wait_until(lambda: subscribers_of(topic) == 0, 10, "rgapsd to see the holder gone")
        # Its holds went with it: the publisher can fill the pool (16 MiB) several times over.
        for i in range(64):
            pub.publish(np.full(size, i, np.uint8), timeout=5)
        pub.close()
        wait_until(lambda: pool_used(topic) == 0, 10, "the pool to drain")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        holder.stdout.close()
