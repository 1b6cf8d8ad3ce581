#!/usr/bin/env python3
"""Before/after of one change through the lab's emulated link: two wirebench binaries, each
running `lab --rate RATE -- run ...` in turn (the order alternating between pairs), as root.

Prints each run's payload received and sent (Gbit/s), the emulator's own drops (frames its
socket lost before it read them), cut GSO frames, how late it sent packets after their
modelled delivery time (mean µs, and how many more than 100 µs late), the link's idle time
under load (ms; 0 from a binary that does not count it), and the CPU-seconds of the whole lab
(sender, emulator, receiver) per GB received; then, per binary, how many runs reached
`--want` Gbit/s, and the median of the pair ratios (AFTER / BEFORE received).

The pairs follow `--warmup` runs of BEFORE (1 by default), printed and kept in the JSON but
not counted: on this VM the first high-rate run after a pause often runs into a stretch in
which the kernel's copies into fresh memory are several times slower (BENCHMARKS.md, "10
Gbit/s, fourth round"), which says nothing of either binary.

    bench/lab-ab.py BEFORE AFTER [--pairs N] [--warmup N] [--rate 10G] [--seconds 4]
                    [--want 9.712] [--tcp] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def one(binary, rate, seconds, tcp):
    """One lab run of `binary`: a dict of what it measured."""
    load = ["-t", str(seconds)] + ([] if tcp else ["-u", "-b", "12G", "-l", "1472"])
    cmd = [binary, "lab", "--rate", rate, "--", "run", "--json"] + load
    with tempfile.NamedTemporaryFile() as t:
        r = subprocess.run(["/usr/bin/time", "-f", "%U %S", "-o", t.name] + cmd,
                           capture_output=True, text=True)
        cpu = sum(float(x) for x in open(t.name).read().split()[-2:])
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1:]}
    d = json.loads(r.stdout)
    end = d["end"]
    up = d["lab"]["links"][0]["up"]
    got = end["received"]["bytes"]
    return {
        "received_gbps": end["received_bps"] / 1e9,
        "sent_gbps": end["sent_bps"] / 1e9,
        "emulator_drops": up["emulator_drops"],
        "gso_frames": up["gso_frames"],
        "split_frames": up["split_frames"],
        "late_us_mean": up["late_ns_sum"] / max(up["delivered"], 1) / 1e3,
        "late_over_100us": up["late_over_100us"],
        # The link's idle time under load: the sender's gaps its queue did not cover.
        "idle_under_load_ms": up.get("idle_under_load_ns", 0) / 1e6,
        "cpu_s": cpu,
        "cpu_s_per_gb": cpu / (got / 1e9) if got else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rate", default="10G")
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--want", type=float, default=9.712)
    ap.add_argument("--tcp", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    runs = {"before": [], "after": []}
    warmup = []
    for i in range(a.warmup):
        r = one(a.before, a.rate, a.seconds, a.tcp)
        warmup.append(r)
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
        print(f"warm-up {i + 1} (not counted) {shown}", flush=True)
    for i in range(a.pairs):
        order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
        for which in order:
            r = one(getattr(a, which), a.rate, a.seconds, a.tcp)
            runs[which].append(r)
            shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
            print(f"pair {i + 1} {which:6} {shown}", flush=True)
    ratios = [b["received_gbps"] / f["received_gbps"]
              for f, b in zip(runs["before"], runs["after"])
              if "received_gbps" in f and "received_gbps" in b]
    for which, rs in runs.items():
        got = [r["received_gbps"] for r in rs if "received_gbps" in r]
        cpu = [r["cpu_s_per_gb"] for r in rs if r.get("cpu_s_per_gb")]
        print(f"{which}: {sum(g >= a.want for g in got)} of {len(rs)} runs >= {a.want} Gbit/s; "
              f"median {statistics.median(got):.3f}; CPU-s/GB median {statistics.median(cpu):.3f}")
    if ratios:
        print(f"median after/before: {statistics.median(ratios):.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "load": os.getloadavg(), "warmup": warmup, "runs": runs},
                      f, indent=1)


if __name__ == "__main__":
    main()
