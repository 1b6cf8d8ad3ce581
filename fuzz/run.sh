#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60) from its committed corpus, and prints
# how many executions ran. Not part of CI (it takes minutes); run it after changing a decoder.
#   fuzz/run.sh [SECONDS]
# cargo fuzz needs nightly features; the stable toolchain lends them with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
    mkdir -p "corpus/$target"
    # A private copy of the corpus: new finds stay out of the committed seeds.
    work=$(mktemp -d)
    cp -r "corpus/$target/." "$work/"
    log=$(mktemp)
    cargo fuzz run "$target" "$work" -- -max_total_time="$secs" -print_final_stats=1 2>"$log" || {
        tail -40 "$log"; echo "FAILED: $target"; exit 1; }
    runs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "$target: ${runs:-?} executions in ${secs}s, no crash"
    rm -rf "$work" "$log"
done
