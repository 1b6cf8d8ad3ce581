#!/bin/sh
# Regenerates docs/gallery.md and docs/gallery/*.png: every plot kind of `wirebench plot`,
# each from a short real run on this machine (loopback, and one emulated lab link, which
# needs root or user namespaces: its link log, and rrul over a long and a short queue with
# cubic and bbr). About four minutes in all; the runs are kept short
# because the machine may be shared.
#
#   bench/gallery.sh                  # uses target/release/wirebench, else target/debug
#   WIREBENCH=path/to/wirebench bench/gallery.sh
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${WIREBENCH:-}" ]; then
    WIREBENCH=$root/target/release/wirebench
    [ -x "$WIREBENCH" ] || WIREBENCH=$root/target/debug/wirebench
fi
out=$root/docs/gallery
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
mkdir -p "$out"
# The commands name the repository's scenarios and traces as they are from its root.
ln -s "$root/scenarios" "$work/scenarios"
md=$work/gallery.md
# One row of the rrul table, from a result (jq, when it is installed).
cat >"$work/row.jq" <<'EOF'
.end.rrul as $r
| "| \($q) | \($cc) | \($r.idle_latency_us.p50 / 1000 * 10 | round / 10) ms"
  + " | \($r.loaded_latency_us.p50 / 1000 * 10 | round / 10) ms"
  + " | \($r.loaded_latency_us.p99 / 1000 | round) ms"
  + " | ×\($r.latency_ratio_p50 * 10 | round / 10)"
  + " | \($r.upload_bps / 1e5 | round / 10) | \($r.download_bps / 1e5 | round / 10) |"
EOF

# run CMD...: runs a wirebench command in $work, shown in the page as `wirebench ...`.
run() {
    echo "\$ wirebench $*" >&2
    (cd "$work" && "$WIREBENCH" "$@")
}

# figure FILE TITLE TEXT RUN PLOT: draws with PLOT (a `plot` command's arguments, its
# output the PNG) and writes the section: the title, the two commands, the image.
figure() {
    png=$1 title=$2 text=$3 made=$4 drawn=$5
    # shellcheck disable=SC2086
    run plot $drawn -o "$out/$png" || return 1
    cat >>"$md" <<EOF

## $title

$text

\`\`\`sh
wirebench $made
wirebench plot $drawn -o $png
\`\`\`

![$title](gallery/$png)
EOF
}

cat >"$md" <<EOF
# Gallery: every plot kind, from real runs

Made by \`bench/gallery.sh\` on $(uname -n) ($(nproc) cores, Linux $(uname -r)),
$(date -u +%Y-%m-%d), with \`$("$WIREBENCH" --version)\`. The runs are short, on loopback
(and one emulated link): the numbers are this machine's, the point is what the plots show.
Every plot has a caption that says what was measured, how many trials, and what its bars
or whiskers mean; units follow the data's range; a series keeps its colour (Okabe–Ito,
safe for colour-blind readers) in every plot of an experiment. Each image is 3.5 inches
wide at 300 dots per inch (a paper's column, tick labels 7 pt; \`--width\`, \`--height\` and
\`--dpi\` change that), two columns for a comparison.
EOF

sweep="sweep -u -n 2M --vary rate=20M,50M,100M,200M,500M,1G,2G --vary size=500,1400 --repeat 3 --pause 10ms --out rate"
# shellcheck disable=SC2086
run $sweep >/dev/null
figure rate.png "Rate sweep: received against offered" \
    "Both axes on one log scale, so the ideal y = x is a straight line; error bars over the trials; the knee (where 99% of the data still arrives) marked with its value; loss below." \
    "$sweep" "rate --kind rate"
figure received.png "Rate sweep: data received" \
    "The share of the bytes sent that arrived, against the offered rate." \
    "$sweep" "rate --kind received"
figure box.png "Box plots of a sweep's trials" \
    "One box per point, labelled by its parameters (a line each), coloured by series as in the rate plot; whiskers and outliers as the caption says." \
    "$sweep" "rate --kind box"

# A lab scenario: a point per stack profile, the box plot of its trials' goodput.
scen="lab scenario scenarios/random-loss.toml --trials 5 --parallel 2 --time-scale 0.05 --out scen"
# shellcheck disable=SC2086
if run $scen >/dev/null 2>&1 &&
    figure box-scenario.png "Box plots of a lab scenario's stack profiles" \
        "The random-loss dumbbell of scenarios/random-loss.toml (2 Mbit/s, 100 ms, 5% loss both ways), scaled to 3 s tests: one box per stack profile (Linux reno, cubic and bbr with and without SACK, and smoltcp), labelled by its name." \
        "$scen" "scen --kind box"; then
    :
else
    # Left out, rather than ending the page here: the lab may be missing, or every trial
    # may have failed (its files say why).
    echo "the lab scenario could not run or drew nothing here: its plot is left as it was" >&2
fi

bytes="sweep -n 1K --vary bytes=10K,100K,1M,10M,100M --repeat 5 --pause 10ms --out bytes"
# shellcheck disable=SC2086
run $bytes >/dev/null
figure time.png "Bytes sweep: transfer time and rate against size" \
    "A sweep over the amount of data gets time and rate against size (log–log for time): the rate panel shows where a transfer is long enough to leave slow start. Five trials per point, so the bars are 95% confidence intervals." \
    "$bytes" "bytes --kind time"

tcp="run -t 3 -i 0.5 --json"
run $tcp >"$work/tcp.json"
figure throughput.png "Rate over time" \
    "Each interval is a step over its real start and end; a last interval cut short by the end of the test is not a fall to zero." \
    "$tcp > tcp.json" "tcp.json --kind throughput"

rr="run --mode rr -t 2 --json"
run $rr >"$work/rr.json"
figure rr-throughput.png "Request/response over time: rate and round trips" \
    "A request/response run adds the round trip per interval (median and 99th percentile) below the rate." \
    "$rr > rr.json" "rr.json --kind throughput"
figure latency.png "Round-trip distribution of one run" \
    "CDF above, CCDF on a log scale below for the tail. Drawn from \`end.latency_us.histogram\` when the results carry it; the caption says when only the seven percentiles were there." \
    "$rr > rr.json" "rr.json --kind latency"

rrs="sweep --mode rr -t 1 --vary size=64,1400,16K --repeat 2 --out rrs"
# shellcheck disable=SC2086
run $rrs >/dev/null
figure latency-overlay.png "Round-trip distributions of several runs, overlaid" \
    "An experiment's points, one curve each (their trials pooled)." \
    "$rrs" "rrs --kind latency"

udp="run -u -n 2M -l 1000 -b 200M --packet-log packets.log"
# shellcheck disable=SC2086
run $udp >/dev/null
figure arrival.png "Packet log: arrival against sequence number" \
    "Every datagram of a UDP run (UDPmon's plot): a straight line is an even arrival rate, steps are bursts; lost datagrams are crosses at 0." \
    "$udp" "packets.log --kind arrival"
figure one-way-delay.png "Packet log: one-way delay of every datagram" \
    "The full distribution from the packet log (on loopback both ends read one clock, so the delay is absolute)." \
    "$udp" "packets.log --kind latency"

lab="lab --rate 20M --delay 10ms --link-log link.csv -- run -t 5"
# shellcheck disable=SC2086
if run $lab >/dev/null 2>&1; then
    figure link-throughput.png "Lab link log: delivered rate" \
        "An emulated 20 Mbit/s, 10 ms link (Mahimahi's throughput graph): each step one logging interval." \
        "$lab" "link.csv --kind throughput"
    figure link-delay.png "Lab link log: queueing delay" \
        "The longest wait in the link's queue per interval: the queue TCP (here the machine's default congestion control) builds at its start, and what it keeps afterwards." \
        "$lab" "link.csv --kind latency"
else
    echo "the lab could not start here (it needs root or user namespaces): its plots are left as they were" >&2
fi

# A trace-driven link: Mahimahi's LTE trace downstream, its capacity under what TCP got.
trace="lab --trace-down scenarios/traces/TMobile-LTE-driving-30s.down --link-log lte.csv -- run -R -t 20 --drain 5s"
# shellcheck disable=SC2086
if run $trace >/dev/null 2>&1; then
    figure link-trace.png "Lab link log: a Mahimahi trace's capacity and what was delivered" \
        "A TCP download through Mahimahi's T-Mobile LTE trace (downstream; \`scenarios/traces/\`), as \`mm-link\`'s live graph draws it: each direction's capacity shaded (the trace's 1504-byte opportunities per interval), the delivered rate over it. The download fills what the trace offers, about 50 Mbit/s in its first second and near 8 after, with a gap where the trace has none (at 6 s); the up direction carries the ACKs." \
        "$trace" "lte.csv --kind throughput"
fi

# Latency under load: one emulated link, a long against a short queue, cubic beside bbr.
rrul_made=""
rrul_rows=""
rrul_files=""
for q in 1000 20; do
    for cc in cubic bbr; do
        cmd="lab --rate 20M --delay 10ms --queue $q -- run --mode rrul --cc $cc -t 15 --json"
        # shellcheck disable=SC2086
        if ! run $cmd >"$work/rrul-q$q-$cc.json" 2>/dev/null; then
            rrul_made=""
            break 2
        fi
        rrul_files="$rrul_files rrul-q$q-$cc.json"
        rrul_made="$rrul_made
wirebench $cmd > rrul-q$q-$cc.json"
        if command -v jq >/dev/null; then
            rrul_rows="$rrul_rows
$(jq -r --arg q "$q" --arg cc "$cc" -f "$work/row.jq" "$work/rrul-q$q-$cc.json")"
        fi
    done
done
if [ -n "$rrul_made" ]; then
    # One figure: the four runs side by side, two to a row, each row of panels on one scale.
    # shellcheck disable=SC2086
    run plot $rrul_files -o "$out/rrul-compare.png"
    run plot rrul-q1000-cubic.json --kind latency -o "$out/rrul-cdf.png"
    cat >>"$md" <<EOF

## Latency under load (rrul): a long against a short queue, cubic beside bbr

flent's "all" view of \`run --mode rrul\` over one emulated link (20 Mbit/s each way, 10 ms
each way): UDP and TCP request/response probes every 100 ms alone for 5 s, then with 4 TCP
streams each way for 15 s (shaded), then alone again. The four runs are drawn as one figure
(\`plot A.json B.json ...\`), each under its file's name: every row of panels shares its unit
and its range, so the queues compare by eye. With a 1000-packet queue (about 600 ms at this
rate) cubic fills it and the round trip grows many times over; a 20-packet queue keeps it
near the idle one, at about the same throughput; there the load's streams lose packets at
the queue, and so do the probes: a TCP probe that loses one waits for its retransmission
(the spikes of a few hundred ms), a UDP probe that loses one is counted unanswered and not
drawn, and a probe line breaks where no answer came for more than two intervals. An axis
ends at the body of its data: a value far above the rest (Tukey's outer fence) is a ▲ on the
top edge, counted in the caption (\`--full-range\` draws them all).

\`\`\`sh$rrul_made
wirebench plot$rrul_files -o rrul-compare.png
\`\`\`

![rrul, queue 1000 against 20, cubic and bbr](gallery/rrul-compare.png)
EOF
    if [ -n "$rrul_rows" ]; then
        cat >>"$md" <<EOF

| queue (packets) | cc | idle p50 | loaded p50 | loaded p99 | loaded / idle p50 | upload (Mbit/s) | download (Mbit/s) |
|---|---|---|---|---|---|---|---|$rrul_rows
EOF
    fi
    cat >>"$md" <<EOF

## Latency under load (rrul): round-trip distributions, idle against loaded

flent's ping CDF: every answered probe's round trip of one run (the long queue, cubic),
before and after the load (idle) and while it ran (loaded), for the UDP and the TCP probes
apart; the time axis is log when the round trips span more than 30×. Below, the share
slower than x on a log scale, for the tail.

\`\`\`sh
wirebench lab --rate 20M --delay 10ms --queue 1000 -- run --mode rrul --cc cubic -t 15 --json > rrul-q1000-cubic.json
wirebench plot rrul-q1000-cubic.json --kind latency -o rrul-cdf.png
\`\`\`

![rrul round-trip CDF, idle against loaded](gallery/rrul-cdf.png)
EOF
else
    echo "the lab could not run rrul here (it needs root or user namespaces): its plots are left as they were" >&2
fi

# A sweep of rrul over the load's streams: a box per point of its loaded UDP round trips.
rs="sweep --mode rrul --vary parallel=1,2,4,8 -t 5 --idle 2s --repeat 2 --out rrulsweep"
# shellcheck disable=SC2086
if run $rs >/dev/null 2>&1; then
    figure rrul-box.png "rrul swept: loaded round trips per point" \
        "Every UDP probe sent under load, the trials of a point pooled, as a box per number of streams each way (here on loopback; through the lab, put \`lab ... --\` before \`sweep\`)." \
        "$rs" "rrulsweep --kind box"
fi

# Rates over two decades: the box plot's y axis goes log (more than 30×) so the small ones
# stay visible.
low="sweep -u -n 100K --vary rate=25k,100k,400k,1.6M,3.3M --repeat 3 --pause 10ms --out low"
# shellcheck disable=SC2086
run $low >/dev/null
figure box-log.png "Box plots over two decades of rates" \
    "Receive rates of 25 kbit/s to 3.3 Mbit/s: spanning more than 30 times, the y axis is log, each tick with its unit; the rates under the boxes in SI units with 3 significant digits." \
    "$low" "low --kind box"

cp "$md" "$root/docs/gallery.md"
echo "wrote docs/gallery.md and $(ls "$out" | wc -l) images in docs/gallery/" >&2
