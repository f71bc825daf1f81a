#!/usr/bin/env bash
# Runs spansim's fuzz targets (fuzz/: one per parser).
#   scripts/fuzz.sh run BUILD SECONDS [TARGET...]  libFuzzer (BUILD configured with -DSPANSIM_FUZZ=ON), each target
#                                                 for SECONDS on its seeds, its corpus in BUILD/fuzz-corpus/TARGET
#   scripts/fuzz.sh smoke BUILD SECONDS [TARGET...] as run, from the seeds alone (a fresh corpus each time), so
#                                                 that the time stays SECONDS per target however large the corpora grow
#   scripts/fuzz.sh replay BUILD [TARGET...]       the seeds and tests/data/fuzz/TARGET through fuzz_replay_TARGET
# Seeds are the shipped examples of each format (and fuzz/seeds/); tests/data/fuzz/TARGET holds past findings,
# kept as regression inputs. A finding (crash, sanitizer report, escaped exception, timeout, memory limit) is
# written to BUILD/fuzz-findings/ and makes the run fail.
set -euo pipefail
shopt -s inherit_errexit

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mode="${1:?usage: fuzz.sh run|replay BUILD [SECONDS] [TARGET...]}"
if [ ! -d "${2:?build folder}" ]; then
  echo "$2 does not exist (make fuzz-build; make test builds it)" >&2
  [ "$mode" = smoke ] && exit 77 # ctest: skipped
  exit 1
fi
build="$(cd "$2" && pwd)"
shift 2
seconds=0
if [ "$mode" = run ] || [ "$mode" = smoke ]; then
  seconds="${1:?seconds per target}"
  shift
fi
all=(units topology graphml job scenario optimize campaign calibration shared kineto chakra zoo python)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

seeds_of() {
  case "$1" in
  units) echo fuzz/seeds/units/* ;;
  topology) echo topology/presets/*.json examples/topologies/*.json ;;
  graphml) echo examples/topologies/*.graphml fuzz/seeds/graphml/* ;;
  job) echo examples/jobs/*.json ;;
  scenario) echo examples/scenarios/*.json ;;
  optimize) echo examples/optimize/*.json ;;
  campaign) echo experiments/campaigns/*.json tests/experiments/data/tiny-campaign.json ;;
  calibration) echo validation/published-runs.json ;;
  shared) echo examples/shared/*.json ;;
  kineto) echo fuzz/seeds/kineto/* ;;
  chakra) echo fuzz/seeds/chakra/* ;;
  zoo) echo fuzz/seeds/zoo/* ;;
  python) echo fuzz/seeds/python/* ;;
  *) echo "unknown fuzz target $1 (allowed: ${all[*]})" >&2; exit 2 ;;
  esac
}

# libFuzzer reads corpora from folders: each target's seeds are copied into one (private to this run).
seed_dir() {
  local d="$scratch/seeds-$1"
  rm -rf "$d" && mkdir -p "$d"
  # shellcheck disable=SC2046
  cp $(seeds_of "$1") "$d/"
  echo "$d"
}

scratch="$build/fuzz-tmp.$$"
mkdir -p "$scratch"
trap 'rm -rf "$scratch"' EXIT
failed=0

if [ "$mode" = replay ]; then
  for t in "${targets[@]}"; do
    bin="$build/fuzz/fuzz_replay_$t"
    [ -x "$bin" ] || { echo "$bin is not built (ninja fuzz_targets)" >&2; exit 1; }
    regress=()
    [ -d "tests/data/fuzz/$t" ] && regress=("tests/data/fuzz/$t")
    # shellcheck disable=SC2046
    if ! out=$(TMPDIR="$scratch" "$bin" $(seeds_of "$t") --may-refuse "${regress[@]}" 2>&1); then
      echo "$t: FINDING"; echo "$out" | tail -20; failed=1
    else
      echo "$t: $(echo "$out" | tail -1)"
    fi
  done
  exit $failed
fi

[ "$mode" = run ] || [ "$mode" = smoke ] || { echo "unknown mode $mode (allowed: run, smoke, replay)" >&2; exit 2; }
findings="$build/fuzz-findings"
mkdir -p "$findings"
printf '%-12s %12s %10s %8s %9s  %s\n' target executions exec/s corpus "peak MiB" result
for t in "${targets[@]}"; do
  bin="$build/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "$bin is not built (make fuzz-build; make test builds it)" >&2
    [ "$mode" = smoke ] && exit 77 # ctest: skipped
    exit 1
  fi
  corpus="$build/fuzz-corpus/$t"
  [ "$mode" = smoke ] && corpus="$scratch/corpus-$t"
  mkdir -p "$corpus"
  seeds="$(seed_dir "$t")"
  regress=()
  [ -d "tests/data/fuzz/$t" ] && regress=("tests/data/fuzz/$t")
  log="$build/fuzz-$t.log"
  [ "$mode" = smoke ] && log="$scratch/fuzz-$t.log"
  result=ok
  # A unit may take 60 s before it counts as a hang: one that reads the 1.1 MB torus GraphML takes ~6 s under ASan
  # on an idle core and ran past 25 s on a loaded 2-core machine (a timeout that was only the machine's load).
  if ! TMPDIR="$scratch" "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=60 -max_len=262144 \
    -print_final_stats=1 -artifact_prefix="$findings/$t-" "$corpus" "$seeds" "${regress[@]}" >"$log" 2>&1; then
    result="FINDING (in $findings)"
    tail -40 "$log" >&2
    failed=1
  fi
  stat() { grep -m1 "stat::$1:" "$log" | awk '{print $2}'; }
  printf '%-12s %12s %10s %8s %9s  %s\n' "$t" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
    "$(find "$corpus" -type f | wc -l)" "$(stat peak_rss_mb)" "$result"
done
exit $failed
