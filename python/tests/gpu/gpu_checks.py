#!/usr/bin/env python3
"""GPU checks of the rgaps Python package, run by gpu_python.sh on a machine
with a CUDA GPU, torch, CuPy and JAX (docs/PYTHON.md "Tests on a GPU").

  fanout    a torch producer (publish and loans) and 4 consumer processes that
            check every element on the GPU; proof of zero copies in each
            consumer: the tensor's data pointer is the message's, torch
            allocated nothing for it, and it lies in one device allocation of
            at least the topic's pool size (cuMemGetAddressRange)
  interop   torch publishes, CuPy (DLPack and __cuda_array_interface__) and JAX
            consume; CuPy, a __cuda_array_interface__-only object and JAX
            publish, torch consumes; every element checked on the GPU
  streams   a producer writing on a side stream publishes without
            synchronising (stream= given, and not given); a consumer orders
            its stream with msg.wait() and releases with release(stream=)
  kill      a consumer process SIGKILLed while it holds GPU tensors: the pool
            drains
  errors    a GPU tensor refused by a host topic, numpy refused a GPU message,
            both with the reason

Each check prints "ok:", "FAIL:" or "SKIP:" lines; the summary goes to
$OUT/gpu_checks.json (or --json). Exit 1 if any check failed. Also the
two halves of the compute-sanitizer run: --sanitizer-producer/-consumer.
"""
import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback

RESULTS = []
N = 1 << 20  # int32 elements: 4 MiB messages


def record(check, status, detail):
    print(f"{status}: {check}: {detail}", flush=True)
    RESULTS.append({"check": check, "status": status, "detail": detail})


def pattern(xp, seq, n=N):
    """Message `seq`: int32 values from the sequence number, in library `xp`
    (torch, cupy or jax.numpy), computed on the GPU."""
    if xp.__name__ == "torch":
        a = xp.arange(n, dtype=xp.int64, device="cuda")
        return ((a * 3 + seq * 7) % 1000003).to(xp.int32)
    a = xp.arange(n, dtype=xp.int64 if xp.__name__ == "cupy" else xp.int32)
    return ((a * 3 + seq * 7) % 1000003).astype(xp.int32)


def pool_used(topic):
    import rgaps

    return next((t["pool_used"] for t in rgaps.topics() if t["name"] == topic), None)


def subscribers(topic):
    import rgaps

    return next((t["subscribers"] for t in rgaps.topics() if t["name"] == topic), 0)


def wait_until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.02)


# ---------------------------------------------------------------- consumers (processes)

def torch_consumer(topic, n, ready, out, use_wait=False):
    res = {"lib": "torch", "good": 0, "bad": 0, "gaps": 0, "ptr_equal": 0,
           "alloc_unchanged": 0, "in_range": 0, "range": None, "range_error": None, "errors": []}
    try:
        import torch

        import rgaps

        torch.cuda.init()
        side = torch.cuda.Stream() if use_wait else None
        with rgaps.Subscriber(topic) as sub:
            pool = sub.info()["pool_size"]
            ready.set()
            base = size = None
            for _ in range(n):
                with sub.take(timeout=120) as msg:
                    res["gaps"] += msg.gap
                    seq = int(msg.header)
                    before = torch.cuda.memory_allocated()
                    if use_wait:  # order the side stream after the producer, read on it
                        msg.wait(side)
                        with torch.cuda.stream(side):
                            t = torch.from_dlpack(msg)
                            grew = torch.cuda.memory_allocated() - before
                            ok = torch.equal(t.reshape(-1), pattern(torch, seq, t.numel()))
                    else:
                        t = torch.from_dlpack(msg)
                        grew = torch.cuda.memory_allocated() - before
                        ok = torch.equal(t.reshape(-1), pattern(torch, seq, t.numel()))
                    res["alloc_unchanged"] += grew == 0
                    res["ptr_equal"] += t.data_ptr() == msg.ptr
                    if base is None:
                        try:
                            base, size = rgaps._rgaps._cuda_range(msg.ptr)
                            res["range"] = [base, size, pool]
                        except rgaps.Error as e:  # reported, not a failure of the consumer
                            res["range_error"] = f"cuMemGetAddressRange: {e}"
                            base = size = False
                    if base:
                        res["in_range"] += base <= t.data_ptr() and \
                            t.data_ptr() + msg.nbytes <= base + size
                    res["good" if ok else "bad"] += 1
                    del t
                    msg.release(stream=side if use_wait else torch.cuda.current_stream())
    except Exception:  # noqa: BLE001
        res["errors"].append(traceback.format_exc())
    out.put(res)


def array_consumer(lib, topic, n, ready, out):
    """A CuPy or JAX consumer: every element checked on the GPU."""
    res = {"lib": lib, "good": 0, "bad": 0, "gaps": 0, "ptr_equal": 0, "errors": []}
    try:
        import rgaps

        if lib == "cupy":
            import cupy as xp

            def to_array(msg, i):  # even: DLPack; odd: __cuda_array_interface__
                return xp.from_dlpack(msg) if i % 2 == 0 else xp.asarray(msg)

            def pointer(a):
                return a.data.ptr
        else:
            import jax
            import jax.numpy as xp

            def to_array(msg, i):
                dl = getattr(jax.dlpack, "from_dlpack", None) or xp.from_dlpack
                return dl(msg)

            def pointer(a):
                return a.unsafe_buffer_pointer()

        with rgaps.Subscriber(topic) as sub:
            ready.set()
            for i in range(n):
                with sub.take(timeout=120) as msg:
                    res["gaps"] += msg.gap
                    a = to_array(msg, i)
                    ok = bool(xp.array_equal(a.reshape(-1), pattern(xp, int(msg.header), a.size)))
                    try:
                        res["ptr_equal"] += pointer(a) == msg.ptr
                    except Exception:  # noqa: BLE001  (not every version has it)
                        pass
                    res["good" if ok else "bad"] += 1
                    del a
    except Exception:  # noqa: BLE001
        res["errors"].append(traceback.format_exc())
    out.put(res)


def cupy_producer(topic, n, nsubs, out):
    res = {"lib": "cupy", "errors": []}
    try:
        import cupy

        import rgaps

        class CAIOnly:  # as a Numba device array: only __cuda_array_interface__
            def __init__(self, a):
                self.__cuda_array_interface__ = a.__cuda_array_interface__

        with rgaps.Publisher(topic) as pub:
            wait_until(lambda: subscribers(topic) >= nsubs, 120, "the consumers")
            for seq in range(n):
                a = pattern(cupy, seq)
                pub.publish(a if seq % 2 == 0 else CAIOnly(a), header=str(seq).encode(),
                            timeout=30)
    except Exception:  # noqa: BLE001
        res["errors"].append(traceback.format_exc())
    out.put(res)


def jax_producer(topic, n, nsubs, out):
    res = {"lib": "jax", "errors": []}
    try:
        import jax.numpy as jnp

        import rgaps

        with rgaps.Publisher(topic) as pub:
            wait_until(lambda: subscribers(topic) >= nsubs, 120, "the consumers")
            for seq in range(n):
                pub.publish(pattern(jnp, seq), header=str(seq).encode(), timeout=30)
    except Exception:  # noqa: BLE001
        res["errors"].append(traceback.format_exc())
    out.put(res)


def holder(topic, n, ready, out):
    import torch

    import rgaps

    sub = rgaps.Subscriber(topic)
    ready.set()
    keep = []
    for _ in range(n):
        with sub.take(timeout=120) as msg:
            keep.append(torch.from_dlpack(msg))
    torch.cuda.synchronize()
    out.put({"holding": sub.held})
    time.sleep(600)


# ---------------------------------------------------------------- the checks

def start(ctx, target, *args):
    p = ctx.Process(target=target, args=args, daemon=True)
    p.start()
    return p


def collect(out, procs, timeout):
    res = []
    deadline = time.monotonic() + timeout
    for _ in procs:
        res.append(out.get(timeout=max(1.0, deadline - time.monotonic())))
    for p in procs:
        p.join(10)
    return res


def judge_consumers(check, results, n):
    for r in results:
        name = r["lib"]
        if r["errors"]:
            record(check, "FAIL", f"{name} consumer: {r['errors'][-1].strip()[-600:]}")
        elif r["good"] != n or r["bad"] or r["gaps"]:
            record(check, "FAIL", f"{name} consumer: {r['good']} good, {r['bad']} wrong, "
                                  f"{r['gaps']} lost of {n}")
        else:
            extra = ""
            if "ptr_equal" in r:
                extra = f"; data pointer = message pointer in {r['ptr_equal']}/{n}"
            record(check, "ok", f"{name} consumer checked every element of {n} messages on the "
                               f"GPU{extra}")


def check_fanout(ctx, torch, rgaps):
    topic, n = "gpu-fan", 200
    out, ready = ctx.Queue(), [ctx.Event() for _ in range(4)]
    procs = [start(ctx, torch_consumer, topic, n, ready[i], out) for i in range(4)]
    with rgaps.Publisher(topic) as pub:
        for e in ready:
            if not e.wait(120):
                raise TimeoutError("a consumer did not attach in 120 s")
        loan_ptr_ok = 0
        for seq in range(n):
            x = pattern(torch, seq).reshape(1024, 1024)
            if seq % 2:
                with pub.loan((1024, 1024), torch.int32, header=str(seq).encode(),
                              timeout=30) as loan:
                    t = torch.from_dlpack(loan)  # the pool itself, writable
                    loan_ptr_ok += t.data_ptr() == loan.ptr
                    t.copy_(x)  # a kernel writes the message in place; commit waits for it
                    del t
            else:
                pub.publish(x, header=str(seq).encode(), timeout=30)
    results = collect(out, procs, 120)
    judge_consumers("fanout", results, n)
    for r in results:
        if r["errors"]:
            continue
        detail = (f"torch consumer: tensor pointer == message pointer {r['ptr_equal']}/{n}, "
                  f"no torch allocation {r['alloc_unchanged']}/{n}")
        if r["range"]:
            base, size, pool = r["range"]
            detail += (f", inside one device allocation [{base:#x}, +{size >> 20} MiB) "
                       f"{r['in_range']}/{n} (topic pool {pool >> 20} MiB"
                       f"{'' if size >= pool else ': the driver reports a smaller range'})")
            ok = r["in_range"] == n
        else:
            detail += f", allocation range not established ({r['range_error']})"
            ok = True
        ok = ok and r["ptr_equal"] == n and r["alloc_unchanged"] == n
        record("zero-copy", "ok" if ok else "FAIL", detail)
    record("zero-copy", "ok" if loan_ptr_ok == n // 2 else "FAIL",
           f"producer: torch.from_dlpack(loan) is the loaned block in {loan_ptr_ok}/{n // 2} loans")


def check_interop(ctx, torch, rgaps):
    n = 40
    # torch publishes; CuPy and JAX consume
    out, ready = ctx.Queue(), [ctx.Event() for _ in range(2)]
    procs = [start(ctx, array_consumer, "cupy", "gpu-ix1", n, ready[0], out),
             start(ctx, array_consumer, "jax", "gpu-ix1", n, ready[1], out)]
    with rgaps.Publisher("gpu-ix1") as pub:
        for e in ready:
            if not e.wait(120):
                raise TimeoutError("a consumer did not attach in 120 s")
        for seq in range(n):
            pub.publish(pattern(torch, seq), header=str(seq).encode(), timeout=30)
    judge_consumers("interop torch->cupy,jax", collect(out, procs, 120), n)
    # CuPy (DLPack and __cuda_array_interface__) and JAX publish; torch consumes
    for lib, producer in (("cupy", cupy_producer), ("jax", jax_producer)):
        topic = f"gpu-ix-{lib}"
        out, ready = ctx.Queue(), ctx.Event()
        cons = start(ctx, torch_consumer, topic, n, ready, out)
        pout = ctx.Queue()
        prod = start(ctx, producer, topic, n, 1, pout)
        presult = pout.get(timeout=180)
        if presult["errors"]:
            record(f"interop {lib}->torch", "FAIL",
                   f"{lib} producer: {presult['errors'][-1].strip()[-600:]}")
        judge_consumers(f"interop {lib}->torch", collect(out, [cons], 120), n)
        prod.join(10)


def check_streams(ctx, torch, rgaps):
    topic, n = "gpu-stream", 100
    out, ready = ctx.Queue(), ctx.Event()
    cons = start(ctx, torch_consumer, topic, n, ready, out, True)
    side = torch.cuda.Stream()
    with rgaps.Publisher(topic) as pub:
        if not ready.wait(120):
            raise TimeoutError("the consumer did not attach in 120 s")
        for seq in range(n):
            with torch.cuda.stream(side):
                # A slow kernel first, so that an unordered copy would see stale data.
                torch.cuda._sleep(200000)
                x = pattern(torch, seq)
                if seq % 2:
                    pub.publish(x, header=str(seq).encode(), stream=side, timeout=30)
                else:  # no stream=: the current stream (side) is ordered before the copy
                    pub.publish(x, header=str(seq).encode(), timeout=30)
            del x
    judge_consumers("streams", collect(out, [cons], 120), n)
    record("streams", "ok", f"stream-ordered C API: {'yes' if rgaps.STREAM_ORDERED else 'no (host waits)'}")


def check_kill(ctx, torch, rgaps):
    topic, n = "gpu-kill", 8
    out, ready = ctx.Queue(), ctx.Event()
    p = start(ctx, holder, topic, n, ready, out)
    pub = rgaps.Publisher(topic)
    try:
        if not ready.wait(120):
            raise TimeoutError("the holder did not attach in 120 s")
        for seq in range(n):
            pub.publish(pattern(torch, seq), header=str(seq).encode(), timeout=30)
        held = out.get(timeout=120)["holding"]
        used = pool_used(topic)
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        wait_until(lambda: subscribers(topic) == 0, 20, "rgapsd to see the holder gone")
        for seq in range(64):  # more than the pool holds while the dead holder's blocks are pinned
            pub.publish(pattern(torch, seq), timeout=10)
        pub.close()
        wait_until(lambda: pool_used(topic) == 0, 20, "the GPU pool to drain")
        ok = held == n and used >= n * 4 * N
        record("kill", "ok" if ok else "FAIL",
               f"a consumer SIGKILLed holding {held} GPU tensors ({used >> 20} MiB of the pool): "
               f"pool drained to 0, 64 more messages published")
    finally:
        if p.is_alive():
            p.kill()


def check_errors(torch, rgaps):
    import numpy as np

    with rgaps.Publisher("gpu-hostonly") as pub:
        try:
            pub.publish(torch.zeros(4, device="cuda"))
            record("errors", "FAIL", "a host topic accepted a GPU tensor")
        except ValueError as e:
            record("errors", "ok" if "GPU memory" in str(e) else "FAIL", f"host topic: {e}")
    with rgaps.Subscriber("gpu-err") as sub, rgaps.Publisher("gpu-err") as pub:
        pub.publish(torch.ones(3, device="cuda"))
        with sub.take(timeout=30) as msg:
            try:
                np.asarray(msg)
                record("errors", "FAIL", "numpy read a GPU message")
            except TypeError as e:
                record("errors", "ok" if "GPU memory" in str(e) else "FAIL", f"numpy: {e}")
            cai = msg.__cuda_array_interface__
            ok = cai["version"] == 3 and cai["data"] == (msg.ptr, True) and \
                msg.__dlpack_device__() == (2, 0)
            record("errors", "ok" if ok else "FAIL", f"__cuda_array_interface__ {cai}")


# ---------------------------------------------------------------- the sanitizer halves

def sanitizer_producer(topic, n):
    import torch

    import rgaps

    with rgaps.Publisher(topic) as pub:
        wait_until(lambda: subscribers(topic) >= 1, 180, "the consumer")
        for seq in range(n):
            pub.publish(pattern(torch, seq, 1 << 16), header=str(seq).encode(), timeout=60)
            with pub.loan((1 << 16,), torch.int32, header=str(seq).encode(), timeout=60) as loan:
                torch.from_dlpack(loan).copy_(pattern(torch, seq, 1 << 16))
    print(f"published {2 * n}")


def sanitizer_consumer(topic, n):
    import torch

    import rgaps

    good = 0
    with rgaps.Subscriber(topic) as sub:
        for _ in range(2 * n):
            with sub.take(timeout=180) as msg:
                t = torch.from_dlpack(msg)
                good += torch.equal(t, pattern(torch, int(msg.header), t.numel()))
                del t
                msg.release(stream=torch.cuda.current_stream())
    print(f"received {2 * n} verified {good}")
    return 0 if good == 2 * n else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "gpu_checks.json"))
    ap.add_argument("--only", help="comma-separated checks to run")
    ap.add_argument("--sanitizer-producer", metavar="TOPIC")
    ap.add_argument("--sanitizer-consumer", metavar="TOPIC")
    ap.add_argument("-n", type=int, default=20)
    a = ap.parse_args()
    if a.sanitizer_producer:
        return sanitizer_producer(a.sanitizer_producer, a.n)
    if a.sanitizer_consumer:
        return sanitizer_consumer(a.sanitizer_consumer, a.n)

    import torch

    import rgaps

    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA GPU")
        return 77
    ctx = mp.get_context("spawn")
    checks = {
        "fanout": lambda: check_fanout(ctx, torch, rgaps),
        "interop": lambda: check_interop(ctx, torch, rgaps),
        "streams": lambda: check_streams(ctx, torch, rgaps),
        "kill": lambda: check_kill(ctx, torch, rgaps),
        "errors": lambda: check_errors(torch, rgaps),
    }
    only = a.only.split(",") if a.only else list(checks)
    for name in only:
        t0 = time.monotonic()
        try:
            checks[name]()
        except Exception:  # noqa: BLE001
            record(name, "FAIL", traceback.format_exc().strip()[-1200:])
        print(f"   ({name}: {time.monotonic() - t0:.1f} s)", flush=True)
    with open(a.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "stream_ordered": rgaps.STREAM_ORDERED, "results": RESULTS}, f, indent=1)
    failed = [r for r in RESULTS if r["status"] == "FAIL"]
    print(f"{len(RESULTS) - len(failed)} ok, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
