#!/usr/bin/env python3
"""wirebench side by side with its peers on loopback: iperf3 for throughput, sockperf for
request/response latency.

Each workload runs wirebench and the peer back to back, RUNS times each (alternating, so a
noisy neighbour hurts both alike), and the table shows the median of each and their ratio.
Absolute numbers on a shared machine are noisy; the ratios measured in one run are the result.

    bench/run            # or: python3 bench/bench.py [--runs N] [--seconds S] [--only NAME]

The peers come from Debian (iperf3 3.12, sockperf 3.7); bench/run installs them if missing.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WB = os.path.join(ROOT, "target", "release", "wirebench")
HOST = "127.0.0.1"
WB_PORT = 5310
IPERF_PORT = 5311
SOCKPERF_UDP_PORT = 5312
SOCKPERF_TCP_PORT = 5313


def sh(args, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


class Servers:
    """The servers of every tool, started once, ended on exit."""

    def __init__(self):
        self.procs = []

    def start(self, args):
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def __enter__(self):
        self.start([WB, "serve", "--bind", HOST, "--port", str(WB_PORT), "--quiet",
                    "--max-tests", "1"])
        self.start(["iperf3", "-s", "-B", HOST, "-p", str(IPERF_PORT)])
        self.start(["sockperf", "sr", "-i", HOST, "-p", str(SOCKPERF_UDP_PORT)])
        self.start(["sockperf", "sr", "--tcp", "-i", HOST, "-p", str(SOCKPERF_TCP_PORT)])
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()


# ---- one run of each tool: returns a dict of figures ----

def wirebench(args, seconds):
    out = sh([WB, "run", HOST, "--port", str(WB_PORT), "--json", "-t", f"{seconds}s"] + args)
    if not out.stdout:
        raise RuntimeError(f"wirebench {args}: {out.stderr.strip()}")
    v = json.loads(out.stdout)
    e = v["end"]
    r = {
        "recv_gbps": e["received_bps"] / 1e9,
        "recv_mpps": e["received"]["messages"] / max(e["received"]["duration_s"], 1e-9) / 1e6,
        "sent_bps": e["sent_bps"],
    }
    if e.get("udp"):
        # Accounting error: a datagram neither received nor counted lost (must be 0).
        r["acct_err"] = abs(e["sent"]["messages"] - e["received"]["messages"] - e["udp"]["lost"])
        r["loss_pct"] = e["udp"]["loss_ratio"] * 100
    if e.get("latency_us"):
        r["p50_us"] = e["latency_us"]["p50"]
        r["p99_us"] = e["latency_us"]["p99"]
    if e.get("send_rate_spread"):
        r["spread"] = e["send_rate_spread"]
    return r


def iperf3(args, seconds, udp_size=None):
    out = sh(["iperf3", "-c", HOST, "-p", str(IPERF_PORT), "-J", "-t", str(seconds)] + args,
             timeout=seconds + 60)
    v = json.loads(out.stdout)
    if "error" in v:
        raise RuntimeError(f"iperf3 {args}: {v['error']}")
    e = v["end"]
    rcv, snt = e["sum_received"], e["sum_sent"]
    r = {"recv_gbps": rcv["bits_per_second"] / 1e9, "sent_bps": snt["bits_per_second"]}
    if udp_size:
        got = rcv["packets"] - rcv["lost_packets"]
        r["recv_mpps"] = got / rcv["seconds"] / 1e6
        r["recv_gbps"] = got * udp_size * 8 / rcv["seconds"] / 1e9
        r["loss_pct"] = rcv["lost_percent"]
    return r


def sockperf(tcp, size, seconds):
    port = SOCKPERF_TCP_PORT if tcp else SOCKPERF_UDP_PORT
    args = ["sockperf", "pp", "-i", HOST, "-p", str(port), "-m", str(size), "-t",
            str(seconds), "--full-rtt"] + (["--tcp"] if tcp else [])
    out = sh(args, timeout=seconds + 60).stdout
    r = {}
    for line in out.splitlines():
        if "percentile 50.000" in line:
            r["p50_us"] = float(line.split("=")[1])
        if "percentile 99.000" in line:
            r["p99_us"] = float(line.split("=")[1])
    if not r:
        raise RuntimeError(f"sockperf: no percentiles in {out[-300:]}")
    return r


# ---- the workloads ----

def udp(size, offload=True):
    extra = [] if offload else ["--no-offload"]
    return (
        lambda s: wirebench(["-u", "-l", str(size), "-b", "0"] + extra, s),
        lambda s: iperf3(["-u", "-l", str(size), "-b", "0"], s, udp_size=size),
        ["recv_gbps", "recv_mpps"],
    )


WORKLOADS = {
    "udp-1472": udp(1472),
    "udp-500": udp(500),
    "udp-64": udp(64),
    "udp-1472-no-offload": udp(1472, False),
    "udp-500-no-offload": udp(500, False),
    "udp-64-no-offload": udp(64, False),
    "tcp-1": (lambda s: wirebench([], s), lambda s: iperf3([], s), ["recv_gbps"]),
    "tcp-4": (lambda s: wirebench(["-P", "4"], s), lambda s: iperf3(["-P", "4"], s),
              ["recv_gbps"]),
    "rr-udp-64": (lambda s: wirebench(["-u", "--mode", "rr", "-l", "64"], s),
                  lambda s: sockperf(False, 64, s), ["p50_us", "p99_us"]),
    "rr-tcp-64": (lambda s: wirebench(["--mode", "rr", "-l", "64"], s),
                  lambda s: sockperf(True, 64, s), ["p50_us", "p99_us"]),
    "udp-paced-1G": (lambda s: wirebench(["-u", "-l", "1472", "-b", "1G"], s),
                     lambda s: iperf3(["-u", "-l", "1472", "-b", "1G"], s, udp_size=1472),
                     ["rate_err_pct"]),
}


def derive(r):
    if "sent_bps" in r:
        r["rate_err_pct"] = abs(r["sent_bps"] - 1e9) / 1e9 * 100
    return r


def median(runs, key):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=int(os.environ.get("RUNS", 3)))
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("SECONDS_PER_RUN", 5)))
    ap.add_argument("--only", action="append", help="workload name (repeatable)")
    opts = ap.parse_args()
    for tool in ("iperf3", "sockperf"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: run bench/run, which installs it")
    names = opts.only or list(WORKLOADS)
    rows = []
    with Servers():
        for name in names:
            ours, peer, keys = WORKLOADS[name]
            wb_runs, peer_runs, errors = [], [], []
            for _ in range(opts.runs):
                for runs, fn in ((wb_runs, ours), (peer_runs, peer)):
                    try:
                        runs.append(derive(fn(opts.seconds)))
                    except Exception as e:  # a failed run is reported, not fatal
                        errors.append(str(e).splitlines()[0][:120])
                    time.sleep(0.5)
            for key in keys:
                a, b = median(wb_runs, key), median(peer_runs, key)
                ratio = a / b if a is not None and b else None
                acct = max((r.get("acct_err", 0) for r in wb_runs), default=None)
                rows.append((name, key, a, b, ratio, acct if key != "p99_us" else None))
            for e in errors:
                print(f"# {name}: {e}", file=sys.stderr)
            print(f"# {name} done", file=sys.stderr)
    fmt = lambda x: "n/a" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))
    print(f"runs per tool: {opts.runs}, {opts.seconds} s each; medians; ratio = wirebench / peer")
    print("| workload | figure | wirebench | peer | ratio | wirebench accounting error |")
    print("|---|---|---|---|---|---|")
    for name, key, a, b, ratio, acct in rows:
        print(f"| {name} | {key} | {fmt(a)} | {fmt(b)} | {fmt(ratio)} | {fmt(acct)} |")


if __name__ == "__main__":
    main()
