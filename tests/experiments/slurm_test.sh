#!/usr/bin/env bash
# Runs `spansim campaign slurm` against a real single-node Slurm started here: munged, slurmctld and slurmd on
# this machine, configured in a temporary directory (nothing in /etc is touched), stopped on exit.
# Usage: slurm_test.sh SPANSIM_BINARY SOURCE_DIR. Exit 0 pass, 1 fail, 77 skip (Slurm cannot run here: says why).
set -uo pipefail

spansim=$1
src=$2
campaign=$src/tests/experiments/data/tiny-campaign.json

skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root to run slurmd and munged (CI runs as root)"
for b in munged slurmctld slurmd sbatch sinfo; do
  command -v "$b" >/dev/null || skip "$b is not installed (apt-get install slurm-wlm munge; scripts/install-deps.sh does)"
done
/usr/bin/python3 -c "import h5py, pandas" 2>/dev/null || skip "python3-h5py and python3-pandas are needed to check the result"

work=$(mktemp -d /tmp/spansim-slurm.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for f in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munged.pid"; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 1
  for f in "$work/slurmd.pid" "$work/slurmctld.pid" "$work/munged.pid"; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  [ -n "${KEEP_SLURM_TEST_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
show_logs() {
  for f in "$work"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
}

# munge: own key, socket, pid and log files.
mkdir -p "$work/munge"
chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
  --pid-file="$work/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munge/munge.seed" \
  || { show_logs; skip "munged does not start here (see its log above)"; }
for _ in $(seq 50); do [ -S "$work/munge/munge.socket" ] && break; sleep 0.1; done
munge --socket="$work/munge/munge.socket" -n </dev/null | unmunge --socket="$work/munge/munge.socket" >/dev/null \
  || { show_logs; skip "munge cannot encode and decode a credential here"; }

# Free TCP ports for the two daemons.
read -r ctld_port slurmd_port < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$work/state" "$work/spool" "$work/results"
cat > "$work/slurm.conf" <<CONF
ClusterName=spansimtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf

slurmctld -i -f "$SLURM_CONF" || { show_logs; skip "slurmctld does not start here (see its log above)"; }
slurmd -f "$SLURM_CONF" || { show_logs; skip "slurmd does not start here (see its log above)"; }
state=""
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -n1)
  [ "$state" = "idle" ] && break
  sleep 1
done
[ "$state" = "idle" ] || { sinfo -N -l >&2; show_logs; skip "the local Slurm node never became idle (state \"$state\")"; }
echo "Slurm up: node $host, $cpus CPUs, state $state"

# The campaign: 12 tiny points as 3 array tasks and a merge job; --wait returns when the merge job has ended.
# The results folder's name holds what #SBATCH lines and bash must not misread: white space, quotes, a '#'
# (a comment to sbatch), '%' patterns (Slurm's file-name expansion) and a command substitution.
out="$work/results 'q' \"dq\" #hash %a 100% \$(touch pwned)/tiny.h5"
submission=$(timeout 300 "$spansim" campaign slurm "$campaign" --out "$out" --tasks 3 --wait --json)
rc=$?
echo "$submission"
[ $rc -eq 0 ] || { show_logs; for f in "$out.d"/slurm/*.log; do echo "--- $f" >&2; cat "$f" >&2; done; fail "spansim campaign slurm exited $rc (expected 0)"; }

for k in 0 1 2; do
  [ -s "$out.d/shards/shard-$k.h5" ] || fail "shard $k wrote no shard file ($out.d/shards/shard-$k.h5)"
  grep -q "Campaign tiny-sweep" "$out.d/slurm/task-$k.log" || fail "array task $k's log does not show its run"
done
grep -q "merged 12 of 12 points" "$out.d/slurm/merge.log" || fail "the merge job did not find all 12 points: $(cat "$out.d/slurm/merge.log")"
report=$(/usr/bin/python3 "$src/tests/experiments/read_with_pandas.py" "$out") || fail "h5py could not read $out"
echo "$report"
rows=$(echo "$report" | awk '/^rows/ {print $2}')
[ "$rows" = "12" ] || fail "merged result has $rows rows (expected 12)"
/usr/bin/python3 - "$out" <<'PY' || fail "the merged table is not the 12 points in order with 3 shards' worth of results"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    index = list(f["points"]["index"][()])
    status = set(f["points"]["status"].asstr()[()])
    done = int(f.attrs["points_done"])
    assert index == list(range(12)), index
    assert status == {"ok"}, status
    assert done == 12, done
    print("merged: indices 0..11 once each, all ok")
PY
if [ -e pwned ] || find "$work" -name pwned | grep -q .; then fail "a path in a batch script ran as a command"; fi
echo "PASS: 3 array tasks and a dependent merge job on a real Slurm produced all 12 points"
