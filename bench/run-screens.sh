#!/bin/sh
# Makes docs/run.md's "what a user sees" block from real runs on loopback: a server with its
# live lines, a TCP and a UDP test against it, each shown with the command typed and what it
# printed, on a pseudo-terminal (script(1)) as a user sees them. Writes the block between the
# page's `screens:begin` and `screens:end` marks (or prints it with --print).
#
#   bench/run-screens.sh [--print]        # from the repository's root; builds the binary
set -eu

# WIREBENCH=path/to/wirebench to use a binary already built.
if [ -z "${WIREBENCH:-}" ]; then
    cargo build --release --locked -q -p wirebench
fi
WB=${WIREBENCH:-target/release/wirebench}
PORT=${PORT:-5301}
tmp=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$tmp"' EXIT

# `script` gives the client a terminal (live lines by default); \r from the terminal dropped.
on_tty() {
    if command -v script >/dev/null 2>&1; then
        script -qec "$*" /dev/null | tr -d '\r'
    else
        echo "script(1) is needed: the block shows a terminal" >&2
        exit 1
    fi
}

"$WB" serve --bind 127.0.0.1 -p "$PORT" --live always >"$tmp/server" 2>&1 &
server=$!
# Wait for the banner (the server is up), not for a time.
until grep -q listening "$tmp/server" 2>/dev/null; do
    kill -0 "$server" || { cat "$tmp/server" >&2; exit 1; }
    sleep 0.1
done

block() {
    echo '```text'
    for cmd in "run 127.0.0.1:$PORT -t 3" "run 127.0.0.1:$PORT -u -b 100M -t 3"; do
        echo "\$ wirebench $cmd"
        on_tty "$WB $cmd" | sed "s|$WB|wirebench|"
        echo
    done | sed '$d'
    echo '```'
    echo
    kill -INT "$server"
    wait "$server" || true
    echo '```text'
    # On a terminal the live lines come without --live always; here stdout is a file.
    echo "\$ wirebench serve --bind 127.0.0.1 -p $PORT --live always"
    cat "$tmp/server"
    echo '```'
}

if [ "${1:-}" = --print ]; then
    block
    exit 0
fi
block >"$tmp/block"
python3 - "$tmp/block" <<'EOF'
import sys
block = open(sys.argv[1]).read()
page = open("docs/run.md").read()
begin, end = "<!-- screens:begin (bench/run-screens.sh) -->\n", "<!-- screens:end -->\n"
a, b = page.index(begin) + len(begin), page.index(end)
open("docs/run.md", "w").write(page[:a] + block + page[b:])
EOF
echo "docs/run.md: the screens block is new" >&2
