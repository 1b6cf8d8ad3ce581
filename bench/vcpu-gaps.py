#!/usr/bin/env python3
"""How much time this machine takes from a thread that has a vCPU to itself: the floor under
any sender's stalls. On each vCPU at once, one process pinned there reads the clock in a loop
for SECONDS and counts the gaps between two reads longer than 200 µs (the thread did not run:
the hypervisor, an interrupt or a kernel thread had the vCPU). Of each gap it also counts
what a queue of COVER ms would not have covered (a 1,000-packet queue covers 1.2 ms at
10 Gbit/s): a sender stalled that long leaves the link idle for the rest.

Run it on an otherwise idle machine; it keeps every vCPU busy while it runs.

    bench/vcpu-gaps.py [--rounds N] [--seconds 4] [--cover-ms 1.2] [--json OUT]
"""
import argparse
import json
import multiprocessing
import os
import time

GAP_NS = 200_000


def spin(cpu, seconds, cover_ns, out):
    """Reads the clock on `cpu` for `seconds`; puts what it missed on `out`."""
    os.sched_setaffinity(0, {cpu})
    now = time.monotonic_ns
    prev = start = now()
    end = start + int(seconds * 1e9)
    gaps = total = longest = uncovered = 0
    while prev < end:
        t = now()
        gap = t - prev
        if gap > GAP_NS:
            gaps += 1
            total += gap
            longest = max(longest, gap)
            uncovered += max(0, gap - cover_ns)
        prev = t
    out.put({"cpu": cpu, "gaps": gaps, "gap_ms": total / 1e6, "longest_ms": longest / 1e6,
             "uncovered_ms": uncovered / 1e6})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--cover-ms", type=float, default=1.2)
    ap.add_argument("--json")
    a = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    rounds = []
    for r in range(a.rounds):
        q = multiprocessing.Queue()
        ps = [multiprocessing.Process(target=spin,
                                      args=(c, a.seconds, int(a.cover_ms * 1e6), q))
              for c in cpus]
        for p in ps:
            p.start()
        got = sorted((q.get() for _ in ps), key=lambda d: d["cpu"])
        for p in ps:
            p.join()
        rounds.append(got)
        for d in got:
            print(f"round {r + 1} vCPU {d['cpu']}: {d['gaps']} gaps over 200 µs, "
                  f"{d['gap_ms']:.1f} ms in all, longest {d['longest_ms']:.2f} ms, "
                  f"{d['uncovered_ms']:.1f} ms beyond {a.cover_ms} ms")
    for c in cpus:
        mine = [d for got in rounds for d in got if d["cpu"] == c]
        print(f"vCPU {c}: gaps {min(d['gap_ms'] for d in mine):.1f}-"
              f"{max(d['gap_ms'] for d in mine):.1f} ms per {a.seconds:g} s, longest "
              f"{max(d['longest_ms'] for d in mine):.2f} ms, beyond {a.cover_ms} ms "
              f"{min(d['uncovered_ms'] for d in mine):.1f}-"
              f"{max(d['uncovered_ms'] for d in mine):.1f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
