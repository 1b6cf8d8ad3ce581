#!/usr/bin/env python3
"""wirebench beside its peers and beside a limit probe on loopback, in interleaved rounds.

Each workload has members: wirebench, a peer tool (iperf3 3.12, sockperf 3.7) and/or the
limit probe (bench/probe, the simplest program that moves the bytes). A round runs every
member once, one after the other; the order alternates between rounds (A B, then B A), so
no member always goes first. The result of a round is the ratio of two members' figures
measured within seconds of each other; the bench reports the median of those per-round
ratios and their spread (min-max and the interquartile range), not the ratio of medians.
On a shared, noisy machine the absolute figures drift between rounds; a ratio within a round
mostly does not.

CPU: every end of every member is counted. A client or probe end is a child of this script,
and its user + system time comes from wait4(2). A long-running server (wirebench serve,
iperf3 -s, sockperf sr) is read from /proc/PID/stat (utime + stime of all its threads)
before and after the client runs. Both ends' seconds, divided by the gigabytes received,
is "CPU s/GB".

    bench/run                        # 5 rounds of 5 s per member and workload
    bench/run --quick                # smoke run: 2 rounds of 1 s
    python3 bench/bench.py [--pairs N] [--seconds S] [--only NAME] [--all] [--json PATH]

The table is printed (Markdown); the JSON (every run's figures, the summaries, the machine's
load) goes to bench/results/<UTC time>.json unless --json says where.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WB = os.path.join(ROOT, "target", "release", "wirebench")
PROBE = os.path.join(ROOT, "target", "bench-probe", "release", "probe")
HOST = "127.0.0.1"
WB_PORT = 5310
IPERF_PORT = 5311
SOCKPERF_UDP_PORT = 5312
SOCKPERF_TCP_PORT = 5313
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Pause between runs: lets a server finish its side of the last test before the next starts,
# and its CPU be read after it did.
SETTLE_S = 0.5


class RunError(Exception):
    """One run failed; the round is reported without it, the bench goes on."""


# ---- processes and their CPU time ----

def proc_cpu_s(pid):
    """utime + stime of a live process, all its threads, in seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; the fields after its ')' are fixed.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Child:
    """A child process whose CPU time is taken from wait4 when it ends."""

    def __init__(self, args, timeout):
        self.args = args
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.err)
        self.killer = threading.Timer(timeout, self._kill)
        self.killer.start()

    def _kill(self):
        try:
            self.p.kill()
        except ProcessLookupError:
            pass

    def readline(self):
        return self.p.stdout.readline().decode(errors="replace")

    def finish(self):
        """Waits for the end; returns (stdout, cpu seconds). Raises RunError on failure."""
        out = self.p.stdout.read().decode(errors="replace")
        _, status, ru = os.wait4(self.p.pid, 0)
        self.p.returncode = os.waitstatus_to_exitcode(status)
        self.killer.cancel()
        self.err.seek(0)
        err = self.err.read().decode(errors="replace").strip()
        self.err.close()
        if self.p.returncode != 0:
            raise RunError(f"{os.path.basename(self.args[0])} exited "
                           f"{self.p.returncode}: {err[-200:] or out[-200:]}")
        return out, ru.ru_utime + ru.ru_stime


class Servers:
    """The peers' and wirebench's servers, started once, ended on exit."""

    def __init__(self):
        self.procs = {}

    def __enter__(self):
        def start(name, args):
            self.procs[name] = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL)
        start("wirebench", [WB, "serve", "--bind", HOST, "--port", str(WB_PORT), "--quiet",
                            "--max-tests", "1"])
        start("iperf3", ["iperf3", "-s", "-B", HOST, "-p", str(IPERF_PORT)])
        start("sockperf-udp", ["sockperf", "sr", "-i", HOST, "-p", str(SOCKPERF_UDP_PORT)])
        start("sockperf-tcp", ["sockperf", "sr", "--tcp", "-i", HOST, "-p",
                               str(SOCKPERF_TCP_PORT)])
        time.sleep(1.0)
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise SystemExit(f"the {name} server did not start (port taken?)")
        return self

    def __exit__(self, *exc):
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def client_run(args, server_pid, seconds):
    """Runs a client against a standing server; returns (stdout, cpu s of both ends)."""
    before = proc_cpu_s(server_pid)
    out, client_cpu = Child(args, seconds + 60).finish()
    time.sleep(SETTLE_S)  # the server's side of the test ends after the client's
    return out, client_cpu + proc_cpu_s(server_pid) - before


def throughput(bytes_, secs, cpu):
    if secs <= 0 or bytes_ <= 0:
        raise RunError("nothing received")
    return {"recv_gbps": bytes_ * 8 / secs / 1e9, "cpu_s": cpu, "recv_bytes": bytes_,
            "cpu_s_per_gb": cpu / (bytes_ / 1e9)}


# ---- the members: one run each, a dict of figures ----

def wirebench(servers, args, seconds):
    out, cpu = client_run([WB, "run", HOST, "--port", str(WB_PORT), "--json",
                           "-t", f"{seconds}s"] + args, servers.procs["wirebench"].pid, seconds)
    try:
        e = json.loads(out)["end"]
    except (ValueError, KeyError) as err:
        raise RunError(f"wirebench {args}: unreadable results ({err})")
    rcv = e["received"]
    r = {"cpu_s": cpu}
    if e.get("latency_us"):
        r["p50_us"] = e["latency_us"]["p50"]
        r["p99_us"] = e["latency_us"]["p99"]
    else:
        # First to last byte received: the span the probe's receiver measures too.
        span = rcv.get("transfer_s") or rcv["duration_s"]
        r = throughput(rcv["bytes"], span, cpu)
        r["recv_mpps"] = rcv["messages"] / max(span, 1e-9) / 1e6
        r["recv_gbps_test"] = e["received_bps"] / 1e9  # over the whole test, as printed
    if e.get("udp"):
        # Accounting error: datagrams neither received nor counted lost (must be 0).
        r["acct_err"] = e["sent"]["messages"] - rcv["messages"] - e["udp"]["lost"]
        r["loss_pct"] = e["udp"]["loss_ratio"] * 100
    return r


def iperf3(servers, args, seconds, udp_size=None):
    out, cpu = client_run(["iperf3", "-c", HOST, "-p", str(IPERF_PORT), "-J",
                           "-t", str(seconds)] + args, servers.procs["iperf3"].pid, seconds)
    try:
        v = json.loads(out)
    except ValueError as err:
        raise RunError(f"iperf3 {args}: unreadable output ({err})")
    if "error" in v:
        raise RunError(f"iperf3 {args}: {v['error']}")
    rcv = v["end"]["sum_received"]
    if not udp_size:
        return throughput(rcv["bytes"], rcv["seconds"], cpu)
    # iperf3 3.12's UDP sum_received counts what was sent: what arrived is packets - lost.
    got = rcv["packets"] - rcv["lost_packets"]
    r = throughput(got * udp_size, rcv["seconds"], cpu)
    r["recv_mpps"] = got / max(rcv["seconds"], 1e-9) / 1e6
    r["loss_pct"] = rcv["lost_percent"]
    return r


def sockperf(servers, tcp, size, seconds):
    name = "sockperf-tcp" if tcp else "sockperf-udp"
    port = SOCKPERF_TCP_PORT if tcp else SOCKPERF_UDP_PORT
    out, cpu = client_run(["sockperf", "pp", "-i", HOST, "-p", str(port), "-m", str(size),
                           "-t", str(seconds), "--full-rtt"] + (["--tcp"] if tcp else []),
                          servers.procs[name].pid, seconds)
    r = {"cpu_s": cpu}
    for line in out.splitlines():
        if "percentile 50.000" in line:
            r["p50_us"] = float(line.split("=")[1])
        if "percentile 99.000" in line:
            r["p99_us"] = float(line.split("=")[1])
    if "p50_us" not in r:
        raise RunError(f"sockperf: no percentiles in {out[-200:]!r}")
    return r


def probe(_servers, proto, size, seconds):
    """The limit probe: a receiver child, then a sender child; both ends' CPU from wait4."""
    recv = Child([PROBE, f"{proto}-recv"], seconds + 60)
    line = recv.readline().split()
    send_args = [PROBE, f"{proto}-send", line[-1] if line else ""]
    send_args += ([str(size)] if proto == "udp" else []) + [str(seconds)]
    try:
        if len(line) != 2 or line[0] != "ready":
            raise RunError(f"probe {proto}-recv did not start: {line}")
        s_out, s_cpu = Child(send_args, seconds + 60).finish()
    except BaseException:
        # A receiver without a sender would wait for it: end it, keep the first error.
        recv._kill()
        try:
            recv.finish()
        except RunError:
            pass
        raise
    r_out, r_cpu = recv.finish()
    try:
        got, sent = json.loads(r_out), json.loads(s_out)
    except ValueError as err:
        raise RunError(f"probe: unreadable output ({err})")
    r = throughput(got["bytes"], got["seconds"], s_cpu + r_cpu)
    if proto == "udp":
        r["recv_mpps"] = got["datagrams"] / max(got["seconds"], 1e-9) / 1e6
        r["loss_pct"] = 100 * (1 - got["datagrams"] / max(sent["datagrams"], 1))
    return r


# ---- the workloads ----
# Each: its members (name -> run function), the figures shown, and the comparisons
# (numerator, denominator): each a per-round ratio. All ratios are member / member as named;
# whether higher or lower is better depends on the figure (see BENCHMARKS.md).

def tcp_stream():
    return {
        "members": {
            "wirebench": lambda sv, s: wirebench(sv, [], s),
            "iperf3": lambda sv, s: iperf3(sv, [], s),
            "probe": lambda sv, s: probe(sv, "tcp", 0, s),
        },
        "figures": ["recv_gbps", "cpu_s_per_gb"],
        "compare": [("wirebench", "iperf3"), ("wirebench", "probe"), ("iperf3", "probe")],
    }


def rr(tcp, size, busy_poll):
    members = {
        "wirebench": lambda sv, s: wirebench(
            sv, ["--mode", "rr", "-l", str(size)] + ([] if tcp else ["-u"]), s),
        "sockperf": lambda sv, s: sockperf(sv, tcp, size, s),
    }
    compare = [("wirebench", "sockperf")]
    if busy_poll:
        members["wirebench --busy-poll"] = lambda sv, s: wirebench(
            sv, ["--mode", "rr", "-l", str(size), "--busy-poll"] + ([] if tcp else ["-u"]), s)
        compare.append(("wirebench --busy-poll", "sockperf"))
    return {"members": members, "figures": ["p50_us", "p99_us"], "compare": compare}


def udp_stream(size):
    return {
        "members": {
            "wirebench": lambda sv, s: wirebench(sv, ["-u", "-l", str(size), "-b", "0"], s),
            "probe": lambda sv, s: probe(sv, "udp", size, s),
        },
        "figures": ["recv_gbps", "recv_mpps", "cpu_s_per_gb", "acct_err"],
        "compare": [("wirebench", "probe")],
    }


def vs_iperf3(wb_args, iperf_args, udp_size=None):
    """The earlier bench's comparisons with iperf3 (issue 4's targets), now interleaved."""
    figures = ["recv_gbps", "cpu_s_per_gb"]
    if udp_size:
        figures = ["recv_gbps", "recv_mpps", "cpu_s_per_gb", "acct_err"]
    return {
        "members": {
            "wirebench": lambda sv, s: wirebench(sv, wb_args, s),
            "iperf3": lambda sv, s: iperf3(sv, iperf_args, s, udp_size),
        },
        "figures": figures,
        "compare": [("wirebench", "iperf3")],
    }


def udp_vs_iperf3(size, offload):
    args = ["-u", "-l", str(size), "-b", "0"]
    return vs_iperf3(args + ([] if offload else ["--no-offload"]), args, size)


def workloads(busy_poll):
    """The default set (issue 19's "What it must show"), then the extras run only when named
    with --only or with --all."""
    default = {
        "tcp-1": tcp_stream(),
        "rr-tcp-64": rr(True, 64, busy_poll),
        "rr-udp-64": rr(False, 64, busy_poll),
        "udp-1472": udp_stream(1472),
        "udp-64": udp_stream(64),
    }
    extra = {
        "tcp-4": vs_iperf3(["-P", "4"], ["-P", "4"]),
        "udp-500": udp_stream(500),
        "udp-1472-vs-iperf3": udp_vs_iperf3(1472, True),
        "udp-1472-no-offload": udp_vs_iperf3(1472, False),
        "udp-500-no-offload": udp_vs_iperf3(500, False),
        "udp-64-no-offload": udp_vs_iperf3(64, False),
    }
    return default, extra


FIGURE_NAMES = {
    "recv_gbps": "received Gbit/s",
    "recv_mpps": "received Mpps",
    "cpu_s_per_gb": "CPU s/GB (both ends)",
    "acct_err": "accounting error (sent-received-lost)",
    "p50_us": "round trip p50 µs",
    "p99_us": "round trip p99 µs",
}


# ---- the rounds and their summary ----

def spread(vals):
    """Median, min, max and the quartiles of a list (None when empty)."""
    if not vals:
        return None
    s = sorted(vals)
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) > 1 else [s[0]] * 3
    return {"median": statistics.median(s), "min": s[0], "max": s[-1], "q1": q[0], "q3": q[2],
            "n": len(s)}


def run_workload(name, wl, servers, pairs, seconds):
    members = list(wl["members"])
    rounds = []
    for i in range(pairs):
        order = members if i % 2 == 0 else members[::-1]
        rnd = {"round": i, "order": order, "runs": {}, "errors": {}}
        for m in order:
            try:
                rnd["runs"][m] = wl["members"][m](servers, seconds)
            except (RunError, subprocess.SubprocessError, OSError) as e:
                rnd["errors"][m] = str(e).splitlines()[0][:200] if str(e) else repr(e)
                print(f"# {name} round {i} {m}: {rnd['errors'][m]}", file=sys.stderr)
            time.sleep(SETTLE_S)
        rounds.append(rnd)
        print(f"# {name} round {i + 1}/{pairs} done", file=sys.stderr)
    summary = {"members": {}, "ratios": []}
    for m in members:
        summary["members"][m] = {
            f: spread([r["runs"][m][f] for r in rounds if f in r["runs"].get(m, {})])
            for f in wl["figures"]}
    for a, b in wl["compare"]:
        for f in wl["figures"]:
            if f == "acct_err":
                continue
            vals = [r["runs"][a][f] / r["runs"][b][f] for r in rounds
                    if f in r["runs"].get(a, {}) and r["runs"].get(b, {}).get(f)]
            summary["ratios"].append({"of": a, "to": b, "figure": f, "stats": spread(vals)})
    return {"members": members, "figures": wl["figures"], "compare": wl["compare"],
            "rounds": rounds, "summary": summary}


def fmt(x):
    if x is None:
        return "n/a"
    if isinstance(x, int):
        return str(x)
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"


def table(name, res, pairs, seconds):
    """One Markdown table per workload: medians per member, then each ratio's median
    [min-max] over the rounds."""
    members, summ = res["members"], res["summary"]
    ratios = {(x["of"], x["to"], x["figure"]): x["stats"] for x in summ["ratios"]}
    lines = [f"### {name} ({pairs} rounds of {seconds} s, order alternating)", ""]
    head = ["figure"] + [f"{m} (median)" for m in members] + \
        [f"{a} / {b} (median [min–max])" for a, b in res["compare"]]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for f in res["figures"]:
        row = [FIGURE_NAMES.get(f, f)]
        for m in members:
            s = summ["members"][m][f]
            if f == "acct_err":
                # Every run must be exact: show the worst, not the median.
                row.append("n/a" if s is None else f"{fmt(s['min'])}..{fmt(s['max'])}")
            else:
                row.append("n/a" if s is None else fmt(s["median"]))
        for a, b in res["compare"]:
            s = ratios.get((a, b, f))
            row.append("—" if s is None else
                       f"{s['median']:.3f} [{s['min']:.3f}–{s['max']:.3f}]")
        lines.append("| " + " | ".join(row) + " |")
    errors = sum(len(r["errors"]) for r in res["rounds"])
    if errors:
        lines.append(f"\n{errors} run(s) failed; see the JSON's rounds[].errors.")
    return "\n".join(lines) + "\n"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def version(args):
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", "--runs", type=int, default=int(os.environ.get("RUNS", 5)),
                    help="rounds per workload, each running every member once (default 5)")
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("SECONDS_PER_RUN", 5)),
                    help="seconds per run (default 5)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 2 rounds of 1 s (overrides --pairs and --seconds)")
    ap.add_argument("--only", action="append", help="workload name (repeatable)")
    ap.add_argument("--all", action="store_true",
                    help="also the extra workloads (tcp-4, udp-500, UDP against iperf3, "
                         "offloads off)")
    ap.add_argument("--json", help="where the JSON goes (default bench/results/<time>.json)")
    opts = ap.parse_args()
    if opts.quick:
        opts.pairs, opts.seconds = 2, 1
    for tool in ("iperf3", "sockperf"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing: run bench/run, which installs it")
    for binary in (WB, PROBE):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} is missing: run bench/run, which builds it")
    run_help = subprocess.run([WB, "run", "--help"], capture_output=True, text=True).stdout
    busy_poll = "--busy-poll" in run_help
    default, extra = workloads(busy_poll)
    all_wl = {**default, **extra}
    names = opts.only or list(all_wl if opts.all else default)
    for n in names:
        if n not in all_wl:
            sys.exit(f"unknown workload {n}; known: {', '.join(all_wl)}")
    started = datetime.datetime.now(datetime.timezone.utc)
    doc = {
        "started": started.isoformat(timespec="seconds"),
        "pairs": opts.pairs,
        "seconds": opts.seconds,
        "machine": {"nproc": os.cpu_count(), "kernel": platform.release(),
                    "loadavg_before": loadavg()},
        "versions": {"wirebench": version([WB, "--version"]),
                     "iperf3": version(["iperf3", "--version"]),
                     "sockperf": version(["sockperf", "--version"])},
        "git_commit": version(["git", "-C", ROOT, "rev-parse", "HEAD"]),
        "busy_poll": busy_poll,
        "workloads": {},
    }
    text = []
    with Servers() as servers:
        for name in names:
            res = run_workload(name, all_wl[name], servers, opts.pairs, opts.seconds)
            doc["workloads"][name] = res
            text.append(table(name, res, opts.pairs, opts.seconds))
    doc["machine"]["loadavg_after"] = loadavg()
    path = opts.json or os.path.join(ROOT, "bench", "results",
                                     started.strftime("%Y-%m-%dT%H%M%SZ") + ".json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    la_b, la_a = doc["machine"]["loadavg_before"], doc["machine"]["loadavg_after"]
    print(f"load average (1 min) before {la_b and la_b[0]}, after {la_a and la_a[0]}; "
          f"{os.cpu_count()} CPUs; JSON: {os.path.abspath(path)}\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
