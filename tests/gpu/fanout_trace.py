#!/usr/bin/env python3
"""Where the microseconds of a fan-out go: gpu-bench's per-message times
(GPU_BENCH_RAW) lined up with the futex calls of every process
(tests/gpu/futex_trace.c, FUTEX_TRACE_DIR).

    fanout_trace.py RAW_FILE TRACE_DIR

For each scheme, subscriber count and size, medians over the timed messages
(microseconds from the publish call's start unless said otherwise):

  last       the last subscriber's take() returned (the benchmark's figure)
  first      the first one's
  wake_at    the publisher entered the FUTEX_WAKE of its doorbell (the
             message is committed; before it: loan, copy, commit)
  wake_us    that FUTEX_WAKE call's own length, and how many it woke
  pub_ret    the publish call returned
  slept      subscribers that were asleep (a futex wait of theirs ended
             inside the message's window)
  up_1st / up_mid / up_last
             when the first, middle and last of those woke (their wait's end),
             counted from wake_at
  take_after how long after its wake a subscriber's take() returned (median,
             max over the message's subscribers)
"""
import collections
import glob
import os
import statistics as st
import sys


def load_traces(d):
    calls = {}
    for f in glob.glob(os.path.join(d, "futex.*")):
        pid = int(f.rsplit(".", 1)[1])
        rows = []
        for line in open(f):
            if line.startswith("#"):
                continue
            enter, exit_, op, uaddr, val, res = line.split()
            rows.append((int(enter), int(exit_), op, uaddr, int(res)))
        rows.sort()
        calls[pid] = rows
    return calls


def med(v):
    return st.median(v) if v else float("nan")


def main():
    raw, tdir = sys.argv[1], sys.argv[2]
    calls = load_traces(tdir)
    cells = collections.OrderedDict()
    for line in open(raw):
        f = line.split()
        scheme, n, size, rep, t0, tpub = f[0], int(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5])
        if rep == 0:
            continue
        subs = [(int(p), int(t)) for p, t in (x.split(":") for x in f[6:])]
        sub_pids = {p for p, _ in subs}
        tlast = max(t for _, t in subs)
        # The publisher's doorbell wake: a FUTEX_WAKE by a process that is no subscriber,
        # inside the publish call.
        wakes = [(e, x, r) for pid, rows in calls.items() if pid not in sub_pids
                 for (e, x, op, ua, r) in rows if op == "wake" and t0 <= e <= tpub]
        wake = max(wakes, key=lambda w: w[2]) if wakes else None
        ups, after = [], []
        for pid, ttake in subs:
            ends = [x for (e, x, op, ua, r) in calls.get(pid, [])
                    if op in ("wait", "waitv") and t0 <= x <= ttake]
            if ends:
                ups.append(ends[-1])
                after.append((ttake - ends[-1]) / 1e3)
        ups.sort()
        c = cells.setdefault((scheme, n, size), collections.defaultdict(list))
        c["last"].append((tlast - t0) / 1e3)
        c["first"].append((min(t for _, t in subs) - t0) / 1e3)
        c["pub_ret"].append((tpub - t0) / 1e3)
        c["slept"].append(len(ups))
        if wake:
            c["wake_at"].append((wake[0] - t0) / 1e3)
            c["wake_us"].append((wake[1] - wake[0]) / 1e3)
            c["woken"].append(wake[2])
            if ups:
                c["up_1st"].append((ups[0] - wake[0]) / 1e3)
                c["up_mid"].append((ups[len(ups) // 2] - wake[0]) / 1e3)
                c["up_last"].append((ups[-1] - wake[0]) / 1e3)
        if after:
            c["after_med"].append(med(after))
            c["after_max"].append(max(after))
    cols = ["last", "first", "wake_at", "wake_us", "woken", "pub_ret", "slept", "up_1st",
            "up_mid", "up_last", "after_med", "after_max"]
    print("medians over the timed messages, us from the publish call's start "
          "(up_*: from the publisher's FUTEX_WAKE)")
    print(f"{'scheme':12} {'N':>3} {'size':>9} {'msgs':>4} " +
          " ".join(f"{c:>9}" for c in cols))
    for (scheme, n, size), c in cells.items():
        print(f"{scheme:12} {n:3d} {size:9d} {len(c['last']):4d} " +
              " ".join(f"{med(c[k]):9.2f}" for k in cols))


if __name__ == "__main__":
    main()
