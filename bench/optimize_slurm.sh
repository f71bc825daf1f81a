#!/usr/bin/env bash
# Bench (not a test): an optimize example with tiers 2 and 3 as job arrays on a real single-node Slurm started here
# (tests/experiments/local_slurm.sh), with each phase's wall time, its tasks' own run times (from their logs) and
# the Slurm overhead per task: (wall x concurrent tasks - the tasks' run times) / tasks, which holds queueing, job
# start-up and each task's set-up (reading the spec, building the topology).
# With KILL_AFTER (seconds), the search is first killed with SIGKILL that long after it starts, then run again on the
# same output folder: the table's "found" column shows the points the rerun took from the first run's records.
# Usage: bench/optimize_slurm.sh SPANSIM [EXAMPLE] [TASK_TIME] [KILL_AFTER]; default the 262,144-GPU three-regions
# example, no kill.
set -uo pipefail
spansim=$(readlink -f "$1")
src=$(cd "$(dirname "$0")/.." && pwd)
example=${2:-$src/examples/optimize/llama3-405b-262k-three-regions.json}
task_time=${3:-5min}
kill_after=${4:-0}

source "$src/tests/experiments/local_slurm.sh"

if [ "$kill_after" != 0 ]; then
  first=$(date +%s.%N)
  "$spansim" optimize "$example" --out "$work/out" --slurm --task-time "$task_time" --json > /dev/null 2> "$work/killed.err" &
  pid=$!
  sleep "$kill_after"
  kill -0 "$pid" 2>/dev/null || fail "the search ended within $kill_after s: nothing to resume"
  kill -9 "$pid"
  wait "$pid" 2>/dev/null
  echo "killed the search with SIGKILL after $kill_after s; $(ls "$work/out/slurm/records" 2>/dev/null | wc -l) records kept; \
started again on the same folder (the wall time below is the second run's; both runs: see its end)"
fi

start=$(date +%s.%N)
/usr/bin/time -f "%e s wall, %M KiB peak RSS (the search's own process)" \
  "$spansim" optimize "$example" --out "$work/out" --slurm --task-time "$task_time" --json > "$work/result.json" \
  || { for f in "$work"/out/slurm/phase-*/*.log; do echo "--- $f" >&2; tail -n 5 "$f" >&2; done; fail "optimize --slurm failed"; }
end=$(date +%s.%N)
[ "$kill_after" != 0 ] && /usr/bin/python3 -c "import sys; print(f'both runs: {float(sys.argv[2]) - float(sys.argv[1]):.0f} s')" "$first" "$end"
/usr/bin/python3 - "$work/result.json" "$work/out/slurm" "$cpus" "$start" "$end" <<'PY'
import glob, json, os, re, sys
j = json.load(open(sys.argv[1]))
root, cpus, wall = sys.argv[2], int(sys.argv[3]), float(sys.argv[5]) - float(sys.argv[4])
print(f"{j['spec']['name']}: {j['spec']['gpus']} GPUs, refine {j['spec']['refine_fidelity']}; whole search {wall:.0f} s "
      f"on {cpus} CPUs; best {j['ranked'][0]['label']} {j['ranked'][0]['step_time_s']:.3f} s")
print("| phase | points | found | measured here | tasks x points | wall | tasks' run time | Slurm overhead per task |")
print("|---|--:|--:|--:|--:|--:|--:|--:|")
for p in j["slurm"]:
    runs = []
    for log in glob.glob(os.path.join(root, p["phase"], "task-*.log")):
        m = re.search(r"evaluated in ([0-9.e+]+) s", open(log).read())
        if m:
            runs.append(float(m.group(1)))
    overhead = ""
    if p["tasks"] > 0 and runs:
        slots = min(p["tasks"], cpus)
        overhead = f"{max(0.0, p['wall_seconds'] * slots - sum(runs)) / p['tasks']:.1f} s"
    print(f"| {p['phase']} | {p['items']} | {p['found']} | {p['measured']} ({p['item_seconds']:.1f} s) | "
          f"{p['tasks']} x {p['per_task']} | {p['wall_seconds']:.1f} s | {sum(runs):.1f} s | {overhead} |")
PY
