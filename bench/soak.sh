#!/usr/bin/env bash
# Soak test (not in CI): thousands of short tests against one server, back to back and in
# parallel, TCP and UDP, both directions, and some clients killed mid-test; then checks that
# the server's memory and open file descriptors return to where they started.
#   bench/soak.sh [SEQUENTIAL] [PARALLEL_LOOPS] [TESTS_PER_LOOP]     (default 1000 4 250)
set -euo pipefail
cd "$(dirname "$0")/.."
seq_n=${1:-1000}
loops=${2:-4}
per_loop=${3:-250}
cargo build --release --locked -q
wb=target/release/wirebench
port=5389
$wb serve --bind 127.0.0.1 --port $port --max-tests 64 --quiet &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
sleep 0.5
rss() { awk '/VmRSS/ {print $2}' /proc/$server/status; }
fds() { ls /proc/$server/fd | wc -l; }
threads() { awk '/Threads/ {print $2}' /proc/$server/status; }
echo "start: rss $(rss) KiB, $(fds) fds, $(threads) threads"
one() {
    case $(( $1 % 5 )) in
        0) $wb run 127.0.0.1 -p $port -n 100K -l 10000 ;;
        1) $wb run 127.0.0.1 -p $port -n 100K -l 10000 -R ;;
        2) $wb run 127.0.0.1 -p $port -u -n 100K -l 1000 -b 100M ;;
        3) $wb run 127.0.0.1 -p $port -u -n 100K -l 1000 -b 100M -R ;;
        4) $wb run 127.0.0.1 -p $port --mode rr -n 6400 ;;
    esac >/dev/null 2>&1 || echo "test $1 failed" >&2
}
t0=$(date +%s.%N)
for i in $(seq 1 "$seq_n"); do one "$i"; done
t1=$(date +%s.%N)
echo "after $seq_n sequential tests ($(echo "$t1 - $t0" | bc) s): rss $(rss) KiB, $(fds) fds, $(threads) threads"
for l in $(seq 1 "$loops"); do
    ( for i in $(seq 1 "$per_loop"); do one $((i + l)); done ) &
done
# Clients killed mid-test, meanwhile.
for i in $(seq 1 20); do
    $wb run 127.0.0.1 -p $port -t 10s -b 10M >/dev/null 2>&1 & c=$!
    sleep 0.05; kill $c 2>/dev/null || true
done
wait $(jobs -p | grep -v "^$server$") 2>/dev/null || true
t2=$(date +%s.%N)
echo "after $((loops * per_loop)) parallel tests in $loops loops and 20 killed clients ($(echo "$t2 - $t1" | bc) s): rss $(rss) KiB, $(fds) fds, $(threads) threads"
# Killed clients' sessions end by their timeouts (at most 30 s idle).
for _ in $(seq 1 40); do
    [ "$(threads)" -le 3 ] && break
    sleep 1
done
echo "settled: rss $(rss) KiB, $(fds) fds, $(threads) threads"
