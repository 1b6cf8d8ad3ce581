#!/usr/bin/env python3
"""Why a 10 Gbit/s lab link delivers less than its rate in some runs: the link, or the
sender's stalls? Runs `lab --rate RATE --queue Q -- run -u -b 12G -l 1472` (or a TCP test,
`--tcp`) for each queue size asked, in turn (the order rotating from round to round), as
root, each run with or without an injected stall: a process that keeps a core busy for BUSY ms every PERIOD ms, as
this VM's own kernel threads (kdamond, rcu_preempt) do now and then for about 3 ms.

For each run it prints the payload received and sent (Gbit/s), the emulator's own drops,
the queue's drops, and, from the link log at 1 ms, what the link did while the load
overflowed its queue (from the first interval with a queue drop to the last): how long that
window was, how much of it the link spent serializing what it accepted, and the rest, its
idle time. A link that keeps
its rate whenever it has something to send is busy for the whole window but for the gaps
the sender left that the queue did not cover; a queue of Q packets covers a gap of
Q × 1500 bytes at the rate (1.2 ms for 1000 packets at 10 Gbit/s). Beside it, the link's own
count of that idle time (`idle_under_load_ns`, where the binary has it).

    bench/lab-stall.py BINARY [--queues 1000 10000] [--rounds N] [--warmup N]
                       [--stall 3/30] [--rate 10G] [--seconds 4] [--want 9.712] [--tcp]
                       [--json OUT]

`--stall 0` runs without the injected stall; `--stall 3/30 --both` runs each queue with and
without it. The rounds follow `--warmup` runs (1 by default) through the first queue, without
the stall, printed and kept in the JSON but not counted (see bench/lab-ab.py).
"""
import argparse
import csv
import json
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import time


def hog(busy_s, period_s):
    """Keeps a core busy for `busy_s` every `period_s`, until killed."""
    while True:
        t = time.perf_counter()
        while time.perf_counter() - t < busy_s:
            pass
        time.sleep(period_s - busy_s)


def rate_bps(text):
    """`10G` -> 1e10."""
    scale = {"K": 1e3, "M": 1e6, "G": 1e9}
    return float(text[:-1]) * scale[text[-1].upper()] if text[-1].isalpha() else float(text)


def loaded_window(log_path, rate):
    """From a link log: the up direction's window from its first interval with a queue drop
    to its last, in ms; and of that, the ms the link spent serializing what it accepted."""
    with open(log_path) as f:
        up = [r for r in csv.DictReader(f) if r["direction"] == "up"]
    rows = [r for r in up if int(r["dropped_queue"]) > 0]
    if not rows:
        return None, None
    t0, t1 = float(rows[0]["t_s"]), float(rows[-1]["t_s"])
    inside = [r for r in up if t0 <= float(r["t_s"]) <= t1]
    busy_s = sum(int(r["delivered_bytes"]) for r in inside) * 8 / rate
    # Each row is one 1 ms interval, stamped at its start.
    return (t1 - t0) * 1e3 + 1, busy_s * 1e3


def one(binary, rate, queue, seconds, tcp):
    """One lab run: a dict of what it measured."""
    load = [] if tcp else ["-u", "-b", "12G", "-l", "1472"]
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "links.csv")
        cmd = [binary, "lab", "--rate", rate, "--queue", str(queue), "--link-log", log,
               "--link-log-interval", "1ms", "--", "run", "--json", "-t", str(seconds)] + load
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return {"error": r.stderr.strip().splitlines()[-1:]}
        window_ms, busy_ms = loaded_window(log, rate_bps(rate))
    d = json.loads(r.stdout)
    up = d["lab"]["links"][0]["up"]
    out = {
        "received_gbps": d["end"]["received_bps"] / 1e9,
        "sent_gbps": d["end"]["sent_bps"] / 1e9,
        "emulator_drops": up["emulator_drops"],
        "dropped_queue": up["dropped_queue"],
        "late_over_100us": up["late_over_100us"],
    }
    if "idle_under_load_ns" in up:
        out["idle_under_load_ms"] = up["idle_under_load_ns"] / 1e6
    # A load that never overflowed the queue (a TCP sender short of the rate) has no window.
    if window_ms:
        # The log's 1 ms intervals round the window: a link busy throughout may come out a
        # microsecond over it.
        out.update(window_ms=window_ms, busy_ms=busy_ms, idle_ms=max(window_ms - busy_ms, 0.0))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--queues", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--stall", default="3/30", help="BUSY/PERIOD ms, or 0 for none")
    ap.add_argument("--both", action="store_true", help="each queue with and without the stall")
    ap.add_argument("--rate", default="10G")
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--want", type=float, help="Gbit/s a run must receive (9.712; TCP 9.3)")
    ap.add_argument("--tcp", action="store_true", help="a TCP test instead of UDP at 12G")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.want = a.want or (9.3 if a.tcp else 9.712)
    stalls = ["0", a.stall] if a.both else [a.stall]
    cases = [(q, s) for s in stalls for q in a.queues]
    runs = {f"queue {q}, stall {s}": [] for q, s in cases}
    warmup = []
    for i in range(a.warmup):
        r = one(a.binary, a.rate, a.queues[0], a.seconds, a.tcp)
        warmup.append(r)
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
        print(f"warm-up {i + 1} (not counted): {shown}", flush=True)
    for i in range(a.rounds):
        for q, s in cases[i % len(cases):] + cases[:i % len(cases)]:
            h = None
            if s != "0":
                busy, period = (float(x) / 1e3 for x in s.split("/"))
                h = multiprocessing.Process(target=hog, args=(busy, period), daemon=True)
                h.start()
            try:
                r = one(a.binary, a.rate, q, a.seconds, a.tcp)
            finally:
                if h:
                    h.kill()
                    h.join()
            key = f"queue {q}, stall {s}"
            runs[key].append(r)
            shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
            print(f"round {i + 1} {key}: {shown}", flush=True)
    for key, rs in runs.items():
        got = [r["received_gbps"] for r in rs if "received_gbps" in r]
        idle = [r["idle_ms"] for r in rs if "idle_ms" in r]
        if got:
            print(f"{key}: {sum(g >= a.want for g in got)} of {len(rs)} runs >= {a.want} Gbit/s; "
                  f"median {statistics.median(got):.3f}; link idle under load, median "
                  f"{statistics.median(idle) if idle else float('nan'):.1f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "load": os.getloadavg(), "warmup": warmup, "runs": runs},
                      f, indent=1)


if __name__ == "__main__":
    main()
