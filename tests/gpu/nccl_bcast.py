#!/usr/bin/env python3
"""NCCL broadcast to G GPUs of this host, the baseline of the multi-GPU fan-out
benchmark (tests/gpu/gpu_mbench.sh, docs/BENCHMARKS.md): one process per GPU
(PyTorch with its NCCL), rank 0 broadcasts a buffer of each size; per message,
the time from rank 0 starting the broadcast until the last rank has it in its
GPU's memory (CLOCK_MONOTONIC, one clock for the host), median over reps after
warm-ups. NVLink multicast stays off (NCCL_NVLS_ENABLE=0: the lent machines
must not use it).

    nccl_bcast.py --gpus 2,4 --sizes 4MiB,64MiB,1GiB --reps 20,10,5
Prints one line per point: RESULT nccl G=2 size=64MiB ms=0.290 msgs=10
"""
import argparse
import os
import socket
import sys
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")


def size_of(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return int(s[: -len(u)]) * m
    return int(s)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, sizes, reps, q):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))
    out = []
    for size, n in zip(sizes, reps):
        buf = torch.empty(size, dtype=torch.uint8, device="cuda")
        if rank == 0:
            buf.fill_(7)
        times = []
        for i in range(n + 3):
            torch.cuda.synchronize()
            dist.barrier()
            t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            dist.broadcast(buf, src=0)
            torch.cuda.synchronize()
            t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            stamp = torch.tensor([t0, t1], dtype=torch.int64, device="cuda")
            every = [torch.empty_like(stamp) for _ in range(world)]
            dist.all_gather(every, stamp)
            if i >= 3 and rank == 0:
                start = every[0][0].item()
                times.append((max(s[1].item() for s in every) - start) / 1e6)
        if rank == 0:
            ok = bool((buf[:1024] == 7).all().item())
            times.sort()
            m = len(times)
            med = times[m // 2] if m % 2 else (times[m // 2 - 1] + times[m // 2]) / 2
            out.append((size, med, m, ok))
        del buf
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="2")
    ap.add_argument("--sizes", default="4MiB,64MiB,1GiB")
    ap.add_argument("--reps", default="20,10,5")
    a = ap.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"SKIP nccl: PyTorch is not installed here ({e})")
        return 77
    if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
        print("SKIP nccl: no CUDA or no NCCL in this PyTorch")
        return 77
    ngpu = torch.cuda.device_count()
    names = a.sizes.split(",")
    sizes = [size_of(s) for s in names]
    reps = [int(r) for r in a.reps.split(",")]
    reps += [reps[-1]] * (len(sizes) - len(reps))
    print(f"nccl: torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
          f"{ngpu} x {torch.cuda.get_device_name(0)}, NCCL_NVLS_ENABLE=0", flush=True)
    ctx = mp.get_context("spawn")
    for g in [int(x) for x in a.gpus.split(",")]:
        if g < 2 or g > ngpu:
            print(f"nccl: G={g} not run ({ngpu} GPUs visible; a broadcast needs 2 or more)")
            continue
        q = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=worker, args=(r, g, port, sizes, reps, q)) for r in range(g)]
        for p in procs:
            p.start()
        res = q.get(timeout=300)
        for p in procs:
            p.join(timeout=60)
        for (size, med, m, ok), name in zip(res, names):
            print(f"RESULT nccl G={g} size={name} ms={med:.3f} msgs={m} bytes_ok={ok}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
