#!/usr/bin/env python3
"""QUIC bulk goodput on loopback: wirebench against quinn's own perf tool, and against
wirebench's TCP, in interleaved rounds, with each process's CPU seconds per GB moved.

quinn's perf tool is built from quinn's source (not committed here): clone
https://github.com/quinn-rs/quinn, `cargo build --release -p perf`, and give the binary
(`target/release/quinn-perf`) with --quinn-perf. Both stacks encrypt (TLS 1.3, AES-GCM as
rustls with ring chooses); both send one stream of one connection, upload only.

Packet sizes differ by default: quinn's perf tool probes the path for packets of up to
1452 bytes (quinn's default), wirebench up to what the path's MTU allows (loopback's is
64 KiB), at most 6500 (ten of those fill one GSO send); `wb-1452` is wirebench held to
quinn's size, so that the stacks' per-packet work is compared at equal packets too.

The loads, each S seconds, in a round (their order alternating between rounds):
  quinn     quinn-perf server  +  quinn-perf client --upload-size 1T --download-size 0
  wirebench wirebench serve    +  wirebench run --quic  (wirebench's protocol)
  wb-1452   the same with --quic-mtu 1452: quinn's packet size, the stacks side by side
  perf      quinn-perf server  +  wirebench run --quic-perf (wirebench's client, quinn's server)
  tcp       wirebench serve    +  wirebench run         (TCP, for reference)

Goodput is what the sending client moved over its own time (the perf protocol has no
report; quinn's client counts what it wrote and saw acknowledged); CPU is each process's
user + system time (wait4's rusage) over the bytes moved. Server pinned to CPU 0, client
to CPU 1. Prints each round, then the medians and the median of each round's ratio to
quinn's.

    bench/quic.py --quinn-perf PATH [--wirebench PATH] [--rounds N] [--seconds S]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time


def cpu_of(proc):
    """Waits for `proc` and returns its user + system CPU seconds."""
    _, _, ru = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return ru.ru_utime + ru.ru_stime


def start(cmd, cpu):
    return subprocess.Popen(["taskset", "-c", cpu] + cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def server_banner(proc):
    """The first line of a server that prints one when it listens."""
    return proc.stdout.readline()


def quinn(perf, port, seconds):
    srv = start([perf, "server", "--listen", f"127.0.0.1:{port}"], "0")
    time.sleep(0.5)  # quinn's perf server prints nothing when it listens
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cli = start([perf, "client", f"127.0.0.1:{port}", "--download-size", "0",
                     "--upload-size", "1T", "--duration", str(seconds),
                     "--json", out.name], "1")
        cli_cpu = cpu_of(cli)
        srv.terminate()
        srv_cpu = cpu_of(srv)
        stats = json.load(open(out.name))
    # Its intervals' sums: what the client sent in each (an upload only sends).
    ivs = stats.get("intervals", [])
    sent = sum(i["sum"]["bytes"] for i in ivs)
    secs = sum(i["sum"]["seconds"] for i in ivs) or seconds
    return sent, secs, cli_cpu, srv_cpu


def wirebench(wb, port, seconds, extra, perf=None):
    if perf:
        srv = start([perf, "server", "--listen", f"127.0.0.1:{port}"], "0")
        time.sleep(0.5)
        target = ["--quic-perf", f"127.0.0.1:{port}", "--quic-insecure"]
    else:
        srv = start([wb, "serve", "-p", str(port), "--bind", "127.0.0.1"], "0")
        banner = server_banner(srv)
        key = banner.split("key ")[1].strip().rstrip(")") if "key " in banner else None
        target = ["127.0.0.1", "-p", str(port)]
        if "--quic" in extra:
            target += ["--quic-pin", key]
    cli = start([wb, "run"] + target + extra + ["-t", str(seconds), "--json"], "1")
    out = cli.stdout.read()
    cli_cpu = cpu_of(cli)
    srv.terminate()
    srv_cpu = cpu_of(srv)
    end = json.loads(out)["end"]
    return end["sent"]["bytes"], end["duration_s"], cli_cpu, srv_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quinn-perf", required=True)
    ap.add_argument("--wirebench", default="target/release/wirebench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    loads = {
        "quinn": lambda p: quinn(a.quinn_perf, p, a.seconds),
        "wirebench": lambda p: wirebench(a.wirebench, p, a.seconds, ["--quic"]),
        "wb-1452": lambda p: wirebench(a.wirebench, p, a.seconds, ["--quic", "--quic-mtu", "1452"]),
        "perf": lambda p: wirebench(a.wirebench, p, a.seconds, [], perf=a.quinn_perf),
        "tcp": lambda p: wirebench(a.wirebench, p, a.seconds, []),
    }
    rows = {k: [] for k in loads}
    port = 5700
    for r in range(a.rounds):
        order = list(loads) if r % 2 == 0 else list(reversed(list(loads)))
        for name in order:
            port += 1
            sent, secs, cli, srv = loads[name](port)
            gb = sent / 1e9
            row = {"gbps": sent * 8 / secs / 1e9, "client_cpu_s_per_gb": cli / gb,
                   "server_cpu_s_per_gb": srv / gb}
            rows[name].append(row)
            print(f"round {r + 1} {name:10} {row['gbps']:6.2f} Gbit/s  client "
                  f"{row['client_cpu_s_per_gb']:5.2f} s/GB  server "
                  f"{row['server_cpu_s_per_gb']:5.2f} s/GB", flush=True)
    summary = {}
    for name, rs in rows.items():
        med = {k: statistics.median(x[k] for x in rs) for k in rs[0]}
        ratio = statistics.median(x["gbps"] / q["gbps"] for x, q in zip(rs, rows["quinn"]))
        summary[name] = dict(med, ratio_to_quinn=ratio)
        print(f"median {name:10} {med['gbps']:6.2f} Gbit/s  ×{ratio:.2f} of quinn  client "
              f"{med['client_cpu_s_per_gb']:5.2f} s/GB  server {med['server_cpu_s_per_gb']:5.2f} s/GB")
    if a.json:
        json.dump({"rounds": rows, "median": summary, "seconds": a.seconds}, open(a.json, "w"),
                  indent=1)


if __name__ == "__main__":
    main()
