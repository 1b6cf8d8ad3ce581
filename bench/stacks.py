#!/usr/bin/env python3
"""Why the stacks of a lab scenario differ: what the emulated bottleneck saw, per profile.

Reads the saved trials of one or more `wirebench lab scenario` runs (DIR/trials/NNNN-PROFILE.json,
and the per-interval link logs DIR/trials/NNNN-PROFILE-links.csv that `--link-log-interval`
writes) and prints, per profile, Markdown tables of:

- the bottleneck's totals (from each trial's link report): bytes that crossed it on the data
  way per byte the receiver read (all trials' sums), and the means over trials of queue drops and mean queue wait on
  the data way and on the ACK way;
- what the link log shows interval by interval during the measured test: the share of
  intervals in which the bottleneck delivered nothing on the data way (the sender was
  silent: waiting for a timer), the longest such silence, the share of intervals in which
  the sender's access link carried more than twice the bottleneck's rate (bursts the queue
  must drop), and the median of the intervals' longest queue waits;
- the median trial of each profile (by goodput), so its link log can be drawn with
  `wirebench plot DIR/trials/NNNN-PROFILE-links.csv --kind throughput|latency`.

The bottleneck is the link named `--bottleneck` (default r1-r2); its `up` direction carries the
measured stream from H1, `down` its ACKs. The sender's access link is `--access` (h1-r1).

Usage: bench/stacks.py DIR [DIR ...] [--bottleneck r1-r2] [--access h1-r1]
"""

import argparse
import csv
import glob
import json
import os
import statistics


def trials(run_dir):
    """(profile, trial number, trial document, link-log path or None) of every saved trial."""
    for path in sorted(glob.glob(os.path.join(run_dir, "trials", "[0-9]*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if "tests" not in doc:
            continue
        log = path[: -len(".json")] + "-links.csv"
        yield doc["profile"], doc["trial"], doc, log if os.path.exists(log) else None


def measured(doc):
    for t in doc["tests"]:
        if t.get("measured") and isinstance(t.get("result"), dict):
            return t["result"]
    return None


def goodput_kbps(r):
    """As the scenario summary counts it: bytes read within the test's duration, over it."""
    t = r["test"].get("duration_s") or 0
    if t <= 0:
        return r["end"]["received_bps"] / 1e3
    got = 0.0
    for i in r["intervals"]:
        s, e, b = i["start_s"], i["end_s"], i["received_bytes"]
        if e <= t + 1e-6:
            got += b
        elif s < t and e > s:
            got += b * (t - s) / (e - s)
    return got * 8 / t / 1e3


def link_report(doc, name):
    for link in doc.get("links", []):
        if link["link"] == name:
            return link["report"]
    return None


def log_rows(path, link, direction):
    with open(path) as f:
        return [
            r for r in csv.DictReader(f) if r["link"] == link and r["direction"] == direction
        ]


def per_interval(path, bottleneck, access, seconds):
    """Silence, bursts and queue waits of the measured test's intervals in one link log."""
    data = log_rows(path, bottleneck, "up")
    sender = {r["t_s"]: r for r in log_rows(path, access, "up")}
    busy = [r for r in data if int(r["delivered"]) > 0]
    if not busy or len(data) < 2:
        return None
    step = float(data[1]["t_s"]) - float(data[0]["t_s"])
    start = float(busy[0]["t_s"])
    window = [r for r in data if start <= float(r["t_s"]) < start + seconds]
    if not window:
        return None
    rate = max(float(r["delivered_bps"]) for r in window)
    silent, longest, run, bursts = 0, 0, 0, 0
    for r in window:
        if int(r["delivered"]) == 0:
            silent += 1
            run += 1
            longest = max(longest, run)
        else:
            run = 0
        s = sender.get(r["t_s"])
        if s is not None and float(s["delivered_bps"]) > 2 * rate:
            bursts += 1
    waits = [float(r["max_queue_delay_ms"]) for r in window]
    return {
        "silent": silent / len(window),
        "longest_silence_s": longest * step,
        "bursts": bursts / len(window),
        "wait_p50_ms": statistics.median(waits),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--bottleneck", default="r1-r2")
    ap.add_argument("--access", default="h1-r1")
    a = ap.parse_args()
    for d in a.dirs:
        rows = {}
        for profile, n, doc, log in trials(d):
            r = measured(doc)
            rep = link_report(doc, a.bottleneck)
            if r is None or rep is None:
                continue
            up, down = rep["up"], rep["down"]
            got = max(r["end"]["received"]["bytes"], 1)
            x = rows.setdefault(profile, {"trials": [], "iv": []})
            x["trials"].append(
                {
                    "n": n,
                    "goodput": goodput_kbps(r),
                    "over": up["delivered_bytes"],
                    "read": got,
                    "drops_up": up["dropped_queue"],
                    "wait_up_ms": up["queue_delay_ns"] / max(up["delivered"], 1) / 1e6,
                    "drops_down": down["dropped_queue"],
                    "wait_down_ms": down["queue_delay_ns"] / max(down["delivered"], 1) / 1e6,
                }
            )
            if log:
                iv = per_interval(log, a.bottleneck, a.access, r["test"].get("duration_s") or 60)
                if iv:
                    x["iv"].append(iv)
        name = os.path.basename(os.path.normpath(d))
        # The scenario's order of profiles, as its summary has them.
        try:
            with open(os.path.join(d, "summary.json")) as f:
                order = [p["profile"] for p in json.load(f)["profiles"]]
        except (OSError, ValueError, KeyError):
            order = sorted(rows)
        rows = {p: rows[p] for p in order if p in rows} | rows
        print(f"\n### {name}: the bottleneck ({a.bottleneck}), mean per trial\n")
        print(
            "| profile | trials | goodput kbit/s (median trial) | bytes over the bottleneck per byte read "
            "| queue drops, data way | mean queue wait, data way | queue drops, ACK way "
            "| mean queue wait, ACK way |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for profile, x in rows.items():
            t = x["trials"]
            m = lambda k: statistics.mean(v[k] for v in t)  # noqa: E731
            per_byte = sum(v["over"] for v in t) / sum(v["read"] for v in t)
            med = sorted(t, key=lambda v: v["goodput"])[len(t) // 2]
            print(
                f"| {profile} | {len(t)} | {med['goodput']:.1f} (#{med['n']}) | {per_byte:.2f} "
                f"| {m('drops_up'):,.0f} | {m('wait_up_ms'):.1f} ms | {m('drops_down'):,.0f} "
                f"| {m('wait_down_ms'):.1f} ms |"
            )
        if any(x["iv"] for x in rows.values()):
            print(f"\n### {name}: interval by interval during the measured test (link logs)\n")
            print(
                "| profile | logs | intervals with nothing delivered | longest silence (mean) "
                "| intervals with the sender above 2× the bottleneck | median longest queue wait |"
            )
            print("|---|---|---|---|---|---|")
            for profile, x in rows.items():
                iv = x["iv"]
                if not iv:
                    continue
                m = lambda k: statistics.mean(v[k] for v in iv)  # noqa: E731
                print(
                    f"| {profile} | {len(iv)} | {100 * m('silent'):.1f}% | {m('longest_silence_s'):.1f} s "
                    f"| {100 * m('bursts'):.1f}% | {statistics.median(v['wait_p50_ms'] for v in iv):.1f} ms |"
                )


if __name__ == "__main__":
    main()
