#!/usr/bin/env python3
"""Before/after of one change: two wirebench binaries, TCP and UDP streaming on loopback.

Each pair runs BEFORE and AFTER one after the other (the order alternating between pairs),
each as its own `serve` and `run --json`; the server is pinned to CPU 0 and the client to
CPU 1 (`--no-pin` to leave them to the scheduler, which on a 2-core VM swings single runs by
2x). Prints each pair's ratio (AFTER / BEFORE received bits/s), the median of the ratios, and
each end's CPU seconds per GB received with the median of its pair ratios.

    bench/ab.py BEFORE AFTER [--pairs N] [--seconds S] [--only tcp|udp] [--no-pin]
"""
import argparse
import json
import statistics
import subprocess
import time

LOADS = {"tcp": [], "udp": ["-u", "-b", "0", "-l", "1472"]}


def one(binary, port, args, seconds, pin):
    """One run of `binary`: its received bits/s and CPU s/GB per end."""
    taskset = (lambda cpu: ["taskset", "-c", cpu]) if pin else (lambda cpu: [])
    srv = subprocess.Popen(taskset("0") + [binary, "serve", "-p", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        cmd = taskset("1") + [binary, "run", "127.0.0.1", "-p", str(port), "--json",
                              "-t", str(seconds)] + args
        for _ in range(100):  # until the server listens
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode == 0 or "connect" not in r.stderr:
                break
            time.sleep(0.05)
        end = json.loads(r.stdout)["end"]
        gb = end["received"]["bytes"] / 1e9
        res = end["resources"]
        cpu = {side: (res[side]["cpu_user_s"] + res[side]["cpu_system_s"]) / gb
               for side in ("client", "server") if res.get(side)}
        return end["received_bps"], cpu
    finally:
        srv.terminate()
        srv.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--only", choices=sorted(LOADS))
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args()
    port = 5600
    for load, args in LOADS.items():
        if a.only and load != a.only:
            continue
        pairs = []
        for i in range(a.pairs):
            order = [("before", a.before), ("after", a.after)]
            got = {}
            for tag, binary in (order if i % 2 == 0 else order[::-1]):
                port += 1
                got[tag] = one(binary, port, args, a.seconds, not a.no_pin)
            pairs.append(got)
            print(f"{load} pair {i}: before {got['before'][0] / 1e9:.2f} Gbit/s, "
                  f"after {got['after'][0] / 1e9:.2f}, ratio "
                  f"{got['after'][0] / got['before'][0]:.3f}", flush=True)
        ratios = [p["after"][0] / p["before"][0] for p in pairs]
        print(f"{load}: median after/before {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}-{max(ratios):.3f}] over {len(ratios)} pairs")
        for side in ("client", "server"):
            b = [p["before"][1][side] for p in pairs]
            f = [p["after"][1][side] for p in pairs]
            r = [y / x for x, y in zip(b, f)]
            print(f"{load} {side}: CPU s/GB before {statistics.median(b):.3f}, after "
                  f"{statistics.median(f):.3f}, median pair ratio {statistics.median(r):.3f}")


if __name__ == "__main__":
    main()
