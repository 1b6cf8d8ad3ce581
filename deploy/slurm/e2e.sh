#!/usr/bin/env bash
# End-to-end check on a real Slurm: a one-node cluster on localhost (munged, slurmctld and a
# configless slurmd, everything under a temporary directory), the array job of
# wirebench-sweep.sbatch with 4 shards of a small sweep against a local `wirebench serve`,
# then `wirebench merge` and `wirebench report`, and checks of what they wrote.
#
#   deploy/slurm/e2e.sh [WIREBENCH]      (as root; default: target/debug/wirebench)
#
# Installs Debian's slurm-wlm and munge when missing. Every wait is bounded; the daemons it
# started are stopped by their pids at the end, whatever happened; on failure the logs are
# printed. Exit 0 when every check holds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
wb=$(realpath "${1:-$root/target/debug/wirebench}")
[ -x "$wb" ] || { echo "e2e: no wirebench at $wb (cargo build first)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "e2e: run as root (slurmd launches jobs, munged keys)" >&2; exit 1; }

# Slurm asks munged at the default socket before a configless slurmd has read AuthInfo: run
# in a mount namespace of our own, with /run/munge bound to the temporary directory, so the
# host's munge (if any) is neither used nor touched.
if [ -z "${WIREBENCH_E2E_NS:-}" ]; then
    exec env WIREBENCH_E2E_NS=1 unshare --mount --propagation private "$0" "$wb"
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurm-wlm munge >/dev/null
fi

t=$(mktemp -d /tmp/wirebench-slurm.XXXXXX)
chmod 755 "$t"
pids=()
ok=0
teardown() {
    # Our daemons only, by the pids we started them with, in reverse order.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[i]}" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
    done
    if [ "$ok" != 1 ]; then
        echo "e2e: FAILED; logs:" >&2
        for f in "$t"/*.log "$t"/run/*.out; do
            [ -f "$f" ] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }
        done
    fi
    rm -rf "$t"
}
trap teardown EXIT
# A timeout's or a Ctrl-C's signal ends the script through the same teardown.
trap 'exit 1' TERM INT

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local limit=$1
    shift
    for _ in $(seq $((limit * 5))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "e2e: timed out after ${limit}s waiting for: $*" >&2
    return 1
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

mkdir -p "$t/munge" "$t/state" "$t/spool" "$t/run"
chmod 700 "$t/munge"
dd if=/dev/urandom of="$t/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$t/munge/munge.key"
mkdir -p /run/munge
mount --bind "$t/munge" /run/munge
munged -F -f --key-file="$t/munge/munge.key" --socket=/run/munge/munge.socket.2 \
    --pid-file="$t/munge/munged.pid" --log-file="$t/munged.log" \
    --seed-file="$t/munge/munged.seed" >"$t/munged.out.log" 2>&1 &
pids+=($!)
wait_for 10 test -S /run/munge/munge.socket.2

ctld_port=$(free_port)
slurmd_port=$(free_port)
cpus=$(nproc)
export SLURM_CONF="$t/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=wirebench-e2e
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmctldParameters=enable_configless
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$t/state
SlurmdSpoolDir=$t/spool
SlurmctldPidFile=$t/slurmctld.pid
SlurmdPidFile=$t/slurmd.pid
SlurmctldLogFile=$t/slurmctld.log
SlurmdLogFile=$t/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=e2e Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF

slurmctld -D -i -f "$SLURM_CONF" >"$t/slurmctld.out.log" 2>&1 &
pids+=($!)
wait_for 30 scontrol ping
# Configless: slurmd reads its configuration from slurmctld.
slurmd -D -N localhost --conf-server "127.0.0.1:$ctld_port" >"$t/slurmd.out.log" 2>&1 &
pids+=($!)
wait_for 30 bash -c "sinfo -h -N -o '%T' | grep -Eq '^(idle|mixed|allocated)'"

port=$(free_port)
"$wb" serve --bind 127.0.0.1 --port "$port" --max-tests 16 -q >"$t/serve.log" 2>&1 &
pids+=($!)
wait_for 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port"

exp="$t/exp"
job=$(cd "$t/run" && WIREBENCH="$wb" sbatch --parsable --array=0-3 --time=5 \
    --output="$t/run/shard-%a.out" "$here/wirebench-sweep.sbatch" "$exp" \
    127.0.0.1 -p "$port" -u -n 100K --vary rate=10M,20M --vary size=500,1000 --repeat 2)
job=${job%%;*}
echo "e2e: submitted array job $job (4 shards)"
wait_for 180 bash -c "[ -z \"\$(squeue -h -j $job 2>/dev/null)\" ]"
states=$(scontrol -o show job "$job" | grep -o 'JobState=[A-Z_]*' | sort | uniq -c)
echo "e2e: array tasks: $(echo $states)"
if [ "$(scontrol -o show job "$job" | grep -c 'JobState=COMPLETED')" != 4 ]; then
    echo "e2e: not every shard completed" >&2
    exit 1
fi

"$wb" merge "$exp" | tee "$t/merge.out"
"$wb" report "$exp" -o "$t/report.html" >/dev/null
# 4 points × 2 trials, from 4 shards, against our server; a report that names every point.
python3 - "$exp" "$t/report.html" "$port" <<'PY'
import csv, json, sys
exp, report, port = sys.argv[1], sys.argv[2], sys.argv[3]
s = json.load(open(f"{exp}/summary.json"))
assert len(s["points"]) == 4 and all(p["trials"] == 2 for p in s["points"]), s["points"]
rows = list(csv.DictReader(open(f"{exp}/trials.csv")))
assert len(rows) == 8, rows
assert {r["shard"] for r in rows} == {f"{i}-of-4" for i in range(4)}, rows
assert all(r["server"] == f"127.0.0.1:{port}" for r in rows), rows
m = json.load(open(f"{exp}/experiment.json"))
assert m["shards"] == 4 and m["manifest_hash"], m
html = open(report).read()
assert html.lstrip().lower().startswith("<!doctype html") and "rate" in html
print(f"e2e: merged {len(rows)} trials of {len(s['points'])} points from 4 Slurm shards; report {len(html)} bytes")
PY
ok=1
echo "e2e: OK"
