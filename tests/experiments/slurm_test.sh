#!/usr/bin/env bash
# Runs `spansim campaign slurm` against a real single-node Slurm started here: munged, slurmctld and slurmd on
# this machine, configured in a temporary directory (nothing in /etc is touched), stopped on exit.
# Usage: slurm_test.sh SPANSIM_BINARY SOURCE_DIR. Exit 0 pass, 1 fail, 77 skip (Slurm cannot run here: says why).
set -uo pipefail

spansim=$1
src=$2
campaign=$src/tests/experiments/data/tiny-campaign.json


source "$(dirname "$0")/local_slurm.sh"

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
