#!/usr/bin/env bash
# `spansim optimize --slurm` against a real single-node Slurm started here (tests/experiments/local_slurm.sh): the
# Llama 3 8B two-regions example, its top 10 refined (tasks sized at 2 s: tier 3's points run as tasks of one, a
# window of several seconds to kill it in), gives with tiers 2 and 3 as job arrays the local run's ranked table, bit
# for bit; a search
# killed with SIGKILL while tier 3's array runs and started again loses no recorded point and ends with the same
# table. Usage: slurm_optimize_test.sh SPANSIM_BINARY SOURCE_DIR. Exit 0 pass, 1 fail, 77 skip (says why).
set -uo pipefail

spansim=$1
src=$2
source "$(dirname "$0")/local_slurm.sh"

spec=$work/llama3-8b-two-regions-top10.json
/usr/bin/python3 - "$src/examples/optimize/llama3-8b-two-regions.json" "$spec" <<'PY' || fail "could not write the spec"
import json, sys
spec = json.load(open(sys.argv[1]))
spec["top_k"] = 10
json.dump(spec, open(sys.argv[2], "w"))
PY

# The same tables: every ranked point's configuration, scores, step and metrics, the baseline, the single
# change and the search's counts, compared as JSON values (doubles exactly).
same_tables() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def table(j):
    drop = lambda e: {k: v for k, v in e.items() if k != "scenario"}
    search = {k: v for k, v in j["search"].items() if "seconds" not in k}
    return {"ranked": [drop(e) for e in j["ranked"]], "baseline": drop(j["baseline"]),
            "single": drop(j.get("best_single_change", {})), "search": search,
            "by_dimension": j["best_change_by_dimension"]}
ta, tb = table(a), table(b)
for key in ta:
    if ta[key] != tb[key]:
        print(f"differs in {key}:\n local {json.dumps(ta[key])[:600]}\n slurm {json.dumps(tb[key])[:600]}")
        sys.exit(1)
print(f"same ranked table: {len(ta['ranked'])} points, best {ta['ranked'][0]['label']} "
      f"{ta['ranked'][0]['step_time_s']!r} s in both")
PY
}

echo "== local run"
timeout 600 "$spansim" optimize "$spec" --out "$work/local" --json > "$work/local.json" || fail "the local optimize failed"

echo "== Slurm run (tiers 2 and 3 as job arrays, tasks of about 2 s)"
timeout 900 "$spansim" optimize "$spec" --out "$work/slurm" --slurm --task-time 2s --json > "$work/slurm.json" \
  || { for f in "$work"/slurm/slurm/phase-*/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done; fail "optimize --slurm failed"; }
/usr/bin/python3 - "$work/slurm.json" <<'PY' || fail "the Slurm run did not send tiers 2 and 3 to job arrays"
import json, sys
phases = json.load(open(sys.argv[1]))["slurm"]
for p in phases:
    print(f"  {p['phase']}: {p['items']} points, {p['measured']} measured here ({p['item_seconds']:.2f} s), "
          f"{p['tasks']} tasks of {p['per_task']}, array {p['array_job']}, {p['wall_seconds']:.1f} s")
assert [p["work"] for p in phases] == ["score", "score", "refine"], phases
assert all(p["array_job"] for p in phases if p["items"] > p["found"] + p["measured"]), phases
# Scoring is sized by a point timed first, the single changes by tier 2's rate, tier 3 by a point timed beside it.
assert phases[0]["sized_by"] == "here", phases[0]
assert phases[1]["sized_by"] in ("phase-1-score", ""), phases[1]
assert phases[2]["sized_by"] == "beside" and phases[2]["measured"] == 1 and phases[2]["item_seconds"] > 0, phases[2]
PY
same_tables "$work/local.json" "$work/slurm.json" || fail "optimize --slurm ranked differently from the local run"

echo "== killed with SIGKILL during tier 3, then resumed"
"$spansim" optimize "$spec" --out "$work/kill" --slurm --task-time 2s --json > "$work/kill-1.json" 2> "$work/kill-1.err" &
coordinator=$!
records=$work/kill/slurm/records
for _ in $(seq 600); do
  n=$(ls "$records" 2>/dev/null | grep -c '^refine-.*\.rec$')
  [ -s "$work/kill/slurm/phase-3-refine/jobs" ] && [ "$n" -ge 2 ] && break
  kill -0 $coordinator 2>/dev/null || { cat "$work/kill-1.err" >&2; fail "the search ended before tier 3's array recorded a point"; }
  sleep 0.5
done
kill -0 $coordinator 2>/dev/null || fail "the search ended before it could be killed during tier 3"
kill -9 $coordinator
wait $coordinator 2>/dev/null
before=$(cd "$records" && ls | grep '^refine-.*\.rec$' | sort)
nbefore=$(echo "$before" | grep -c .)
[ "$nbefore" -ge 2 ] || fail "no tier-3 point was recorded before the kill"
stamps=$(cd "$records" && for f in $before; do stat -c '%n %Y.%y' "$f"; done)
echo "killed with $nbefore tier-3 points recorded (array and merge jobs $(cat "$work/kill/slurm/phase-3-refine/jobs"))"
timeout 900 "$spansim" optimize "$spec" --out "$work/kill" --slurm --task-time 2s --json > "$work/kill-2.json" \
  || fail "the resumed optimize --slurm failed"
after=$(cd "$records" && for f in $before; do stat -c '%n %Y.%y' "$f"; done)
[ "$stamps" = "$after" ] || fail "points recorded before the kill were evaluated again"
/usr/bin/python3 - "$work/kill-2.json" "$nbefore" <<'PY' || fail "the resumed run did not find the points recorded before the kill"
import json, sys
phases = {p["phase"]: p for p in json.load(open(sys.argv[1]))["slurm"]}
refine = phases["phase-3-refine"]
assert phases["phase-1-score"]["found"] == phases["phase-1-score"]["items"], phases["phase-1-score"]
assert refine["found"] >= int(sys.argv[2]), refine
print(f"resumed: tier 2 all {phases['phase-1-score']['items']} found; tier 3 {refine['found']} of {refine['items']} found")
PY
same_tables "$work/local.json" "$work/kill-2.json" || fail "the resumed search ranked differently from the local run"
# Another search (the same spec on H200) into the same --out: refused before a task runs, never answered from the
# first search's records, whose names are the points' alone.
/usr/bin/python3 - "$spec" "$work/other.json" <<'PY' || fail "could not write the other spec"
import json, sys
spec = json.load(open(sys.argv[1]))
spec["gpu"] = "h200"
json.dump(spec, open(sys.argv[2], "w"))
PY
"$spansim" optimize "$work/other.json" --out "$work/kill" --slurm --task-time 2s > "$work/other.out" 2> "$work/other.err"
code=$?
[ "$code" = 2 ] || fail "another search into the same --out exited $code (expected 2): $(cat "$work/other.err")"
grep -q "holds the records of another search" "$work/other.err" || fail "unexpected refusal: $(cat "$work/other.err")"
echo "PASS: optimize --slurm ranks as the local run does, a SIGKILL during tier 3 loses no recorded point, and another search's records are refused"
