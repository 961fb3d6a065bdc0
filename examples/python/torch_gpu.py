#!/usr/bin/env python3
"""rgaps from PyTorch on a GPU: a producer and four consumer processes, each
running a small model on every batch it receives.

The producer publishes float16 image batches from the GPU (one device-to-device
copy each into the topic's pool in GPU memory); each consumer sees the pool
itself through torch.from_dlpack(msg) - no copy - checks every element on the
GPU, runs a small convolutional model on the batch, and releases the message
after its stream has finished with it. Needs a CUDA GPU and rgapsd
(docs/PYTHON.md):

    rgapsd -c examples/python/rgapsd.json --socket /tmp/rgaps.sock &
    RGAPS_SOCKET=/tmp/rgaps.sock python3 examples/python/torch_gpu.py

--device cpu runs the same program on host memory (a host topic).
"""
import argparse
import multiprocessing as mp
import sys
import time

import torch

import rgaps

TOPIC = "torch-demo"
SHAPE = (16, 3, 64, 64)  # 16 images of 3 x 64 x 64, float16: 384 KiB a batch


def batch(seq, device):
    """Batch `seq`, computed from its number so that consumers can check every element.
    Values are integers below 2048, exact in float16."""
    n = torch.arange(torch.Size(SHAPE).numel(), device=device, dtype=torch.int64)
    return ((n * 7 + seq * 13) % 2039).to(torch.float16).reshape(SHAPE)


def model(device):
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    dtype = torch.float16 if device == "cuda" else torch.float32
    return m.to(device=device, dtype=dtype).eval()


def consumer(idx, n, device, ready, results):
    net = model(device)
    good = bad = lost = 0
    classes = torch.zeros(10, dtype=torch.int64)
    with rgaps.Subscriber(TOPIC) as sub, torch.no_grad():
        ready.set()
        stream = torch.cuda.current_stream() if device == "cuda" else None
        while good + bad + lost < n:
            with sub.take(timeout=60) as msg:
                lost += msg.gap
                x = torch.from_dlpack(msg)  # the topic's pool itself, read-only
                seq = int(msg.header)
                if torch.equal(x, batch(seq, x.device)):  # every element, on the device
                    good += 1
                else:
                    bad += 1
                inp = x if device == "cuda" else x.float()
                classes += torch.bincount(net(inp).argmax(1).cpu(), minlength=10)
                del x, inp
                # The block goes back once this stream has finished reading it.
                msg.release(stream=stream)
    results.put((idx, good, bad, lost, classes.tolist()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA GPU visible to torch (try --device cpu)")

    ctx = mp.get_context("spawn")  # CUDA needs spawn; each process makes its own handles
    results = ctx.Queue()
    ready = [ctx.Event() for _ in range(a.consumers)]
    procs = [ctx.Process(target=consumer, args=(i, a.batches, a.device, ready[i], results))
             for i in range(a.consumers)]
    try:
        with rgaps.Publisher(TOPIC) as pub:
            want = "cuda" if a.device == "cuda" else "host"
            if pub.memory != want:
                sys.exit(f"topic {TOPIC} is in {pub.memory} memory, this run needs {want}: "
                         f"see examples/python/topics.d/{TOPIC}.json")
            for p in procs:
                p.start()
            for e in ready:
                if not e.wait(120):
                    sys.exit("a consumer did not start within 120 s")
            start = time.monotonic()
            for seq in range(a.batches):
                x = batch(seq, a.device)  # made by kernels on the current stream
                # One copy into the pool, ordered after the producer's kernels.
                pub.publish(x, header=str(seq).encode(), timeout=30,
                            stream=torch.cuda.current_stream() if a.device == "cuda" else None)
            elapsed = time.monotonic() - start
        mib = torch.Size(SHAPE).numel() * 2 / 2**20
        print(f"published {a.batches} batches of {mib:.2f} MiB from {a.device} in {elapsed:.2f} s "
              f"to {a.consumers} consumer processes")
        failed = 0
        for _ in procs:
            idx, good, bad, lost, classes = results.get(timeout=300)
            print(f"consumer {idx}: {good} batches checked on {a.device}, {bad} wrong, {lost} lost; "
                  f"predicted classes {classes}")
            failed += bad + lost + (good == 0)
        return 1 if failed else 0
    except rgaps.Disconnected as e:
        sys.exit(f"{e}\nstart rgapsd first (docs/PYTHON.md)")
    finally:
        for p in procs:
            if p.pid is None:  # never started
                continue
            p.join(60)
            if p.is_alive():
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
