#!/usr/bin/env python3
"""GPU benchmarks of the rgaps Python package (issue 9), one run, one GPU.

  1. Python against C: N = 1 and 8 Python subscriber processes against the
     C benchmark tests/gpu/gpu-bench (scheme "rgaps"), 4 MiB and 64 MiB, on
     the same rgapsd and GPU pool. Both time one message at a time, from the
     publisher starting to publish a tensor that sits on the GPU (one D2D
     copy into the pool) to the last subscriber holding it (CLOCK_MONOTONIC);
     Python's subscribers stop the clock once torch.from_dlpack(msg) returned
     a tensor (and, for the like-for-like row, once take() returned). The
     Python subscribers are timed twice: with a Python publisher (publish(),
     in stream order: they wait for its copy's fence) and with the C
     benchmark's own publish call, rgaps_publisher_push through ctypes ("C
     push": only the subscribers' language differs from the C row).
  2. Against what a Python user would do instead, the same processes:
     torch.multiprocessing queues sharing CUDA tensors (a fresh tensor per
     message, put once per consumer), and pickling the tensor through a
     multiprocessing pipe (pickle.dumps once, sent to every consumer,
     pickle.loads there); the clock stops once the consumer holds the CUDA
     tensor.

Needs rgapsd with the topics of gpu_python.sh, $RGAPS_BUILD (for gpu-bench)
and torch with a GPU. Writes a table and --json.
"""
import argparse
import ctypes
import json
import multiprocessing as mp
import os
import pickle
import re
import statistics
import struct
import subprocess
import sys
import time

REC = struct.Struct("<qqq")  # seq, take-return ns, tensor ns
SIZES = {"4MiB": 4 << 20, "64MiB": 64 << 20}


def subscribers(topic):
    import rgaps

    return next((t["subscribers"] for t in rgaps.topics() if t["name"] == topic), 0)


def worker(idx, ctl, rec, q, pipe_r):
    import torch

    import rgaps

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the context exists before any timing
    rec.send_bytes(REC.pack(-1, 0, 0))
    while True:
        cmd = ctl.recv()
        if cmd[0] == "exit":
            return
        mode, n = cmd[0], cmd[1]
        if mode == "rgaps":
            with rgaps.Subscriber(cmd[2]) as sub:
                rec.send_bytes(REC.pack(-1, 0, 0))
                for _ in range(n):
                    with sub.take(timeout=120) as msg:
                        t_take = time.monotonic_ns()
                        t = torch.from_dlpack(msg)
                        t_tensor = time.monotonic_ns()
                        seq = msg.seq
                        del t
                    rec.send_bytes(REC.pack(seq, t_take, t_tensor))
        elif mode == "tmpq":
            for _ in range(n):
                seq, x = q.get(timeout=120)
                t1 = time.monotonic_ns()
                del x
                rec.send_bytes(REC.pack(seq, t1, t1))
        elif mode == "pickle":
            for _ in range(n):
                data = pipe_r.recv_bytes()
                seq, = struct.unpack_from("<q", data)
                x = pickle.loads(data[8:])
                t1 = time.monotonic_ns()
                del x
                rec.send_bytes(REC.pack(seq, t1, t1))


class Workers:
    def __init__(self, n):
        import torch.multiprocessing as tmp

        ctx = tmp.get_context("spawn")
        self.ctl, self.rec, self.q, self.pipe_w, self.procs = [], [], [], [], []
        for i in range(n):
            c_r, c_w = ctx.Pipe(duplex=False)
            r_r, r_w = ctx.Pipe(duplex=False)
            p_r, p_w = ctx.Pipe(duplex=False)
            q = ctx.Queue()
            p = ctx.Process(target=worker, args=(i, c_r, r_w, q, p_r), daemon=True)
            p.start()
            self.ctl.append(c_w)
            self.rec.append(r_r)
            self.q.append(q)
            self.pipe_w.append(p_w)
            self.procs.append(p)
        for r in self.rec:
            if not r.poll(180):
                raise TimeoutError("a worker did not start in 180 s")
            r.recv_bytes()

    def records(self, k):
        out = []
        for r in self.rec[:k]:
            if not r.poll(120):
                raise TimeoutError("a consumer sent nothing for 120 s")
            out.append(REC.unpack(r.recv_bytes()))
        return out

    def close(self):
        for c in self.ctl:
            c.send(("exit",))
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()


def librgaps(build):
    """librgaps's publisher calls through ctypes: rgaps_publisher_push is the call the C
    benchmark times (a synchronous D2D copy into the pool, then the commit), made from
    this process so that Python subscribers are timed against C ones with the same
    publisher; publish_cost.py times it and rgaps_publisher_push_async too."""
    lib = ctypes.CDLL(os.path.join(build, "src", "lib", "librgaps.so.0"), use_errno=True)
    lib.rgaps_publisher_init.restype = ctypes.c_void_p
    lib.rgaps_publisher_init.argtypes = [ctypes.c_char_p]
    lib.rgaps_publisher_push.restype = ctypes.c_int
    lib.rgaps_publisher_push.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.rgaps_publisher_push_async.restype = ctypes.c_int
    lib.rgaps_publisher_push_async.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                               ctypes.c_void_p, ctypes.c_void_p]
    lib.rgaps_publisher_destroy.restype = None
    lib.rgaps_publisher_destroy.argtypes = [ctypes.c_void_p]
    lib.rgaps_strerror.restype = ctypes.c_char_p
    lib.rgaps_strerror.argtypes = [ctypes.c_int]
    return lib


class CPublisher:
    def __init__(self, lib, topic):
        self.lib = lib
        self.h = lib.rgaps_publisher_init(topic.encode())
        if not self.h:
            raise OSError(ctypes.get_errno(), f"rgaps_publisher_init('{topic}') failed")

    def publish(self, x, timeout=None):
        r = self.lib.rgaps_publisher_push(self.h, x.numel() * x.element_size(), x.data_ptr())
        if r:
            raise OSError(-r, self.lib.rgaps_strerror(r).decode())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lib.rgaps_publisher_destroy(self.h)


def run_rgaps(w, torch, rgaps, topic, size, k, n, warm, clib=None):
    for c in w.ctl[:k]:
        c.send(("rgaps", n + warm, topic))
    w.records(k)  # attached
    deadline = time.monotonic() + 60
    while subscribers(topic) < k:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{k} subscribers did not attach to {topic}")
        time.sleep(0.01)
    x = torch.full((size // 4,), 7, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    lat_take, lat_tensor = [], []
    with (CPublisher(clib, topic) if clib else rgaps.Publisher(topic)) as pub:
        for i in range(n + warm):
            t0 = time.monotonic_ns()
            pub.publish(x, timeout=60)
            recs = w.records(k)
            if i >= warm:
                lat_take.append(max(r[1] for r in recs) - t0)
                lat_tensor.append(max(r[2] for r in recs) - t0)
    return lat_take, lat_tensor


def run_tmpq(w, torch, size, k, n, warm):
    lat = []
    for c in w.ctl[:k]:
        c.send(("tmpq", n + warm))
    for i in range(n + warm):
        x = torch.full((size // 4,), i, dtype=torch.int32, device="cuda")  # a fresh tensor
        torch.cuda.synchronize()
        t0 = time.monotonic_ns()
        for q in w.q[:k]:
            q.put((i, x))
        recs = w.records(k)
        if i >= warm:
            lat.append(max(r[1] for r in recs) - t0)
        del x
    return lat


def run_pickle(w, torch, size, k, n, warm):
    lat = []
    for c in w.ctl[:k]:
        c.send(("pickle", n + warm))
    for i in range(n + warm):
        x = torch.full((size // 4,), i, dtype=torch.int32, device="cuda")
        torch.cuda.synchronize()
        t0 = time.monotonic_ns()
        data = struct.pack("<q", i) + pickle.dumps(x)
        for p in w.pipe_w[:k]:
            p.send_bytes(data)
        recs = w.records(k)
        if i >= warm:
            lat.append(max(r[1] for r in recs) - t0)
    return lat


def run_c(build, sizes, subs, reps):
    """The C benchmark's rgaps scheme on the same daemon: medians in ms."""
    exe = os.path.join(build, "tests", "gpu", "gpu-bench")
    if not os.access(exe, os.X_OK):
        return None, f"{exe} not built"
    cmd = [exe, "--gpu-topic", "gbench", "--host-topic", "hbench", "--sizes", ",".join(sizes),
           "--subs", ",".join(map(str, subs)), "--reps", ",".join([str(reps)] * len(sizes)),
           "--schemes", "rgaps"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode:
        return None, f"gpu-bench failed ({p.returncode}): {p.stdout[-600:]}{p.stderr[-600:]}"
    out = {}
    for m in re.finditer(r"^\s+rgaps\s+N=(\d+)\s+(\S+)\s+median\s+([\d.]+) ms", p.stdout, re.M):
        out[(m.group(2), int(m.group(1)))] = float(m.group(3))
    return out, p.stdout


def ms(v):
    return statistics.median(v) / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("RGAPS_BUILD", ".device/build"))
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "gpu_bench.json"))
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()

    import torch

    import rgaps

    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA GPU")
        return 77
    rows = []
    c_res, c_text = run_c(a.build, list(SIZES), [1, 8], a.reps)
    if c_res is None:
        print(f"note: C benchmark not run: {c_text}")
    clib = librgaps(a.build)
    w = Workers(8)
    try:
        for name, size in SIZES.items():
            for k in (1, 8):
                n = a.reps
                take, tensor = run_rgaps(w, torch, rgaps, "gbench", size, k, n, 3)
                ctake, ctensor = run_rgaps(w, torch, rgaps, "gbench", size, k, n, 3, clib)
                q = run_tmpq(w, torch, size, k, n, 3)
                pk = run_pickle(w, torch, size, k, 3 if size > (8 << 20) else 10, 1)
                row = {"size": name, "consumers": k, "messages": n,
                       "rgaps_py_take_ms": ms(take), "rgaps_py_tensor_ms": ms(tensor),
                       "rgaps_cpush_py_take_ms": ms(ctake),
                       "rgaps_cpush_py_tensor_ms": ms(ctensor),
                       "rgaps_c_ms": c_res.get((name, k)) if c_res else None,
                       "torch_mp_queue_ms": ms(q), "pickle_pipe_ms": ms(pk),
                       "pickle_messages": len(pk)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        w.close()
    print(f"\nGPU: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}")
    print("message on the GPU -> every consumer holds it as a CUDA tensor, median ms")
    print("Py: a Python publisher (publish(), in stream order) and Python subscribers;")
    print("C push: Python subscribers, the publisher calls rgaps_publisher_push as the C")
    print("benchmark does (ctypes); C rgaps: the C benchmark, C publisher and subscribers")
    print(f"{'size':<7}{'N':>3}{'C rgaps':>10}{'Py take':>10}{'Py tensor':>11}{'Py/C':>7}"
          f"{'C push: take':>14}{'tensor':>8}{'take/C':>8}"
          f"{'torch.mp':>10}{'pickle':>10}{'mp/Py':>8}")
    for r in rows:
        c = r["rgaps_c_ms"]
        ratio = f"{r['rgaps_py_take_ms'] / c:7.2f}" if c else "      -"
        cratio = f"{r['rgaps_cpush_py_take_ms'] / c:8.2f}" if c else "       -"
        print(f"{r['size']:<7}{r['consumers']:>3}{(f'{c:.3f}' if c else '-'):>10}"
              f"{r['rgaps_py_take_ms']:>10.3f}{r['rgaps_py_tensor_ms']:>11.3f}{ratio}"
              f"{r['rgaps_cpush_py_take_ms']:>14.3f}{r['rgaps_cpush_py_tensor_ms']:>8.3f}{cratio}"
              f"{r['torch_mp_queue_ms']:>10.3f}{r['pickle_pipe_ms']:>10.1f}"
              f"{r['torch_mp_queue_ms'] / r['rgaps_py_tensor_ms']:>8.1f}")
    with open(a.json, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "date": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
                   "rows": rows, "c_output": c_text if c_res else None}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
