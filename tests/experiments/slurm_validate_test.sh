#!/usr/bin/env bash
# `spansim validate --slurm` against a real single-node Slurm started here (tests/experiments/local_slurm.sh): three
# published runs (two fit rows and a check row of the SC21 A100 series) with their leave-one-out refits, the
# simulations as job arrays, give the local run's rows and MAPEs exactly; run again, every simulation is found in
# its record; the same folder with other inputs is refused. Usage: slurm_validate_test.sh SPANSIM_BINARY SOURCE_DIR.
# Exit 0 pass, 1 fail, 77 skip (says why).
set -uo pipefail

spansim=$1
src=$2
only=(--only sc21-gpt-1.7b --only sc21-gpt-7.5b --only sc21-gpt-76.1b)


source "$(dirname "$0")/local_slurm.sh"

same() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for key in ("rows", "mape", "profiles"):
    if a[key] != b[key]:
        print(f"differs in {key}:\n local {json.dumps(a[key])[:500]}\n slurm {json.dumps(b[key])[:500]}")
        sys.exit(1)
print(f"same rows and MAPEs: {len(a['rows'])} rows, fit MAPE {a['mape']['fit']!r}, check {a['mape']['check']!r}")
PY
}

echo "== local run"
timeout 600 "$spansim" validate "${only[@]}" --json > "$work/local.json" || fail "the local validate failed"
echo "== Slurm run"
timeout 900 "$spansim" validate "${only[@]}" --slurm --out "$work/v" --task-time 5s --json > "$work/slurm.json" \
  || { for f in "$work"/v/slurm-map/map-*/*.log; do echo "--- $f" >&2; tail -n 5 "$f" >&2; done; fail "validate --slurm failed"; }
/usr/bin/python3 - "$work/slurm.json" <<'PY' || fail "validate --slurm sent no map to a job array"
import json, sys
maps = json.load(open(sys.argv[1]))["slurm"]
for m in maps:
    print(f"  map {m['map']}: {m['items']} items, {m['found']} found, {m['measured']} measured here, "
          f"{m['tasks']} tasks of {m['per_task']}, array {m['array_job']!r}, {m['wall_seconds']:.1f} s")
assert len(maps) >= 2 and any(m["array_job"] for m in maps), maps
PY
same "$work/local.json" "$work/slurm.json" || fail "validate --slurm differs from the local run"
echo "== run again: every simulation found"
timeout 600 "$spansim" validate "${only[@]}" --slurm --out "$work/v" --json > "$work/again.json" || fail "the second validate --slurm failed"
/usr/bin/python3 - "$work/again.json" <<'PY' || fail "the second run evaluated items again"
import json, sys
maps = json.load(open(sys.argv[1]))["slurm"]
assert all(m["found"] == m["items"] and not m["array_job"] for m in maps), maps
print(f"  all {sum(m['items'] for m in maps)} items of {len(maps)} maps found in their records")
PY
same "$work/local.json" "$work/again.json" || fail "the resumed validate differs from the local run"
echo "== the folder with other inputs"
err=$("$spansim" validate --only sc21-gpt-1.7b --slurm --out "$work/v" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && echo "$err" | grep -q "holds the records of another command" || fail "other inputs on the same folder: exit $rc, \"$err\""
echo "PASS: validate --slurm gives the local rows and MAPEs, resumes from its records and refuses another command's folder"
