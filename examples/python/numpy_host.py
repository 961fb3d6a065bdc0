#!/usr/bin/env python3
"""rgaps from NumPy, on host memory: one producer, several consumer processes.

The producer publishes 480x640 RGB frames (one copy each into the topic's
shared pool, the last ones written in place with a loan); every consumer
process reads each frame in place - numpy.asarray(msg) is a read-only view
of the shared memory, no copy - checks every pixel and computes something
from it. Runs on any Linux machine with rgapsd (docs/PYTHON.md):

    rgapsd -c examples/python/rgapsd.json --socket /tmp/rgaps.sock &
    RGAPS_SOCKET=/tmp/rgaps.sock python3 examples/python/numpy_host.py
"""
import argparse
import json
import multiprocessing as mp
import sys
import time

import numpy as np

import rgaps

TOPIC = "numpy-demo"
SHAPE = (480, 640, 3)


def frame(seq):
    """Frame `seq`, derived from its number so that consumers can check every pixel."""
    y, x, c = np.indices(SHAPE, dtype=np.uint32)
    return ((y * 3 + x * 5 + c * 7 + seq * 11) % 251).astype(np.uint8)


def consumer(idx, frames, ready, results):
    good = bad = lost = 0
    brightness = []
    with rgaps.Subscriber(TOPIC) as sub:
        if sub.memory != "host":
            results.put((idx, 0, 0, 0, f"topic {TOPIC} is in GPU memory: give it a topic file "
                                       f'with "memory": "host" (examples/python/topics.d)'))
            ready.set()
            return
        ready.set()
        while good + bad + lost < frames:
            with sub.take(timeout=30) as msg:  # released at the end of the block
                lost += msg.gap
                img = np.asarray(msg)  # the shared memory itself, read-only
                meta = json.loads(msg.header)
                if img.shape == SHAPE and np.array_equal(img, frame(meta["seq"])):
                    good += 1
                else:
                    bad += 1
                brightness.append(float(img.mean()))
                del img  # (an array that outlives the block keeps the message held)
    results.put((idx, good, bad, lost, f"mean brightness {np.mean(brightness):.1f}"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--frames", type=int, default=200)
    a = ap.parse_args()

    ctx = mp.get_context("spawn")  # each process makes its own handles
    results = ctx.Queue()
    ready = [ctx.Event() for _ in range(a.consumers)]
    procs = [ctx.Process(target=consumer, args=(i, a.frames, ready[i], results))
             for i in range(a.consumers)]
    try:
        with rgaps.Publisher(TOPIC) as pub:
            for p in procs:
                p.start()
            for e in ready:
                if not e.wait(60):
                    sys.exit("a consumer did not start within 60 s")
            start = time.monotonic()
            for seq in range(a.frames):
                header = json.dumps({"seq": seq, "time": time.time()}).encode()
                if seq < a.frames - 10:
                    pub.publish(frame(seq), header=header, timeout=10)  # one copy
                else:
                    with pub.loan(SHAPE, np.uint8, header=header, timeout=10) as loan:
                        np.asarray(loan)[...] = frame(seq)  # written in the pool: no copy
            elapsed = time.monotonic() - start
        print(f"published {a.frames} frames of {np.prod(SHAPE) / 2**20:.2f} MiB in "
              f"{elapsed:.2f} s to {a.consumers} consumer processes")
        failed = 0
        for _ in procs:
            idx, good, bad, lost, note = results.get(timeout=120)
            print(f"consumer {idx}: {good} frames checked, {bad} wrong, {lost} lost; {note}")
            failed += bad + lost + (good == 0)
        return 1 if failed else 0
    except rgaps.Disconnected as e:
        sys.exit(f"{e}\nstart rgapsd first (docs/PYTHON.md)")
    finally:
        for p in procs:
            if p.pid is None:  # never started
                continue
            p.join(30)
            if p.is_alive():
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
