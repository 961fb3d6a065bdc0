#!/usr/bin/env python3
"""Where a Python publish() of a CUDA tensor spends its time (issue 9).

One process, no subscriber: the median over 180 calls (after 20 to warm up)
of each step a stream-ordered publish() of a 4 MiB torch tensor takes - torch's
DLPack export with and without a stream to order on, its
__cuda_array_interface__, torch.cuda.current_stream() - against the whole
publish() and against the C calls it wraps (rgaps_publisher_push_async, and the
synchronous rgaps_publisher_push that the C benchmark times, through ctypes).

Needs rgapsd serving the topic (gpu_python.sh: "gbench", memory "cuda"),
$RGAPS_BUILD and torch with a GPU. Prints one line per step and, with --json,
writes them.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

from gpu_bench import librgaps  # the same ctypes bindings (this script's folder)


def median_us(fn, n=200, warm=20):
    v = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        v.append(time.perf_counter_ns() - t0)
    return statistics.median(v[warm:]) / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topic", default="gbench")
    ap.add_argument("--build", default=os.environ.get("RGAPS_BUILD", ".device/build"))
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch

    import rgaps

    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA GPU")
        return 77
    size = 4 << 20
    x = torch.full((size // 4,), 7, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    lib = librgaps(a.build)
    rows = [
        ("torch.cuda.current_stream()", median_us(torch.cuda.current_stream)),
        ("x.__dlpack_device__()", median_us(x.__dlpack_device__)),
        ("x.__dlpack__(stream=1)", median_us(lambda: x.__dlpack__(stream=1))),
        ("x.__dlpack__()", median_us(x.__dlpack__)),
        ("x.__cuda_array_interface__", median_us(lambda: x.__cuda_array_interface__)),
    ]
    with rgaps.Publisher(a.topic) as pub:
        rows.append(("Publisher.publish(x)", median_us(lambda: pub.publish(x))))
    h = lib.rgaps_publisher_init(a.topic.encode())
    if not h:
        print(f"FAIL: rgaps_publisher_init('{a.topic}') failed")
        return 1
    ptr, legacy = x.data_ptr(), ctypes.c_void_p(1)  # cudaStreamLegacy
    rows.append(("C rgaps_publisher_push_async", median_us(
        lambda: lib.rgaps_publisher_push_async(h, size, ptr, legacy))))
    rows.append(("C rgaps_publisher_push (sync)", median_us(
        lambda: lib.rgaps_publisher_push(h, size, ptr))))
    torch.cuda.synchronize()
    lib.rgaps_publisher_destroy(h)
    print(f"publish() of a 4 MiB CUDA tensor, step by step (median us of 180 calls), "
          f"{torch.cuda.get_device_name(0)}, {time.strftime('%Y-%m-%d %H:%M:%S')}")
    for name, us in rows:
        print(f"  {name:<32}{us:8.1f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "rows": [{"step": n, "median_us": u} for n, u in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
