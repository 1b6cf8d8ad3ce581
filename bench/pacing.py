#!/usr/bin/env python3
"""How faithfully and at what CPU a paced UDP stream is sent, for one or more wirebench
binaries, on loopback: for each rate, a 2-second `run -u -b RATE -l 1472 -R` with a packet log
(the lateness: each datagram's send time in its header against the schedule of the asked rate
from the first datagram; the least lateness seen is taken as 0), then a 3-second `run -u -b
RATE` (the sending client's CPU, from `end.resources.client`).

    bench/pacing.py BINARY [BINARY ...] [--rates 500M,1G,4G] [--port 5397]
"""
import argparse
import csv
import io
import json
import os
import subprocess
import tempfile
import time


def serve(binary, port):
    srv = subprocess.Popen([binary, "serve", "-p", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.4)  # until it listens
    return srv


def bits_per_s(rate):
    units = {"K": 1e3, "M": 1e6, "G": 1e9}
    return float(rate[:-1]) * units[rate[-1]] if rate[-1] in units else float(rate)


def lateness_us(binary, rate, port):
    """Percentiles 50, 99, 99.9 of the datagrams' lateness, µs."""
    srv = serve(binary, port)
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "packets.bin")
        try:
            subprocess.run([binary, "run", "127.0.0.1", "-p", str(port), "-u", "-b", rate,
                            "-l", "1472", "-t", "2", "-R", "--packet-log", log, "--json"],
                           capture_output=True, check=True)
        finally:
            srv.kill()
            srv.wait()
        out = subprocess.run([binary, "packet-log", log], capture_output=True, text=True).stdout
    rows = [r for r in csv.DictReader(io.StringIO(out)) if r["kind"] == "received"]
    per_ns = 1472 * 8 * 1e9 / bits_per_s(rate)
    t0, s0 = int(rows[0]["send_unix_ns"]), int(rows[0]["seq"])
    late = sorted(int(r["send_unix_ns"]) - t0 - (int(r["seq"]) - s0) * per_ns for r in rows)
    late = [x - late[0] for x in late]
    return [late[int(p * (len(late) - 1))] / 1e3 for p in (0.5, 0.99, 0.999)]


def sender_cpu(binary, rate, port):
    """The sending client's CPU, share of a core, and the rate it sent, Gbit/s."""
    srv = serve(binary, port)
    try:
        r = subprocess.run([binary, "run", "127.0.0.1", "-p", str(port), "-u", "-b", rate,
                            "-l", "1472", "-t", "3", "--json"],
                           capture_output=True, text=True, check=True)
    finally:
        srv.kill()
        srv.wait()
    end = json.loads(r.stdout)["end"]
    c = end["resources"]["client"]
    return (c["cpu_user_s"] + c["cpu_system_s"]) / end["sent"]["duration_s"], end["sent_bps"] / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--rates", default="500M,1G,4G")
    ap.add_argument("--port", type=int, default=5397)
    a = ap.parse_args()
    for rate in a.rates.split(","):
        for b in a.binaries:
            p50, p99, p999 = lateness_us(b, rate, a.port)
            cpu, sent = sender_cpu(b, rate, a.port)
            print(f"{rate:>5} {b}: lateness p50 {p50:.1f} µs, p99 {p99:.1f} µs, "
                  f"p99.9 {p999:.1f} µs; sender {cpu * 100:.0f}% of a core at {sent:.3f} Gbit/s",
                  flush=True)


if __name__ == "__main__":
    main()
